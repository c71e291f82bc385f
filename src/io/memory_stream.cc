// MemoryStream: a ByteStream over bytes already in memory.
#include <algorithm>
#include <cstring>

#include "wds/io/byte_stream.h"

namespace wds {
namespace {

class MemoryStreamImpl : public ByteStream {
 public:
  MemoryStreamImpl(std::string url, std::string data, absl::Status finish_status)
      : url_(std::move(url)), data_(std::move(data)), finish_status_(std::move(finish_status)) {}

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    size_t n = std::min(size, data_.size() - position_);
    std::memcpy(buffer, data_.data() + position_, n);
    position_ += n;
    return n;
  }

  absl::StatusOr<int64_t> Skip(int64_t size) override {
    const size_t n =
        std::min(static_cast<size_t>(std::max<int64_t>(size, 0)), data_.size() - position_);
    position_ += n;
    return static_cast<int64_t>(n);
  }

  absl::Status Finish() override { return finish_status_; }
  const std::string& url() const override { return url_; }

 private:
  std::string url_;
  std::string data_;
  size_t position_ = 0;
  absl::Status finish_status_;
};

}  // namespace

std::unique_ptr<ByteStream> MemoryStream(std::string url, std::string data,
                                         absl::Status finish_status) {
  return std::make_unique<MemoryStreamImpl>(std::move(url), std::move(data),
                                            std::move(finish_status));
}

}  // namespace wds
