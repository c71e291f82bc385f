#include "tar/zstd_file_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "wds/internal/base/strings.h"

namespace wds {

absl::StatusOr<std::unique_ptr<ZstdFileSink>> ZstdFileSink::Create(const std::string& path,
                                                                   int level) {
  // ZSTD_c_compressionLevel would clamp a level out of range silently.
  if (level > ZSTD_maxCLevel()) {
    return absl::InvalidArgumentError(Cat(path, ": compression level ", level, " is out of range"));
  }
  CCtx cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (cctx == nullptr) {
    return absl::ResourceExhaustedError(Cat(path, ": cannot allocate a zstd compressor"));
  }
  // Neither call can fail: both values are in range.
  if (level >= 0) ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  if (path == "-") {
    return std::unique_ptr<ZstdFileSink>(new ZstdFileSink(1, false, std::move(cctx)));
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return absl::ErrnoToStatus(errno, Cat(path, ": cannot create"));
  return std::unique_ptr<ZstdFileSink>(new ZstdFileSink(fd, true, std::move(cctx)));
}

ZstdFileSink::ZstdFileSink(int fd, bool owns_fd, CCtx cctx)
    : fd_(fd), owns_fd_(owns_fd), cctx_(std::move(cctx)), out_(ZSTD_CStreamOutSize()) {}

ZstdFileSink::~ZstdFileSink() {
  if (owns_fd_ && fd_ >= 0) close(fd_);
}

bool ZstdFileSink::Write(std::string_view data) {
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  return !failed_ && Compress(in, ZSTD_e_continue);
}

bool ZstdFileSink::Finish() {
  ZSTD_inBuffer none{nullptr, 0, 0};
  if (failed_ || !Compress(none, ZSTD_e_end)) return false;
  if (owns_fd_) {
    const int fd = fd_;
    fd_ = -1;
    // A file system may report a failed write-back only here (NFS).
    if (close(fd) != 0) return Fail(errno, "Close error");
  }
  return true;
}

bool ZstdFileSink::Compress(ZSTD_inBuffer& in, ZSTD_EndDirective mode) {
  while (true) {
    ZSTD_outBuffer out{out_.data(), out_.size(), 0};
    const size_t left = ZSTD_compressStream2(cctx_.get(), &out, &in, mode);
    if (ZSTD_isError(left)) return Fail(0, Cat("zstd: ", ZSTD_getErrorName(left)));
    if (!WriteOut(out_.data(), out.pos)) return false;
    // ZSTD_e_end reports what it still holds of the frame; ZSTD_e_continue
    // is done once it has taken all the input (it keeps a partial block).
    if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return true;
  }
}

bool ZstdFileSink::WriteOut(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(n < 0 ? errno : EIO, "Write error");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ZstdFileSink::Fail(int error_number, std::string message) {
  failed_ = true;
  error_number_ = error_number;
  error_message_ = std::move(message);
  return false;
}

}  // namespace wds
