// RemoteStream: the ByteStream of a remote object, resumed byte-exactly
// after transient faults (the policy is documented in wds/remote.h).
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
#include "wds/byte_stream.h"
#include "wds/remote.h"

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
  // as Read would: a 404 is NotFound naming `url`, and so on.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteStream>> Open(
      std::string url, RemoteTarget target, const RemoteOptions& options,
      std::shared_ptr<TransferPool> pool);
  // Head asks for the object's size and ETag, with the same retries.
  [[nodiscard]] static absl::StatusOr<ObjectInfo> Head(const std::string& url,
                                                       const RemoteTarget& target,
                                                       const RemoteOptions& options,
                                                       TransferPool& pool);

  ~RemoteStream() override;

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override;
  absl::Status Finish() override;
  const std::string& url() const override { return url_; }

  // size is the object's length as the first response announced it, or -1.
  int64_t size() const { return size_; }
  // etag is the object's ETag (empty if the server sent none).
  const std::string& etag() const { return etag_; }
  // position is how many bytes Read has returned.
  int64_t position() const { return position_; }

 private:
  RemoteStream(std::string url, RemoteTarget target, const RemoteOptions& options,
               std::shared_ptr<TransferPool> pool);

  // Connect sends a request for the bytes from position_ on and checks that
  // the answer is exactly those bytes of the same object version.
  absl::Status Connect();
  absl::Status CheckFirstResponse(const HttpResponse& r);
  absl::Status CheckResumed(const HttpResponse& r);
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
  int64_t position_ = 0;
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
// RetryAfter parses a Retry-After value (seconds or an HTTP date) into a
// delay; zero when absent or malformed.
std::chrono::milliseconds RetryAfter(const std::string& value);

}  // namespace wds
