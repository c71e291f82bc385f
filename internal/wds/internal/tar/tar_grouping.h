// Grouping tar members into WebDataset samples: the one implementation of the
// format's rules, shared by the pipeline's tar source, the header-only index
// scan (ScanShard) and wds-shard.
//
//   auto reader = wds::ShardSampleReader::Open(*wds::OpenUrl(url));
//   while (true) {
//     absl::StatusOr<std::optional<wds::GroupedSample>> s = (*reader)->Next();
//     if (!s.ok() || !s->has_value()) break;   // an error comes after the samples before it
//     for (const wds::SampleMember& m : (*s)->members) Use((*s)->key, m.field, m.member.data);
//   }
//
// The rules (those of the reference package): member "dir/a.seg.png" has key
// "dir/a" and field "seg.png", split at the FIRST dot of the basename, so a
// key never holds a dot after its last '/'. Names without a dot in the
// basename, and metadata names (a top-level "__x__", or "__x__/..."), belong
// to no sample. Consecutive members with the same key form one sample; a
// sample never spans shards. Fields keep their case here (the pipeline
// lower-cases them) and repeated fields are kept (the pipeline rejects them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"
#include "wds/tar/tar_reader.h"

namespace wds {

// MemberName is a member name split for grouping; both views point into the
// name.
struct MemberName {
  std::string_view key;
  std::string_view field;  // not lower-cased
};

// SplitMemberName returns nullopt for names without a dot in the basename.
std::optional<MemberName> SplitMemberName(std::string_view name);
// IsMetadataName is true for "__x__" at the top level and "__x__/...".
bool IsMetadataName(std::string_view name);
// IsWritableKey is true when members "<key>.<field>" group back under `key`:
// its basename (after the last '/') is not empty and holds no dot. Writers
// refuse other keys (ShardWriter, wds-shard create, the Python writers).
bool IsWritableKey(std::string_view key);

// SampleMember is one member of a grouped sample and its field.
struct SampleMember {
  std::string field;  // as in the member name, not lower-cased
  TarMember member;
};

// GroupedSample is one run of consecutive members with one key, in tar order.
struct GroupedSample {
  std::string key;
  std::vector<SampleMember> members;

  // offset is the header offset of the sample's first member.
  int64_t offset() const { return members.empty() ? 0 : members.front().member.offset; }
};

struct ShardSampleReaderOptions {
  TarReaderOptions tar;
  // on_skipped, if set, sees each member that belongs to no sample; returning
  // false ends the shard there (Next() returns nullopt, without Finish()ing
  // the stream).
  std::function<bool(const TarMember&)> on_skipped;
  // member_name, if set, is asked for the name of each member that is not a
  // metadata name (the reference checks those on the tar's name first),
  // before the member's data is read: nullopt skips the member, unread (on_skipped does not see
  // it), a name is split and grouped in place of the member's own (which the member keeps, for
  // messages). Its error ends the shard with it, after the sample in
  // progress (complete up to that member, as the reference's end-of-shard
  // marker completes it); the reader holding that choice (TarSamples) may
  // still drop it.
  MemberNameHook member_name;
};

// ShardSampleReader groups the members of one shard. Not thread-safe.
class ShardSampleReader {
 public:
  // Open takes ownership of `stream`.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShardSampleReader>> Open(
      std::unique_ptr<ByteStream> stream, ShardSampleReaderOptions options = {});
  ~ShardSampleReader();

  // Next returns the next sample, nullopt at the end of the shard, or the
  // tar's error (see TarReader::Next). A sample is returned only once it is
  // known to be complete: a member of another key follows it, the shard ends,
  // or the error that ends the shard concerns a member of another key; the
  // error then comes from the following call. The sample that an error cuts
  // short is dropped. End and errors are sticky.
  [[nodiscard]] absl::StatusOr<std::optional<GroupedSample>> Next();

  const std::string& url() const;

 private:
  explicit ShardSampleReader(std::unique_ptr<TarReader> reader, ShardSampleReaderOptions options);

  std::unique_ptr<TarReader> reader_;
  ShardSampleReaderOptions options_;
  // current_ is the sample being assembled (its key is set when it has
  // members); pending_error_ is the error held back while current_ is
  // returned.
  GroupedSample current_;
  std::optional<absl::Status> pending_error_;
  bool ended_ = false;
  // renamed_ holds the member_name hook's answer while it is split.
  std::string renamed_;
  // Decision is the member_name hook's answer for the member the tar reader
  // is about to return, asked (TarReaderOptions::want) before its data is
  // read, so that a member the hook drops is skipped unread.
  struct Decision {
    bool made = false;
    absl::StatusOr<std::optional<std::string>> answer;
  };
  std::shared_ptr<Decision> decision_;
};

}  // namespace wds
