// RemoteTarget: URL schemes to HTTP endpoints and authentication.
#include "io/remote_target.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr std::string_view kDefaultGcsEndpoint = "https://storage.googleapis.com";
constexpr std::string_view kDefaultRegion = "us-east-1";

// Endpoint is "scheme://authority[/prefix]" taken apart.
struct Endpoint {
  std::string scheme;
  std::string authority;
  std::string prefix;  // decoded path prefix without a trailing '/'
};

absl::StatusOr<Endpoint> ParseEndpoint(std::string_view text, std::string_view what) {
  std::string_view rest = text;
  Endpoint e;
  const size_t scheme_end = rest.find("://");
  if (scheme_end == std::string_view::npos) {
    e.scheme = "http";  // STORAGE_EMULATOR_HOST is often "host:port"
  } else {
    e.scheme = AsciiLower(rest.substr(0, scheme_end));
    rest.remove_prefix(scheme_end + 3);
  }
  if (e.scheme != "http" && e.scheme != "https") {
    return absl::InvalidArgumentError(Cat(what, " '", text, "' is not an http(s) URL"));
  }
  const size_t slash = rest.find('/');
  e.authority = std::string(rest.substr(0, slash));
  if (e.authority.empty()) {
    return absl::InvalidArgumentError(Cat(what, " '", text, "' has no host"));
  }
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    e.prefix = std::string(prefix);
  }
  return e;
}

// BucketAndKey splits "s3://bucket/key" after its scheme.
absl::Status BucketAndKey(std::string_view url, std::string_view rest, std::string& bucket,
                          std::string& key) {
  const size_t slash = rest.find('/');
  if (slash == 0 || rest.empty()) {
    return absl::InvalidArgumentError(Cat(url, ": no bucket (expected scheme://bucket/key)"));
  }
  if (slash == std::string_view::npos || slash + 1 == rest.size()) {
    return absl::InvalidArgumentError(Cat(url, ": no object key (expected scheme://bucket/key)"));
  }
  bucket = std::string(rest.substr(0, slash));
  key = std::string(rest.substr(slash + 1));
  return absl::OkStatus();
}

std::string HomeCredentialsFile() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "";
  return Cat(home, "/.aws/credentials");
}

sigv4::Credentials ToSigv4(const AwsCredentials& c) {
  return {c.access_key_id, c.secret_access_key, c.session_token};
}

}  // namespace

absl::StatusOr<sigv4::Credentials> ParseAwsCredentialsFile(std::string_view text,
                                                           std::string_view profile,
                                                           std::string_view source) {
  std::istringstream in{std::string(text)};
  std::string line;
  bool in_profile = false, found = false;
  sigv4::Credentials c;
  while (std::getline(in, line)) {
    std::string_view l = StripWhitespace(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      in_profile = StripWhitespace(l.substr(1, l.size() - 2)) == profile;
      found = found || in_profile;
      continue;
    }
    const size_t eq = l.find('=');
    if (!in_profile || eq == std::string_view::npos) continue;
    const std::string key = AsciiLower(StripWhitespace(l.substr(0, eq)));
    const std::string value(StripWhitespace(l.substr(eq + 1)));
    if (key == "aws_access_key_id") c.access_key_id = value;
    if (key == "aws_secret_access_key") c.secret_access_key = value;
    if (key == "aws_session_token") c.session_token = value;
  }
  if (!found) return absl::NotFoundError(Cat(source, ": no profile [", profile, "]"));
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        Cat(source, ": profile [", profile, "] lacks aws_access_key_id or aws_secret_access_key"));
  }
  return c;
}

AwsCredentialSource::AwsCredentialSource(const RemoteOptions& options)
    : explicit_(options.aws_credentials),
      file_(options.aws_credentials_file.empty() ? HomeCredentialsFile()
                                                 : options.aws_credentials_file),
      profile_(options.aws_profile.empty() ? "default" : options.aws_profile) {}

