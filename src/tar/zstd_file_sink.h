// ZstdFileSink: writes a byte stream to a file as one zstd frame that ends
// with a content checksum (XXH64 of the uncompressed bytes), as zstd(1)
// writes by default.
//
//   absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink = ZstdFileSink::Create("a.tar.zst", 3);
//   if (!(*sink)->Write(tar_bytes) || !(*sink)->Finish()) {
//     ... (*sink)->error_number(), (*sink)->error_message() ...
//   }
//
// TarWriter writes zstd shards through it: libarchive's zstd filter (3.6)
// cannot set the checksum flag, and in a frame without a checksum a flipped
// bit in stored bytes (a raw block, a literal) decodes to different bytes
// that no reader can detect. With the checksum, every reader that decodes
// the frame (this library through libarchive, zstd(1), tar --zstd) fails on
// such a frame instead.
//
// The frame is the same for the same bytes written by the same calls: no
// threads, no timestamps. Errors are reported as libarchive reports its own
// (an errno and a short text), so that TarWriter reports them alike.
// Thread safety: one thread at a time.
#pragma once

#include <zstd.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace wds {

class ZstdFileSink {
 public:
  // Create checks `level` and then truncates or creates `path` ("-" is
  // standard output, which is never closed). A negative level keeps zstd's
  // default (3); a level above ZSTD_maxCLevel() (22) is InvalidArgument,
  // and no file is created. A file that cannot be created is the system's
  // error (NotFound, PermissionDenied, ...) naming `path`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ZstdFileSink>> Create(const std::string& path,
                                                                            int level);
  // The destructor closes the file without ending the frame: call Finish().
  ~ZstdFileSink();

  // Write compresses `data` into the frame and writes out the blocks zstd
  // completes. False on failure, which is final: error_number() and
  // error_message() say what it was.
  [[nodiscard]] bool Write(std::string_view data);
  // Finish ends the frame (last block, checksum), writes it out and closes
  // the file. False on failure, as Write.
  [[nodiscard]] bool Finish();

  // error_number is the errno of the failed system call, or 0 when zstd
  // itself failed.
  int error_number() const { return error_number_; }
  // error_message says what failed: "Write error", "Close error", or
  // zstd's reason.
  const std::string& error_message() const { return error_message_; }

 private:
  using CCtx = std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)>;
  ZstdFileSink(int fd, bool owns_fd, CCtx cctx);

  // Compress feeds `in` to zstd with `mode` until zstd has taken all of it
  // (and, for ZSTD_e_end, written the frame's end), writing out what it makes.
  bool Compress(ZSTD_inBuffer& in, ZSTD_EndDirective mode);
  bool WriteOut(const char* data, size_t size);
  bool Fail(int error_number, std::string message);

  int fd_;
  bool owns_fd_;
  CCtx cctx_;
  std::vector<char> out_;
  int error_number_ = 0;
  std::string error_message_;
  bool failed_ = false;
};

}  // namespace wds
