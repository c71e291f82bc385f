// Tar reading (libarchive) and WebDataset grouping.
//
// TarReader streams the regular-file members of one tar (ustar, GNU long
// names, pax; gzip, bzip2, xz or zstd compressed, detected from content). It
// never seeks and reads each member once into its own Buffer.
//
// Grouping (TarSamples): member "dir/a.seg.png" has key "dir/a" and field
// "seg.png" (split at the FIRST dot of the basename; fields lower-cased, keys
// keep their case). Names without a dot in the basename and metadata names
// (top-level "__x__" or "__x__/...") are skipped. Consecutive members with the
// same key form one sample; a sample never spans shards; a repeated field in
// one sample is an error (to the handler). Each sample has "__key__" and
// "__url__".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/buffer.h"
#include "wds/error.h"
#include "wds/byte_stream.h"
#include "wds/shard_list.h"
#include "wds/stage.h"

namespace wds {

struct TarMember {
  std::string name;
  Buffer data;
  // offset is the byte offset of the member's header in the uncompressed tar.
  int64_t offset = 0;
};

// TarReader reads one tar stream. Not thread-safe.
class TarReader {
 public:
  // Open takes ownership of `stream`. Fails only on setup errors; format
  // errors surface from Next().
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TarReader>> Open(
      std::unique_ptr<ByteStream> stream);
  ~TarReader();

  // Next returns the next regular-file member, nullopt at the end of the
  // archive (after the stream was drained and Finish()ed), or an error naming
  // the URL and, where known, the member and its offset: DataLoss for a
  // truncated or corrupt archive, InvalidArgument for data that is not a tar.
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

// KeyField is a member name split for grouping.
struct KeyField {
  std::string_view key;
  std::string_view field;  // not lower-cased
};
// SplitMemberName returns nullopt for names without a dot in the basename.
std::optional<KeyField> SplitMemberName(std::string_view name);
// IsMetadataName is true for "__x__" at the top level and "__x__/...".
bool IsMetadataName(std::string_view name);

// TarSamples reads every shard `urls` yields and groups members into samples.
// Errors (opening, reading, grouping) go to `handler`; "continue" drops the
// broken sample (or the rest of a broken shard) and goes on with the next.
std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx);

}  // namespace wds
