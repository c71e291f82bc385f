// RemoteStream: retries, backoff and resumption with validators.
#include "io/remote_stream.h"

#include <curl/curl.h>

#include <algorithm>
#include <ctime>
#include <thread>

#include "wds/base/interrupt.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// Idle transfers kept per pool: one per loader worker is the common need.
constexpr size_t kMaxIdleTransfers = 16;
// The longest server message quoted in an error.
constexpr size_t kMaxQuoted = 300;

std::string Collapse(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
    if (out.size() >= kMaxQuoted) break;
  }
  return out;
}

std::string ServerMessage(std::string_view body) {
  const std::string_view code = Between(body, "<Code>", "</Code>");
  const std::string_view message = Between(body, "<Message>", "</Message>");
  if (!code.empty() || !message.empty()) return Collapse(Cat(code, ": ", message));
  const std::string_view title = Between(body, "<title>", "</title>");
  if (!title.empty()) return Collapse(title);
  return Collapse(body);
}

bool IsStrongEtag(const std::string& etag) { return !etag.empty() && !StartsWith(etag, "W/"); }

}  // namespace

std::string_view Between(std::string_view body, std::string_view open, std::string_view close) {
  const size_t a = body.find(open);
  if (a == std::string_view::npos) return {};
  const size_t b = body.find(close, a + open.size());
  if (b == std::string_view::npos) return {};
  return body.substr(a + open.size(), b - a - open.size());
}

absl::Status Backoff(std::chrono::milliseconds delay) {
  const auto until = std::chrono::steady_clock::now() + delay;
  if (!InterruptCheckInstalled()) {
    std::this_thread::sleep_until(until);
    return absl::OkStatus();
  }
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_until(
        std::min(until, std::chrono::steady_clock::now() + kInterruptCheckInterval));
    WDS_RETURN_IF_ERROR(CheckInterrupt());
  }
  return absl::OkStatus();
}

std::unique_ptr<HttpTransfer> TransferPool::Take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<HttpTransfer> t = std::move(idle_.back());
      idle_.pop_back();
      return t;
    }
  }
  return std::make_unique<HttpTransfer>();
}

void TransferPool::Give(std::unique_ptr<HttpTransfer> transfer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdleTransfers) idle_.push_back(std::move(transfer));
}

bool IsTransientStatus(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

int64_t HttpDate(const std::string& value) {
  if (value.empty()) return -1;
  return curl_getdate(value.c_str(), nullptr);
}

std::chrono::milliseconds RetryAfter(const std::string& value) {
  if (value.empty()) return std::chrono::milliseconds(0);
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (value.size() > 9) return std::chrono::hours(24 * 365);
    return std::chrono::seconds(std::stoll(value));
  }
  const int64_t when = HttpDate(value);
  if (when < 0) return std::chrono::milliseconds(0);
  const time_t now = std::time(nullptr);
  return std::chrono::seconds(when > now ? when - now : 0);
}

std::chrono::milliseconds BackoffDelay(int failures, const RemoteOptions& options,
                                       std::chrono::milliseconds retry_after,
                                       std::mt19937_64& rng) {
  const int shift = std::clamp(failures - 1, 0, 30);
  const int64_t ceiling = std::max<int64_t>(
      0, std::min<int64_t>(options.backoff_cap.count(), options.backoff_base.count() << shift));
  std::uniform_int_distribution<int64_t> draw(0, ceiling);
  return std::max(std::chrono::milliseconds(draw(rng)), retry_after);
}

absl::Status HttpStatusError(const std::string& url, const HttpResponse& r) {
  std::string message = Cat(url, ": HTTP ", r.status);
  if (!r.reason.empty()) message += Cat(" ", r.reason);
  const std::string server = ServerMessage(r.body);
  if (!server.empty()) message += Cat(": ", server);
  switch (r.status) {
    case 400:
      return absl::InvalidArgumentError(message);
    case 401:
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
    case 410:
      return absl::NotFoundError(message);
    case 412:
      return absl::AbortedError(message);
    case 416:
      return absl::OutOfRangeError(message);
    default:
      if (IsTransientStatus(r.status)) return absl::UnavailableError(message);
      return absl::UnknownError(message);
  }
}

RemoteStream::RemoteStream(std::string url, RemoteTarget target, const RemoteOptions& options,
                           std::shared_ptr<TransferPool> pool)
    : url_(std::move(url)),
      target_(std::move(target)),
      options_(options),
      pool_(std::move(pool)),
      transfer_(pool_->Take()),
      jitter_(std::random_device()()) {}

