// ZstdFileSink: writes a byte stream to a file as one zstd frame that ends
// with a content checksum (XXH64 of the uncompressed bytes), as zstd(1)
// writes by default.
//
//   absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink = ZstdFileSink::Create("a.tar.zst", 3, 1);
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
// The frame is the same for the same bytes written by the same calls and
// level: no timestamps. With threads >= 2 zstd compresses on that many
// threads of its own (started by Create, with the asynchronous signals
// blocked), and the frame is the same for every such count (zstd -T2's),
// though not threads 1's.
// Thread safety: one thread at a time.
#pragma once

#include <zstd.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tar/file_sink.h"

namespace wds {

class ZstdFileSink : public FileSink {
 public:
  // Create checks `level` and `threads`, then truncates or creates `path`
  // ("-" is standard output, which is never closed). A negative level keeps
  // zstd's default (3); a level above ZSTD_maxCLevel() (22), or threads
  // outside 1..kMaxCompressionThreads, is InvalidArgument, and no file is
  // created. A file that cannot
  // be created is the system's error (NotFound, PermissionDenied, ...)
  // naming `path`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ZstdFileSink>> Create(const std::string& path,
                                                                            int level,
                                                                            int threads = 1);

  // Write compresses `data` into the frame and writes out the blocks zstd
  // completes.
  [[nodiscard]] bool Write(std::string_view data) override;
  // Finish ends the frame (last block, checksum), writes it out and closes
  // the file; a second time it only returns whether the first succeeded.
  [[nodiscard]] bool Finish() override;
  // error_message: "Write error", "Close error", or zstd's reason.
  int error_number() const override { return file_.error_number(); }
  const std::string& error_message() const override { return file_.error_message(); }

 private:
  using CCtx = std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)>;
  ZstdFileSink(FileOutput file, CCtx cctx);

  // Compress feeds `in` to zstd with `mode` until zstd has taken all of it
  // (and, for ZSTD_e_end, written the frame's end), writing out what it makes.
  bool Compress(ZSTD_inBuffer& in, ZSTD_EndDirective mode);

  FileOutput file_;
  CCtx cctx_;
  bool finished_ = false;
  std::vector<char> out_;
};

}  // namespace wds
