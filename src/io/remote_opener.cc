// MakeOpener and RemoteOptions::FromEnvironment.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "io/local_url.h"
#include "io/remote_stream.h"
#include "io/remote_target.h"
#include "io/shard_cache.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/io/remote.h"

namespace wds {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// ParseByteCount reads "1000000", "1e9", "512M", "3G", "2TiB".
absl::StatusOr<int64_t> ParseByteCount(const std::string& text, const char* variable) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        Cat(variable, "='", text, "' is not a byte count (e.g. 50000000000, 5e10, 50G)"));
  };
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno != 0 || !(value >= 0) || !std::isfinite(value)) return bad();
  std::string unit = AsciiLower(end);
  double scale = 1;
  if (!unit.empty() && std::string_view("kmgt").find(unit[0]) != std::string_view::npos) {
    scale = std::pow(1024.0, 1 + static_cast<int>(std::string_view("kmgt").find(unit[0])));
    unit.erase(0, 1);
  }
  if (unit != "" && unit != "b" && unit != "ib") return bad();
  const double bytes = value * scale;
  if (bytes > 9.2e18) return bad();
  return static_cast<int64_t>(bytes);
}

absl::StatusOr<bool> ParseFlag(const std::string& text, const char* variable) {
  const std::string v = AsciiLower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(Cat(variable, "='", text, "' is not a boolean (1 or 0)"));
}

}  // namespace

// RemoteSession is what every copy of one opener shares.
class RemoteSession {
 public:
  explicit RemoteSession(RemoteOptions options)
      : options_(std::move(options)),
        pool_(std::make_shared<TransferPool>()),
        credentials_(options_) {
    if (!options_.cache_dir.empty()) {
      cache_ = std::make_shared<ShardCache>(options_.cache_dir, options_.cache_size);
    }
  }

  // Open opens a remote `url` from `offset` on, through the cache when
  // there is one and `cached`.
  absl::StatusOr<std::unique_ptr<ByteStream>> Open(std::string_view url_view, int64_t offset,
                                                   bool cached) {
    std::string url(url_view);
    absl::StatusOr<RemoteTarget> target = RemoteTarget::Resolve(url, options_, credentials_);
    if (!target.ok()) return target.status();
    auto open = [&](int64_t at) { return RemoteStream::Open(url, *target, options_, pool_, at); };
    if (cache_ == nullptr || !cached) {
      absl::StatusOr<std::unique_ptr<RemoteStream>> stream = open(offset);
      if (!stream.ok()) return stream.status();
      return std::unique_ptr<ByteStream>(*std::move(stream));
    }
    ShardCache::Revalidate revalidate;
    if (options_.cache_revalidate) {
      revalidate = [&]() { return RemoteStream::Head(url, *target, options_, *pool_); };
    }
    return cache_->Open(url, offset, open, revalidate);
  }

  // OpenRange requests bytes [offset, end) of a remote `url` from its server.
  absl::StatusOr<std::unique_ptr<RemoteStream>> OpenRange(const std::string& url, int64_t offset,
                                                          int64_t end, const ObjectVersion& pin) {
    absl::StatusOr<RemoteTarget> target = RemoteTarget::Resolve(url, options_, credentials_);
    if (!target.ok()) return target.status();
    return RemoteStream::Open(url, *std::move(target), options_, pool_, offset, end, pin);
  }

  // cache is the cache directory's, null without one.
  ShardCache* cache() const { return cache_.get(); }
  // CachesCommand says whether `url` is a pipe: command whose output the
  // cache keeps (RemoteOptions::cache_pipes).
  bool CachesCommand(std::string_view url) const {
    return cache_ != nullptr && options_.cache_pipes && StartsWith(url, "pipe:");
  }

 private:
  const RemoteOptions options_;
  std::shared_ptr<TransferPool> pool_;
  AwsCredentialSource credentials_;
  std::shared_ptr<ShardCache> cache_;
};

namespace {

// SkipTo moves `stream` past its first `offset` bytes: by Skip where the
// stream can, by reading where it cannot.
absl::Status SkipTo(ByteStream& stream, int64_t offset) {
  std::vector<char> sink;
  for (int64_t done = 0; done < offset;) {
    absl::StatusOr<int64_t> skipped = stream.Skip(offset - done);
    if (!skipped.ok()) return skipped.status();
    if (*skipped == 0) {
      if (sink.empty()) sink.resize(size_t{1} << 16);
      const size_t want = static_cast<size_t>(std::min<int64_t>(offset - done, sink.size()));
      absl::StatusOr<size_t> n = stream.Read(sink.data(), want);
      if (!n.ok()) return n.status();
      if (*n == 0) {
        return absl::OutOfRangeError(
            Cat(stream.url(), ": the data ends at offset ", done, ", before offset ", offset));
      }
      skipped = static_cast<int64_t>(*n);
    }
    done += *skipped;
  }
  return absl::OkStatus();
}

// OpenLocalAt opens a local path, file:, - or pipe: (OpenLocalUrl) and moves
// it to `offset`.
absl::StatusOr<std::unique_ptr<ByteStream>> OpenLocalAt(std::string_view url, int64_t offset) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenLocalUrl(url);
  if (!stream.ok() || offset == 0) return stream;
  if (absl::Status s = SkipTo(**stream, offset); !s.ok()) return s;
  return stream;
}