RemoteStream::~RemoteStream() {
  // Only a handle whose request ended cleanly still holds a usable
  // connection; an abandoned one would be closed by the next request anyway,
  // so it is simply freed.
  if (transfer_ != nullptr && (!connected_ || transfer_->finished())) {
    pool_->Give(std::move(transfer_));
  }
}

absl::StatusOr<std::unique_ptr<RemoteStream>> RemoteStream::Open(
    std::string url, RemoteTarget target, const RemoteOptions& options,
    std::shared_ptr<TransferPool> pool, int64_t offset, int64_t end, ObjectVersion pin) {
  std::unique_ptr<RemoteStream> stream(
      new RemoteStream(std::move(url), std::move(target), options, std::move(pool)));
  stream->position_ = std::max<int64_t>(offset, 0);
  if (end >= 0 && end <= stream->position_) {
    return absl::InvalidArgumentError(
        Cat(stream->url_, ": an empty range, bytes ", stream->position_, " to ", end));
  }
  stream->end_ = end;
  stream->pin_ = std::move(pin);
  while (true) {
    absl::Status s = stream->Connect();
    if (s.ok()) return stream;
    WDS_RETURN_IF_ERROR(stream->Failed(s, stream->retry_after_));
  }
}

absl::StatusOr<ObjectInfo> RemoteStream::Head(const std::string& url, const RemoteTarget& target,
                                              const RemoteOptions& options, TransferPool& pool) {
  RemoteStream probe(url, target, options, std::shared_ptr<TransferPool>(&pool, [](auto*) {}));
  while (true) {
    absl::Status s = probe.transfer_->Begin(target.Request(true, {}), options);
    if (s.ok()) {
      const HttpResponse& r = probe.transfer_->response();
      if (r.status >= 200 && r.status < 300) return ObjectInfo{r.content_length, r.etag};
      s = HttpStatusError(url, r);
      probe.retry_after_ = r.retry_after;
      if (!IsTransientStatus(r.status)) return s;
    } else {
      s = probe.Annotate(s);
    }
    if (!absl::IsUnavailable(s)) return s;
    WDS_RETURN_IF_ERROR(probe.Failed(s, probe.retry_after_));
  }
}

absl::Status RemoteStream::Annotate(const absl::Status& error) const {
  return absl::Status(error.code(), Cat(url_, ": ", ToStd(error.message())));
}

bool RemoteStream::CanResume() const { return IsStrongEtag(etag_) || !last_modified_.empty(); }

std::string RemoteStream::PinText() const {
  return IsStrongEtag(pin_.etag) ? Cat("If-Match: ", pin_.etag)
                                 : Cat("If-Unmodified-Since: ", pin_.last_modified);
}

std::string RemoteStream::RangeText() const {
  if (end_ >= 0) return Cat("bytes ", position_, "-", end_ - 1);
  return Cat("bytes from offset ", position_, " on");
}

absl::Status RemoteStream::Connect() {
  retry_after_.clear();
  attempt_bytes_ = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  if (fresh_ && !pin_.empty()) {
    if (IsStrongEtag(pin_.etag)) {
      headers.emplace_back("If-Match", pin_.etag);
    } else if (!pin_.last_modified.empty()) {
      headers.emplace_back("If-Unmodified-Since", pin_.last_modified);
    }
  } else if (!fresh_) {
    if (IsStrongEtag(etag_)) {
      headers.emplace_back("If-Match", etag_);
    } else if (!last_modified_.empty()) {
      headers.emplace_back("If-Unmodified-Since", last_modified_);
    } else {
      // Failed() and Skip() never lead here without a validator.
      return absl::InternalError(Cat(url_, ": resuming without a validator"));
    }
  }
  if (end_ >= 0) {
    headers.emplace_back("Range", Cat("bytes=", position_, "-", end_ - 1));
  } else if (position_ > 0) {
    headers.emplace_back("Range", Cat("bytes=", position_, "-"));
  }
  connected_ = true;
  absl::Status begun = transfer_->Begin(target_.Request(false, std::move(headers)), options_);
  if (!begun.ok()) return Annotate(begun);
  const HttpResponse& r = transfer_->response();
  if (r.status == 412 && fresh_ && !pin_.empty()) {
    return absl::AbortedError(Cat(url_, ": the object changed since it was first read (HTTP ",
                                  "412 to a request for ", RangeText(), " with ", PinText(), ")"));
  }
  if (r.status == 412 && !fresh_) {
    return absl::AbortedError(Cat(url_, ": the object changed while it was read (HTTP 412 to ",
                                  "a request for offset ", position_, " with ",
                                  IsStrongEtag(etag_)
                                      ? Cat("If-Match: ", etag_)
                                      : Cat("If-Unmodified-Since: ", last_modified_),
                                  ")"));
  }
  if (r.status >= 300 || r.status < 200) {
    retry_after_ = r.retry_after;
    return HttpStatusError(url_, r);
  }
  return fresh_ ? CheckFirstResponse(r) : CheckResumed(r);
}

