// Shard rolling: upper bounds of the tar bytes of samples, and the rule by
// which ShardWriter starts a new shard. wds-shard applies the same rule to
// samples not yet read to plan shards and write them in parallel.
#pragma once

#include <cstdint>
#include <string_view>

#include "wds/base/sample.h"

namespace wds {

// MemberFootprint is an upper bound on the uncompressed tar bytes a member
// named `name` holding `size` bytes takes, headers and padding included.
int64_t MemberFootprint(std::string_view name, int64_t size);
// TarFootprint sums MemberFootprint over the members TarWriter::Write would
// write for `sample`.
int64_t TarFootprint(const Sample& sample);

// ShardRoller applies the rolling rule to a sequence of sample footprints: a
// shard ends before the sample that would make it hold more than `maxcount`
// samples or more than `maxsize` bytes (end-of-archive blocks included).
class ShardRoller {
 public:
  ShardRoller(int64_t maxcount, int64_t maxsize) : maxcount_(maxcount), maxsize_(maxsize) {}
  // Add accounts a sample of `footprint` bytes and returns whether it starts
  // a new shard (true for the first sample).
  bool Add(int64_t footprint);

 private:
  int64_t maxcount_;
  int64_t maxsize_;
  int64_t count_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace wds
