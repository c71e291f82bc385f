// TarWriter: writes WebDataset samples as tar members "key.field".
//
//   absl::StatusOr<std::unique_ptr<wds::TarWriter>> w = wds::TarWriter::Create("out/a.tar");
//   wds::Sample s;  s.Set("__key__", std::string("000001"));  s.Set("cls", int64_t{3});
//   (*w)->Write(s);        // member "000001.cls" holding "3"
//   (*w)->Close();
//
// Output is reproducible: members carry a fixed mtime, mode 0444, uid/gid 0 and
// owner "bigdata" (as the reference writer), fields in sorted order, so the
// same samples give byte-identical shards (gzip output carries no timestamp
// either). Readers: this library, the reference Python package, GNU tar,
// bsdtar, and for compressed shards gzip(1) and zstd(1).
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/sample.h"

namespace wds {

enum class TarCompression { kNone, kGzip, kZstd };

// kMaxCompressionThreads bounds TarWriterOptions::threads.
inline constexpr int kMaxCompressionThreads = 256;

struct TarWriterOptions {
  // compression: kGzip writes one gzip member (with its CRC-32), compressed
  // in 128 KiB blocks that join into one deflate stream (src/tar/
  // gzip_file_sink.h: the bytes are the same whatever `threads`); kZstd writes
  // one zstd frame with a content checksum (XXH64), as zstd(1) does by
  // default, so that a reader detects a flipped bit anywhere in the frame
  // (where the frame ends: docs/RELIABILITY.md). Shards written before this
  // library added the checksum (libarchive's zstd writer has none) read as
  // before, unchecked.
  TarCompression compression = TarCompression::kNone;
  // level: compressor level, gzip 0..9, zstd 0..22; a negative one (-1) keeps the
  // compressor's default (gzip 6, zstd 3). Above the range, Create is
  // InvalidArgument.
  int level = -1;
  // threads: how many threads compress (1: the writing thread). More make
  // gzip and zstd shards that much faster to write, up to the cores; gzip's
  // bytes do not depend on it, zstd's are the same for every count from 2
  // (zstd -T2's) but not 1's. From 1 to kMaxCompressionThreads, whatever
  // the compression (InvalidArgument otherwise).
  int threads = 1;
  // mtime stamped on every member (seconds since the epoch).
  int64_t mtime = 0;
};

// WrittenMember describes a member as it lies in the uncompressed tar.
struct WrittenMember {
  std::string name;
  // data_offset is where the member's data starts (a multiple of 512).
  int64_t data_offset = 0;
  int64_t size = 0;
};

class TarWriter {
 public:
  // Create truncates or creates `path`; "-" writes to standard output.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TarWriter>> Create(
      const std::string& path, TarWriterOptions options = {});
  // The destructor closes an unclosed writer, ignoring errors: call Close().
  ~TarWriter();

  // WriteMember writes one regular-file member and, if `written` is not null,
  // appends its description there.
  [[nodiscard]] absl::Status WriteMember(std::string_view name, std::string_view data,
                                         std::vector<WrittenMember>* written = nullptr);
  // Write writes `sample` as members "<__key__>.<field>", fields sorted by
  // name; fields starting with '_' are skipped. Bytes are written as they are,
  // strings as UTF-8 text, integers and doubles as decimal text. A sample
  // without a text __key__ is InvalidArgument. Each member written is
  // appended to `written` when it is not null.
  [[nodiscard]] absl::Status Write(const Sample& sample,
                                   std::vector<WrittenMember>* written = nullptr);
  // Close writes the end-of-archive blocks and flushes the file.
  [[nodiscard]] absl::Status Close();

  // bytes_written counts member data bytes (not headers).
  int64_t bytes_written() const;
  // tar_bytes is the length of the uncompressed tar so far (the last
  // member's padding and the end-of-archive blocks come later); after Close
  // it is the whole uncompressed length.
  int64_t tar_bytes() const;
  const std::string& path() const;

 private:
  struct State;
  explicit TarWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace wds