absl::Status RemoteStream::CheckPin(const HttpResponse& r) const {
  auto changed = [&](std::string_view what, std::string_view was, std::string_view is) {
    return absl::AbortedError(Cat(url_, ": the object changed since it was first read (", what, " ",
                                  was, " became ", is, ")"));
  };
  if (!pin_.etag.empty() && !r.etag.empty() && r.etag != pin_.etag) {
    return changed("ETag", pin_.etag, r.etag);
  }
  if (!pin_.last_modified.empty() && !r.last_modified.empty() &&
      r.last_modified != pin_.last_modified) {
    return changed("Last-Modified", pin_.last_modified, r.last_modified);
  }
  if (pin_.size >= 0 && size_ >= 0 && size_ != pin_.size) {
    return changed("size", Cat(pin_.size), Cat(size_));
  }
  return absl::OkStatus();
}

absl::Status RemoteStream::CheckFirstResponse(const HttpResponse& r) {
  if (end_ >= 0) {
    if (r.status != 206) {
      return absl::DataLossError(Cat(url_, ": HTTP ", r.status, " to a request for ", RangeText(),
                                     " (expected 206 Partial Content): the server ignores Range "
                                     "requests"));
    }
    if (r.range_first != position_ || r.range_last != end_ - 1) {
      return absl::DataLossError(Cat(url_, ": wrong Content-Range '", r.content_range,
                                     "' to a request for ", RangeText()));
    }
    size_ = r.range_total;
  } else if (position_ == 0) {
    if (r.status != 200) {
      return absl::DataLossError(
          Cat(url_, ": HTTP ", r.status, " to a request for the whole object (expected 200)"));
    }
    size_ = r.content_length;
  } else {
    if (r.status != 206) {
      return absl::DataLossError(Cat(url_, ": HTTP ", r.status,
                                     " to a request for bytes from offset ", position_,
                                     " on (expected 206 Partial Content): the server ignores "
                                     "Range requests"));
    }
    if (r.range_first != position_ || (r.range_total >= 0 && r.range_last != r.range_total - 1)) {
      return absl::DataLossError(Cat(url_, ": wrong Content-Range '", r.content_range,
                                     "' to a request for bytes from offset ", position_, " on"));
    }
    size_ = r.range_total;
  }
  // (A server that ignores If-Match or If-Unmodified-Since is caught here.)
  WDS_RETURN_IF_ERROR(CheckPin(r));
  etag_ = r.etag;
  last_modified_ = r.last_modified;
  return absl::OkStatus();
}

absl::Status RemoteStream::CheckResumed(const HttpResponse& r) {
  if (r.status != 206) {
    return absl::DataLossError(
        Cat(url_, ": HTTP ", r.status, " to a request for bytes from offset ", position_,
            " on (expected 206 Partial Content): the server ",
            "does not resume, and the object cannot be read past the fault"));
  }
  if (r.range_first != position_ || (size_ >= 0 && r.range_total >= 0 && r.range_total != size_) ||
      (stop() >= 0 && r.range_last != stop() - 1)) {
    return absl::DataLossError(Cat(
        url_, ": wrong Content-Range '", r.content_range, "' to a request for bytes ", position_,
        "-", stop() >= 0 ? Cat(stop() - 1, size_ >= 0 ? Cat("/", size_) : "") : std::string("")));
  }
  if (IsStrongEtag(etag_) && !r.etag.empty() && r.etag != etag_) {
    return absl::AbortedError(Cat(url_, ": the object changed while it was read (ETag ", etag_,
                                  " became ", r.etag, " at offset ", position_, ")"));
  }
  return absl::OkStatus();
}

