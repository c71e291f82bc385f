// ShardWriter: writes a stream of samples as a numbered series of tar shards.
//
//   wds::ShardWriterOptions options;
//   options.maxcount = 10000;
//   options.tar.compression = wds::TarCompression::kGzip;
//   options.on_close = [](const wds::ShardInfo& shard) {
//     std::printf("%s: %lld samples\n", shard.path.c_str(), (long long)shard.samples);
//     return absl::OkStatus();
//   };
//   auto writer = wds::ShardWriter::Create("out/train-%06d.tar.gz", options);
//   for (const wds::Sample& s : samples) WDS_RETURN_IF_ERROR((*writer)->Write(s));
//   WDS_RETURN_IF_ERROR((*writer)->Close());
//
// A shard is written to a temporary file beside its final name
// ("<final>.<pid>.tmp") and renamed when complete, so a final name only ever
// holds a whole shard. A writer destroyed before Close(), or one whose write
// failed, removes its temporary file: an error leaves the shards finished
// before it and nothing else.
//
// An s3:// or gs:// pattern ("s3://bucket/train-%06d.tar") writes each shard to a
// temporary file in `staging_dir` and uploads it when complete
// (wds/io/remote_upload.h: one PUT, or a multipart upload), so the object
// appears whole or not at all; its index sidecar (write_index) goes up
// after it, and a stale one is deleted before it. The upload runs on a
// thread of its own while the next shard fills (one upload at a time: the
// shard after waits for it; upload_in_background = false uploads in the
// Write or Close that finished the shard), so a shard counts as written,
// and its on_close runs, when the Write that finishes the next shard, or
// Close, finds its upload ended; an upload's error is returned there. Other
// remote URLs, and gs:// without credentials, are InvalidArgument at
// Create.
//
// Rolling: a shard ends before the sample that would make it hold more than
// `maxcount` samples, or more than `maxsize` bytes of uncompressed tar. The
// size rule uses an upper bound of a sample's tar bytes that depends only on
// member names and sizes, so shard boundaries are a pure function of the
// samples (which lets wds-shard plan shards and write them in parallel). A
// sample larger than `maxsize` gets a shard of its own.
//
// Thread safety: one thread at a time; distinct writers are independent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/base/sample.h"
#include "wds/io/remote.h"
#include "wds/tar/tar_writer.h"

namespace wds {

// ShardInfo describes a finished shard.
struct ShardInfo {
  // path is the final name (a URL for an s3:// or gs:// pattern).
  std::string path;
  // number is the value formatted into the pattern.
  int64_t number = 0;
  int64_t samples = 0;
  // data_bytes counts member data; tar_bytes the uncompressed tar; file_bytes
  // the file as written (compressed when compression is on).
  int64_t data_bytes = 0;
  int64_t tar_bytes = 0;
  int64_t file_bytes = 0;
};

struct ShardWriterOptions {
  // maxcount bounds the samples in a shard. REQUIRES: > 0.
  int64_t maxcount = 100000;
  // maxsize bounds the uncompressed tar bytes of a shard (as the reference
  // writer's default, 3e9). REQUIRES: > 0.
  int64_t maxsize = 3000000000;
  // tar: compression, level and mtime of every shard.
  TarWriterOptions tar;
  // first_shard is the number of the first shard written.
  int64_t first_shard = 0;
  // write_index writes a DALI index sidecar (IndexPath(shard)) beside each
  // shard, also through a temporary name.
  bool write_index = false;
  // on_close runs after each shard got its final name (on the writer's
  // thread); an error it returns is returned by the Write or Close that
  // finished the shard (for a remote pattern: that finished the next shard,
  // or Close).
  std::function<absl::Status(const ShardInfo&)> on_close;
  // For a remote pattern: the remote options (nullopt: from the
  // environment), and the directory shards are staged in (empty: $TMPDIR,
  // else /tmp), which needs room for two shards (one uploading, one filling;
  // one with upload_in_background = false).
  std::optional<RemoteOptions> remote;
  std::string staging_dir;
  bool upload_in_background = true;
};

// FormatShardName formats `pattern`, which holds exactly one printf integer
// conversion (%d, %5d, %06d; "%%" is a literal percent sign), with `number`.
// Other patterns are InvalidArgument.
[[nodiscard]] absl::StatusOr<std::string> FormatShardName(std::string_view pattern, int64_t number);

class ShardWriter {
 public:
  // Create checks `pattern` and the options; no file is created before the
  // first Write.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardWriter>> Create(
      std::string pattern, ShardWriterOptions options = {});
  // The destructor is Abort().
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Write appends `sample` (see TarWriter::Write), first finishing the
  // current shard when the sample does not fit. A key whose basename is
  // empty or holds a dot is InvalidArgument (a reader would split it
  // differently). After an error the unfinished shard is removed (a shard
  // still uploading is waited for first, counted, and its error, if any,
  // added to the one returned) and every later call fails.
  [[nodiscard]] absl::Status Write(const Sample& sample);
  // Close finishes the current shard, if any, and waits for its upload.
  [[nodiscard]] absl::Status Close();
  // Abort removes the current shard's temporary files without finishing it,
  // and cancels an upload in progress: a writer aborted (or destroyed)
  // before Close publishes nothing more, but for a shard that had gone up
  // before the cancel took effect (counted). In a forked child, a copy of the
  // writer is abandoned: the parent's files and upload are left alone.
  void Abort();

  int64_t shards_written() const;
  int64_t samples_written() const;

 private:
  struct State;
  explicit ShardWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace wds