// OpenNonRemote opens what is not a remote URL from `offset`: a pipe:
// command through the session's cache when it keeps them, else in place.
absl::StatusOr<std::unique_ptr<ByteStream>> OpenNonRemote(const RemoteSession& session,
                                                          std::string_view url, int64_t offset) {
  if (!session.CachesCommand(url)) return OpenLocalAt(url, offset);
  return session.cache()->OpenCommand(std::string(url), offset,
                                      [url](int64_t at) { return OpenLocalAt(url, at); });
}

// ReadParts fills `parts` from `stream`, which holds [offset, offset + their
// size) of its object at least.
absl::Status ReadParts(ByteStream& stream, int64_t offset,
                       absl::Span<const absl::Span<char>> parts) {
  int64_t at = offset;
  for (absl::Span<char> part : parts) {
    for (size_t filled = 0; filled < part.size();) {
      absl::StatusOr<size_t> n = stream.Read(part.data() + filled, part.size() - filled);
      if (!n.ok()) return n.status();
      if (*n == 0) {
        return absl::DataLossError(Cat(stream.url(), ": the data ends at offset ", at,
                                       ", inside the range read from offset ", offset));
      }
      filled += *n;
      at += static_cast<int64_t>(*n);
    }
  }
  return absl::OkStatus();
}

// ApplyEnvironment sets what the environment says, except for the variables
// named in `skip`, which it does not read; a malformed variable is left out
// and its error kept in `first_error` (the first one only).
void ApplyEnvironment(RemoteOptions& o, absl::Status& first_error,
                      const std::vector<std::string>& skip) {
  auto env = [&](const char* name) {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) return std::string();
    return Env(name);
  };
  auto fail = [&](absl::Status s) {
    if (first_error.ok()) first_error = std::move(s);
  };
  auto flag = [&](const char* variable, bool& out) {
    if (std::string v = env(variable); !v.empty()) {
      absl::StatusOr<bool> parsed = ParseFlag(v, variable);
      parsed.ok() ? void(out = *parsed) : fail(parsed.status());
    }
  };
  o.ca_file = env("CURL_CA_BUNDLE");
  flag("WDS_TLS_VERIFY", o.verify_tls);
  o.s3_endpoint = env("AWS_ENDPOINT_URL_S3");
  if (o.s3_endpoint.empty()) o.s3_endpoint = env("AWS_ENDPOINT_URL");
  o.s3_region = env("AWS_REGION");
  if (o.s3_region.empty()) o.s3_region = env("AWS_DEFAULT_REGION");
  const std::string key = env("AWS_ACCESS_KEY_ID"), secret = env("AWS_SECRET_ACCESS_KEY");
  if (!key.empty() && !secret.empty()) {
    o.aws_credentials = AwsCredentials{key, secret, env("AWS_SESSION_TOKEN")};
  } else if (!key.empty() || !secret.empty()) {
    fail(absl::InvalidArgumentError(
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together"));
  }
  o.aws_profile = env("AWS_PROFILE");
  o.aws_credentials_file = env("AWS_SHARED_CREDENTIALS_FILE");
  o.gcs_endpoint = env("STORAGE_EMULATOR_HOST");
  o.gcs_token = env("GOOGLE_OAUTH_ACCESS_TOKEN");
  const std::string hmac_id = env("WDS_GCS_HMAC_ACCESS_ID"), hmac = env("WDS_GCS_HMAC_SECRET");
  if (!hmac_id.empty() && !hmac.empty()) {
    o.gcs_hmac = AwsCredentials{hmac_id, hmac, ""};
  } else if (!hmac_id.empty() || !hmac.empty()) {
    fail(absl::InvalidArgumentError(
        "WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET must be set together"));
  }
  o.cache_dir = env("WDS_CACHE");
  if (std::string v = env("WDS_CACHE_SIZE"); !v.empty()) {
    absl::StatusOr<int64_t> size = ParseByteCount(v, "WDS_CACHE_SIZE");
    size.ok() ? void(o.cache_size = *size) : fail(size.status());
  }
  flag("WDS_CACHE_REVALIDATE", o.cache_revalidate);
  flag("WDS_CACHE_PIPES", o.cache_pipes);
  if (std::string v = env("WDS_OPEN_AHEAD"); !v.empty()) {
    int ahead = 0;
    if (absl::SimpleAtoi(v, &ahead) && ahead >= 0 && ahead <= RemoteOptions::kMaxOpenAhead) {
      o.open_ahead = ahead;
    } else {
      fail(absl::InvalidArgumentError(Cat("WDS_OPEN_AHEAD='", v,
                                          "' is not a whole number from 0 to ",
                                          RemoteOptions::kMaxOpenAhead)));
    }
  }
}

}  // namespace