absl::Status RemoteStream::Failed(const absl::Status& error, const std::string& retry_after) {
  connected_ = false;
  if (!absl::IsUnavailable(error)) return error;
  const auto now = std::chrono::steady_clock::now();
  // A run of failures ends only with real progress: an attempt that
  // delivered kMinProgress bytes and was not cut for slowness. A server that
  // drips, or cuts every connection after a few bytes, stays in one run and
  // meets max_attempts / max_retry_time.
  const bool progressed = attempt_bytes_ >= kMinProgress && !transfer_->timed_out();
  if (failures_ == 0 || progressed) {
    failures_ = 0;
    failing_since_ = now;
  }
  ++failures_;
  std::string_view last = ToStd(error.message());
  if (StartsWith(last, url_) && StartsWith(last.substr(url_.size()), ": ")) {
    last.remove_prefix(url_.size() + 2);
  }
  auto give_up = [&](std::string_view why) {
    return absl::UnavailableError(Cat(
        url_, ": giving up at offset ", position_, size_ >= 0 ? Cat(" of ", size_) : std::string(),
        " after ", failures_, " failed attempt(s) in a row", why, "; last error: ", last));
  };
  // A misspelled host is common and a resolver failing to answer rare (the
  // system's resolver asks again itself when a query is lost), so retrying a
  // name that does not resolve mostly hides the mistake for half a minute.
  if (transfer_->unresolved()) {
    return give_up(" (a host name that does not resolve is not retried)");
  }
  if (!fresh_ && !CanResume()) {
    return absl::UnavailableError(
        Cat(url_, ": cannot resume at offset ", position_, " safely: the server sent no strong ",
            "ETag and no Last-Modified to check the object by; the failure: ", last));
  }
  if (failures_ >= options_.max_attempts) return give_up("");
  const auto delay = BackoffDelay(failures_, options_, RetryAfter(retry_after), jitter_);
  if (now + delay - failing_since_ > options_.max_retry_time) {
    return give_up(Cat(" (the next wait, ", delay.count(), " ms, would pass max_retry_time of ",
                       options_.max_retry_time.count(), " ms)"));
  }
  return Backoff(delay);
}

absl::StatusOr<size_t> RemoteStream::Read(void* buffer, size_t size) {
  if (at_end_ || size == 0) return 0;
  while (true) {
    if (!connected_) {
      absl::Status s = Connect();
      if (!s.ok()) {
        WDS_RETURN_IF_ERROR(Failed(s, retry_after_));
        continue;
      }
    }
    absl::StatusOr<size_t> n = transfer_->Read(buffer, size);
    if (n.ok() && *n > 0) {
      if (stop() >= 0 && position_ + static_cast<int64_t>(*n) > stop()) {
        return absl::DataLossError(Cat(url_, ": the server sent more than the ",
                                       end_ >= 0 ? RangeText() : Cat(size_, " bytes"),
                                       " it announced"));
      }
      position_ += static_cast<int64_t>(*n);
      attempt_bytes_ += static_cast<int64_t>(*n);
      fresh_ = false;
      return *n;
    }
    absl::Status error;
    if (n.ok()) {
      if (stop() < 0 || position_ == stop()) {
        at_end_ = true;
        return 0;
      }
      error = absl::UnavailableError(Cat("the response ended at offset ", position_, " of ",
                                         end_ >= 0 ? Cat("the range's ", end_) : Cat(size_)));
    } else {
      error = n.status();
    }
    WDS_RETURN_IF_ERROR(Failed(Annotate(error), ""));
  }
}

absl::StatusOr<int64_t> RemoteStream::Skip(int64_t size) {
  if (size <= 0 || at_end_) return 0;
  int64_t skipped = 0;
  if (connected_) {
    skipped = static_cast<int64_t>(
        transfer_->Discard(static_cast<size_t>(std::min<int64_t>(size, transfer_->buffered()))));
    position_ += skipped;
    attempt_bytes_ += skipped;
  }
  const int64_t rest = size - skipped;
  // A request costs a round trip (and, over HTTP/1.1, a new connection): a
  // short distance is cheaper read. Without the end known a request could
  // pass it, and without a validator it could land in another version.
  if (rest > 0 && rest >= options_.skip_by_request && stop() >= 0 && CanResume()) {
    const int64_t jump = std::min(rest, stop() - position_);
    if (connected_) transfer_->Abandon();
    connected_ = false;
    position_ += jump;
    skipped += jump;
    at_end_ = position_ == stop();
  }
  if (skipped > 0) fresh_ = false;
  return skipped;
}

absl::Status RemoteStream::Finish() { return absl::OkStatus(); }

}  // namespace wds
