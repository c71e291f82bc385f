// RemoteStream: the ByteStream of a remote object, resumed byte-exactly
// after transient faults (the policy is documented in wds/io/remote.h).
//
//   auto pool = std::make_shared<TransferPool>();
//   absl::StatusOr<std::unique_ptr<RemoteStream>> s =
//       RemoteStream::Open("s3://b/k.tar", *RemoteTarget::Resolve(...), options, pool);
//   // (*s)->size(): the announced length, (*s)->etag(): the version being read
//
// Thread safety: a stream is used by one thread; TransferPool is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "io/http_transfer.h"
#include "io/remote_target.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"

namespace wds {

// TransferPool keeps idle HttpTransfers (and so their connections) for the
// next stream.
class TransferPool {
 public:
  // Take returns an idle transfer, or a new one.
  std::unique_ptr<HttpTransfer> Take();
  // Give keeps `transfer` for a later Take (up to a few; the rest are freed).
  void Give(std::unique_ptr<HttpTransfer> transfer);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpTransfer>> idle_;
};

// ObjectInfo is what a HEAD request tells about an object.
struct ObjectInfo {
  int64_t size = -1;
  std::string etag;
};

class RemoteStream : public ByteStream {
 public:
  // Open sends the first request (with the retries of `options`) and fails
  // as Read would: a 404 is NotFound naming `url`, and so on. A positive
  // `offset` asks for `Range: bytes=<offset>-` and accepts only a 206 whose
  // Content-Range starts there and runs to the end (an offset at or past the
  // end is the server's 416, OutOfRange); the stream then delivers the
  // object's bytes from `offset` on. An `end` of 0 or more (above `offset`)
  // asks for `Range: bytes=<offset>-<end - 1>` instead, and accepts only a
  // 206 of exactly that range: the stream ends at `end`. A non-empty `pin`
  // is asked for with every request (If-Match with a strong ETag, else
  // If-Unmodified-Since with its Last-Modified) and the first answer is
  // checked against it (ETag, Last-Modified, size): a 412 or another
  // version is Aborted.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteStream>> Open(
      std::string url, RemoteTarget target, const RemoteOptions& options,
      std::shared_ptr<TransferPool> pool, int64_t offset = 0, int64_t end = -1,
      ObjectVersion pin = {});
  // Head asks for the object's size and ETag, with the same retries.
  [[nodiscard]] static absl::StatusOr<ObjectInfo> Head(const std::string& url,
                                                       const RemoteTarget& target,
                                                       const RemoteOptions& options,
                                                       TransferPool& pool);

  ~RemoteStream() override;

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override;
  // Skip drops what is buffered first; a rest of at least
  // options.skip_by_request bytes ends the current request and moves the
  // position, so that the next Read asks for `Range: bytes=<position>-` with
  // the version's validator (If-Match), never past the end. A shorter rest,
  // an object of unknown length or one without validators is left to the
  // caller to read (Skip returns what it skipped so far).
  absl::StatusOr<int64_t> Skip(int64_t size) override;
  absl::Status Finish() override;
  const std::string& url() const override { return url_; }

  // size is the object's length as the first response announced it, or -1.
  int64_t size() const { return size_; }
  // etag is the object's ETag (empty if the server sent none).
  const std::string& etag() const { return etag_; }
  // position is the object's offset of the next byte Read returns.
  int64_t position() const { return position_; }
  // version is the version being read, as its first answer told it.
  ObjectVersion version() const { return ObjectVersion{etag_, last_modified_, size_}; }

 private:
  RemoteStream(std::string url, RemoteTarget target, const RemoteOptions& options,
               std::shared_ptr<TransferPool> pool);