absl::StatusOr<std::optional<sigv4::Credentials>> AwsCredentialSource::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (found_.has_value()) return *found_;
  if (explicit_.has_value()) {
    found_ = std::optional<sigv4::Credentials>(ToSigv4(*explicit_));
    return *found_;
  }
  std::ifstream in(file_);
  if (file_.empty() || !in) {
    // No credentials anywhere: anonymous requests, as for public buckets.
    found_ = std::optional<sigv4::Credentials>();
    return *found_;
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<sigv4::Credentials> parsed = ParseAwsCredentialsFile(text.str(), profile_, file_);
  if (parsed.ok()) {
    found_ = std::optional<sigv4::Credentials>(*parsed);
  } else {
    found_ = parsed.status();
  }
  return *found_;
}

absl::Status CheckHttpHeaders(const std::vector<std::pair<std::string, std::string>>& headers,
                              std::string_view url) {
  // RFC 9110's token characters.
  constexpr std::string_view kTokenPunctuation = "!#$%&'*+-.^_`|~";
  for (const auto& [name, value] : headers) {
    const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [&](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             kTokenPunctuation.find(c) != std::string_view::npos;
    });
    if (!token) {
      return absl::InvalidArgumentError(
          Cat(url, ": the HTTP header name '", name, "' is not an HTTP token"));
    }
    // Set by the reader (a range, the version it reads), or by libcurl for
    // the transfer; Accept-Encoding would bring bytes the reader does not
    // decompress.
    static constexpr std::string_view kReserved[] = {"range",
                                                     "if-match",
                                                     "if-unmodified-since",
                                                     "if-none-match",
                                                     "if-modified-since",
                                                     "if-range",
                                                     "host",
                                                     "accept-encoding",
                                                     "te",
                                                     "content-length",
                                                     "transfer-encoding",
                                                     "connection",
                                                     "expect",
                                                     "upgrade"};
    const std::string lower = AsciiLower(name);
    if (std::find(std::begin(kReserved), std::end(kReserved), lower) != std::end(kReserved)) {
      return absl::InvalidArgumentError(
          Cat(url, ": the HTTP header ", name, " is set by the reader itself"));
    }
    if (value.empty()) {
      // libcurl would take "Name:" as "send no such header".
      return absl::InvalidArgumentError(Cat(url, ": the HTTP header ", name, " has no value"));
    }
    if (value.find_first_of("\r\n", 0, 3) != std::string::npos) {
      // The value is not quoted: it may be a secret.
      return absl::InvalidArgumentError(
          Cat(url, ": the value of the HTTP header ", name, " holds a line break or a NUL"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RemoteTarget> RemoteTarget::Resolve(std::string_view url,
                                                   const RemoteOptions& options,
                                                   AwsCredentialSource& credentials) {
  RemoteTarget t;
  const size_t scheme_end = url.find("://");
  const std::string scheme =
      scheme_end == std::string_view::npos ? "" : AsciiLower(url.substr(0, scheme_end));
  const std::string_view rest =
      scheme_end == std::string_view::npos ? url : url.substr(scheme_end + 3);
  if (scheme == "http" || scheme == "https") {
    if (absl::Status s = CheckHttpHeaders(options.http_headers, url); !s.ok()) return s;
    t.http_url_ = std::string(url);
    t.follow_redirects_ = true;
    t.extra_headers_ = options.http_headers;
    return t;
  }
  if (scheme != "s3" && scheme != "gs") {
    return absl::InvalidArgumentError(Cat(url, ": not an http(s), s3 or gs URL"));
  }
  std::string bucket, key;
  if (absl::Status s = BucketAndKey(url, rest, bucket, key); !s.ok()) return s;

  Endpoint endpoint;
  bool path_style = true;
  if (scheme == "s3") {
    t.region_ = options.s3_region.empty() ? std::string(kDefaultRegion) : options.s3_region;
    if (options.s3_endpoint.empty()) {
      endpoint = {"https", Cat("s3.", t.region_, ".amazonaws.com"), ""};
      // Virtual-hosted style is AWS's default; a dotted bucket name would not
      // match the wildcard certificate.
      path_style =
          options.s3_addressing == S3Addressing::kPathStyle ||
          (options.s3_addressing == S3Addressing::kAuto && bucket.find('.') != std::string::npos);
    } else {
      absl::StatusOr<Endpoint> e = ParseEndpoint(options.s3_endpoint, "S3 endpoint");
      if (!e.ok()) return absl::InvalidArgumentError(Cat(url, ": ", ToStd(e.status().message())));
      endpoint = *e;
      path_style = options.s3_addressing != S3Addressing::kVirtualHosted;
    }
    absl::StatusOr<std::optional<sigv4::Credentials>> c = credentials.Get();
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          Cat(url, ": AWS credentials: ", ToStd(c.status().message())));
    }
    if (c->has_value()) {
      t.auth_ = Auth::kSigV4;
      t.credentials_ = **c;
    }
  } else {
    absl::StatusOr<Endpoint> e = ParseEndpoint(
        options.gcs_endpoint.empty() ? kDefaultGcsEndpoint : options.gcs_endpoint, "GCS endpoint");
    if (!e.ok()) return absl::InvalidArgumentError(Cat(url, ": ", ToStd(e.status().message())));
    endpoint = *e;
    if (options.gcs_hmac.has_value()) {
      t.auth_ = Auth::kSigV4;
      t.credentials_ = ToSigv4(*options.gcs_hmac);
      t.region_ = "auto";
    } else if (!options.gcs_token.empty()) {
      t.auth_ = Auth::kBearer;
      t.bearer_ = options.gcs_token;
    }
  }
  t.host_ = path_style ? endpoint.authority : Cat(bucket, ".", endpoint.authority);
  t.path_ =
      path_style ? Cat(endpoint.prefix, "/", bucket, "/", key) : Cat(endpoint.prefix, "/", key);
  t.http_url_ = Cat(endpoint.scheme, "://", t.host_, sigv4::UriEncode(t.path_, true));
  return t;
}

HttpRequest RemoteTarget::Request(bool head,
                                  std::vector<std::pair<std::string, std::string>> headers) const {
  HttpRequest request;
  request.head = head;
  Authenticate(head ? "HEAD" : "GET", {}, std::move(headers), sigv4::kEmptyPayloadHash, request);
  return request;
}

HttpRequest RemoteTarget::Send(std::string method,
                               const std::vector<std::pair<std::string, std::string>>& query,
                               std::vector<std::pair<std::string, std::string>> headers,
                               std::string_view body) const {
  HttpRequest request;
  request.method = std::move(method);
  request.body = body;
  const std::string payload_hash =
      auth_ == Auth::kSigV4 ? sigv4::Sha256Hex(body) : std::string(sigv4::kEmptyPayloadHash);
  Authenticate(request.method, query, std::move(headers), payload_hash, request);
  return request;
}

void RemoteTarget::Authenticate(const std::string& method,
                                const std::vector<std::pair<std::string, std::string>>& query,
                                std::vector<std::pair<std::string, std::string>> headers,
                                std::string_view payload_hash, HttpRequest& request) const {
  request.url = http_url_;
  for (size_t i = 0; i < query.size(); ++i) {
    request.url += Cat(i == 0 ? "?" : "&", sigv4::UriEncode(query[i].first, false), "=",
                       sigv4::UriEncode(query[i].second, false));
  }
  request.follow_redirects = follow_redirects_;
  if (auth_ == Auth::kSigV4) {
    sigv4::Request r;
    r.method = method;
    r.path = path_;
    r.query = query;
    r.headers = std::move(headers);
    r.payload_hash = std::string(payload_hash);
    sigv4::SignS3(r, host_, credentials_, region_, sigv4::AmzDate(std::time(nullptr)));
    request.headers = std::move(r.headers);
  } else {
    request.headers = std::move(headers);
    if (auth_ == Auth::kBearer)
      request.headers.emplace_back("Authorization", Cat("Bearer ", bearer_));
  }
  request.headers.insert(request.headers.end(), extra_headers_.begin(), extra_headers_.end());
}

}  // namespace wds
