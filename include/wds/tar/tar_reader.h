// TarReader: the members of one tar stream, read with libarchive.
//
//   absl::StatusOr<std::unique_ptr<wds::TarReader>> r = wds::TarReader::Open(*wds::OpenUrl(path));
//   while (true) {
//     absl::StatusOr<std::optional<wds::TarMember>> m = (*r)->Next();
//     if (!m.ok()) { /* DataLoss naming the URL, the member and its offset */ }
//     if (!m->has_value()) break;
//     Use((*m)->name, (*m)->data);
//   }
//
// It streams the regular-file members of ustar, GNU (long names, base-256
// sizes) and pax tars, gzip, bzip2, xz, lzma, lz4 or zstd compressed, the
// compression detected from the content. gzip is inflated by the project's own
// zlib stream, which checks every gzip member's CRC-32 and length (libarchive's
// gzip filter checks neither); the others by libarchive. Truncation anywhere,
// including between two members, is DataLoss, never a silent end.
//
// Members are read once, each into its own Buffer; with read_data = false
// their data is skipped instead (seeked over in local uncompressed tars), for
// header-only scans.
//
// Grouping members into WebDataset samples (key and field, consecutive
// members with one key) happens above this reader: WebDataset() in
// pipeline.h, ScanShard() in shard_index.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/base/buffer.h"
#include "wds/base/buffer_pool.h"
#include "wds/io/byte_stream.h"

namespace wds {

struct TarMember {
  std::string name;
  // data holds the member's bytes (empty when read without data).
  Buffer data;
  // offset is the byte offset of the member's first header (a pax or GNU
  // long-name header where there is one) in the uncompressed tar;
  // data_offset is where its data starts (a multiple of 512).
  int64_t offset = 0;
  int64_t data_offset = 0;
  // size is the data's length from the header.
  int64_t size = 0;
};

// MemberNameHook maps a member's name to the name it is grouped by, for
// readers that group members into samples (ShardSampleReaderOptions,
// WebDatasetOptions::member_name): nullopt skips the member; an error ends
// the shard with it. The Python bindings fill it from tarfile_to_samples'
// select_files and rename_files.
using MemberNameHook =
    std::function<absl::StatusOr<std::optional<std::string>>(std::string_view name)>;

// kDefaultMaxMemberSize is 1 GiB: more than any image, clip or array a
// training sample usually holds, little enough to survive a lying header.
inline constexpr int64_t kDefaultMaxMemberSize = int64_t{1} << 30;

// kDefaultReadBufferSize is 1 MiB: large enough that reading a local shard
// costs few system calls, small beside the members a loader holds.
inline constexpr size_t kDefaultReadBufferSize = size_t{1} << 20;

struct TarReaderOptions {
  // read_data = false skips every member's data (TarMember::data is empty).
  bool read_data = true;
  // want, if set, is asked for each member's name just before Next returns
  // it: false skips that member's data (its TarMember::data is empty), which
  // a file or a remote stream then moves past without reading
  // (ByteStream::Skip), as with read_data = false.
  std::function<bool(std::string_view name)> want;
  // max_member_size is the largest member accepted: a header announcing more
  // is a ResourceExhausted error naming the member, before anything is
  // allocated for it. Below it, memory is reserved no faster than bytes
  // arrive: a member above 32 MiB gets storage that starts at 32 MiB and
  // doubles as it fills, so a header that lies reserves at most
  // max(32 MiB, twice the bytes sent).
  int64_t max_member_size = kDefaultMaxMemberSize;
  // pool, if set, supplies the buffers of members from 4 KiB to 32 MiB
  // (recycled when their last reference drops); smaller and larger members,
  // and all of them without a pool, are allocated on their own.
  std::shared_ptr<BufferPool> pool;
  // start_offset, when positive, starts reading at that offset of the
  // uncompressed tar, which must be where a member's first header starts
  // (the end of the previous member's data, padded to 512 bytes; see
  // ShardIndex). A plain tar is seeked there (ByteStream::Skip, reading when
  // the stream cannot skip), a gzip one inflated up to it, and one of
  // libarchive's compressions walked to it header by header. Offsets in
  // members and messages still count from the start of the tar; the end of
  // the archive is checked as without it.
  int64_t start_offset = 0;
  // read_buffer_size is how many bytes the reader asks its stream for at a
  // time (a gzip shard's compressed input likewise), from 4 KiB to 1 GiB
  // (InvalidArgument from Open otherwise). What is read never depends on it.
  size_t read_buffer_size = kDefaultReadBufferSize;
};

// TarReader reads one tar stream. Not thread-safe.
class TarReader {
 public:
  // Open takes ownership of `stream`. Fails only on setup errors; format
  // errors surface from Next().
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TarReader>> Open(
      std::unique_ptr<ByteStream> stream, TarReaderOptions options = {});
  ~TarReader();

  // Next returns the next regular-file member, nullopt at the end of the
  // archive (after the stream was drained and Finish()ed), or an error naming
  // the URL and, where known, the member and its offset: DataLoss for a
  // truncated or corrupt archive, InvalidArgument for data that is not a tar.
  // End and errors are sticky.
  [[nodiscard]] absl::StatusOr<std::optional<TarMember>> Next();

  const std::string& url() const;
  // failed_member is the name of the member whose data an error from Next()
  // concerns; empty when the error lies between or after members.
  const std::string& failed_member() const;

 private:
  struct State;
  explicit TarReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace wds