  // Connect sends a request for the bytes from position_ on and checks that
  // the answer is exactly those bytes (of the version read so far, once a
  // byte was delivered or skipped).
  absl::Status Connect();
  absl::Status CheckFirstResponse(const HttpResponse& r);
  // CheckPin says whether the first answer (with size_ set) is of pin_'s version.
  absl::Status CheckPin(const HttpResponse& r) const;
  absl::Status CheckResumed(const HttpResponse& r);
  // CanResume is true when a later request can be checked to be of the same
  // version: a strong ETag or a Last-Modified.
  bool CanResume() const;
  // stop is the offset the stream ends at: the range's end, else the
  // object's size (-1 when unknown).
  int64_t stop() const { return end_ >= 0 ? end_ : size_; }
  // RangeText is the range requested, for messages: "bytes 5-9" or "bytes from offset 5 on".
  std::string RangeText() const;
  // PinText is the pin's header, for messages: "If-Match: \"v1\"".
  std::string PinText() const;
  // Failed decides whether to retry after `error`: it sleeps the backoff and
  // returns ok, or returns the final error.
  absl::Status Failed(const absl::Status& error, const std::string& retry_after);
  absl::Status Annotate(const absl::Status& error) const;

  std::string url_;
  RemoteTarget target_;
  RemoteOptions options_;
  std::shared_ptr<TransferPool> pool_;
  std::unique_ptr<HttpTransfer> transfer_;
  bool connected_ = false;
  bool at_end_ = false;
  // fresh_ holds until a byte was delivered or skipped: until then a retry
  // is a new first request, which may find a new version.
  bool fresh_ = true;
  int64_t position_ = 0;
  // end_ is the requested range's end (exclusive), -1 for the object's end.
  int64_t end_ = -1;
  // pin_ is the version every request asks for (empty: any).
  ObjectVersion pin_;
  // attempt_bytes_ is what the current request has delivered.
  int64_t attempt_bytes_ = 0;
  int64_t size_ = -1;
  std::string etag_;
  std::string last_modified_;
  // The current run of failures: how many, and when it began.
  int failures_ = 0;
  std::chrono::steady_clock::time_point failing_since_;
  std::string retry_after_;
  std::mt19937_64 jitter_;
};

// HttpStatusError is the error of a non-transient HTTP answer: the URL, the
// status and the server's message (S3's <Code> and <Message>, an HTML title,
// or the start of the body).
absl::Status HttpStatusError(const std::string& url, const HttpResponse& response);
// IsTransientStatus is true for the statuses worth retrying: 408, 429, 500,
// 502, 503, 504.
bool IsTransientStatus(long status);
// HttpDate parses an HTTP date ("Tue, 15 Nov 1994 12:45:26 GMT") into
// seconds since the epoch; -1 when `value` is not one.
int64_t HttpDate(const std::string& value);

// RetryAfter parses a Retry-After value (seconds or an HTTP date) into a
// delay; zero when absent or malformed.
std::chrono::milliseconds RetryAfter(const std::string& value);
// BackoffDelay is the wait after the `failures`-th failed request in a row
// (1-based): drawn uniformly from [0, min(backoff_cap, backoff_base *
// 2^(failures-1))] with `rng` (full jitter, so that readers failing together
// do not retry together), and never less than `retry_after`.
std::chrono::milliseconds BackoffDelay(int failures, const RemoteOptions& options,
                                       std::chrono::milliseconds retry_after, std::mt19937_64& rng);
// Between returns the text between `open` and `close` (an XML element's
// tags, "<Code>" and "</Code>") in `body`, or "".
std::string_view Between(std::string_view body, std::string_view open, std::string_view close);
// Backoff sleeps for `delay`, waking every kInterruptCheckInterval to ask
// the thread's interrupt check, if it has one (a wait may last minutes),
// and returns that check's error.
absl::Status Backoff(std::chrono::milliseconds delay);
// kMinProgress is the least an attempt must deliver, without being cut for
// slowness, to end a run of failures (see wds/io/remote.h).
inline constexpr int64_t kMinProgress = 64 << 10;

}  // namespace wds