bool IsRemoteUrl(std::string_view url) {
  const size_t end = url.find("://");
  if (end == std::string_view::npos) return false;
  const std::string scheme = AsciiLower(url.substr(0, end));
  return scheme == "http" || scheme == "https" || scheme == "s3" || scheme == "gs";
}

absl::StatusOr<RemoteOptions> RemoteOptions::ParseFromEnvironment(
    const std::vector<std::string>& skip) {
  RemoteOptions o;
  absl::Status error;
  ApplyEnvironment(o, error, skip);
  if (!error.ok()) return error;
  return o;
}

RemoteOptions RemoteOptions::FromEnvironment() {
  RemoteOptions o;
  absl::Status ignored;
  ApplyEnvironment(o, ignored, {});
  return o;
}

RemoteOpener::RemoteOpener(RemoteOptions options)
    : session_(std::make_shared<RemoteSession>(std::move(options))) {}

absl::StatusOr<std::unique_ptr<ByteStream>> RemoteOpener::Open(std::string_view url) const {
  return OpenAt(url, 0);
}

absl::StatusOr<std::unique_ptr<ByteStream>> RemoteOpener::OpenAt(std::string_view url,
                                                                 int64_t offset) const {
  if (offset < 0) {
    return absl::InvalidArgumentError(Cat(url, ": negative offset ", offset));
  }
  if (IsRemoteUrl(url)) return session_->Open(url, offset, true);
  return OpenNonRemote(*session_, url, offset);
}

absl::StatusOr<ObjectVersion> RemoteOpener::ReadRange(std::string_view url, int64_t offset,
                                                      absl::Span<const absl::Span<char>> parts,
                                                      const ObjectVersion& pin) const {
  int64_t size = 0;
  for (absl::Span<char> part : parts) size += static_cast<int64_t>(part.size());
  if (offset < 0 || size == 0) {
    return absl::InvalidArgumentError(
        Cat(url, ": a range of ", size, " bytes from offset ", offset, " cannot be read"));
  }
  if (!IsRemoteUrl(url)) {
    absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenAt(url, offset);
    if (!stream.ok()) return stream.status();
    WDS_RETURN_IF_ERROR(ReadParts(**stream, offset, parts));
    return ObjectVersion();
  }
  absl::StatusOr<std::unique_ptr<RemoteStream>> stream =
      session_->OpenRange(std::string(url), offset, offset + size, pin);
  if (!stream.ok()) return stream.status();
  WDS_RETURN_IF_ERROR(ReadParts(**stream, offset, parts));
  // The end of the body, read, lets the connection go back to the pool.
  char extra;
  absl::StatusOr<size_t> n = (*stream)->Read(&extra, 1);
  if (!n.ok()) return n.status();
  return (*stream)->version();
}

Opener RemoteOpener::AsOpener() const {
  return [session = session_](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    if (IsRemoteUrl(url)) return session->Open(url, 0, true);
    return OpenNonRemote(*session, url, 0);
  };
}

Opener RemoteOpener::AsUncachedOpener() const {
  return [session = session_](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    if (!IsRemoteUrl(url)) return OpenLocalUrl(url);
    return session->Open(url, 0, false);
  };
}

namespace {

// KeptKey names what is kept of `url` in the cache: no URL has a space.
std::string KeptKey(std::string_view url, std::string_view what) { return Cat(what, " of ", url); }

// VersionLine says which version of an object something kept was made
// from; nullopt for a version nothing could tell from another.
std::optional<std::string> VersionLine(const ObjectVersion& v) {
  if (v.size < 0 || (v.etag.empty() && v.last_modified.empty())) return std::nullopt;
  return Cat("etag ", v.etag, " modified ", v.last_modified, " size ", v.size);
}

}  // namespace

void RemoteOpener::Keep(std::string_view url, std::string_view what, const ObjectVersion& version,
                        std::string_view bytes) const {
  std::optional<std::string> line = VersionLine(version);
  if (session_->cache() == nullptr || !line.has_value()) return;
  session_->cache()->Keep(KeptKey(url, what), *line, bytes);
}

std::optional<std::string> RemoteOpener::Kept(std::string_view url, std::string_view what,
                                              const ObjectVersion& version) const {
  std::optional<std::string> line = VersionLine(version);
  if (session_->cache() == nullptr || !line.has_value()) return std::nullopt;
  return session_->cache()->Kept(KeptKey(url, what), *line);
}

bool RemoteOpener::keeps() const { return session_->cache() != nullptr; }

void RemoteOpener::Forget(std::string_view url, std::string_view what) const {
  if (session_->cache() != nullptr) session_->cache()->Forget(KeptKey(url, what));
}

Opener MakeOpener(RemoteOptions options) { return RemoteOpener(std::move(options)).AsOpener(); }

}  // namespace wds
