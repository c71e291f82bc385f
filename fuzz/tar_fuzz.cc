// Tar shards (plain, gzip, zstd, bzip2, xz: detected from the content) through
// the reader and the grouping, a header-only scan, and a second read started
// at a sample's offset, which must give the same samples as the full read.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wds/byte_stream.h"
#include "wds/internal/tar_grouping.h"
#include "wds/shard_index.h"

namespace {

constexpr int64_t kMaxMember = int64_t{16} << 20;

// Keys reads every sample of `tar` from `start`; false on an error.
bool Keys(const std::string& tar, int64_t start, std::vector<std::string>& keys) {
  wds::ShardSampleReaderOptions options;
  options.tar.max_member_size = kMaxMember;
  options.tar.start_offset = start;
  auto reader = wds::ShardSampleReader::Open(wds::MemoryStream("fuzz.tar", tar), options);
  if (!reader.ok()) return false;
  while (true) {
    auto sample = (*reader)->Next();
    if (!sample.ok()) return false;
    if (!sample->has_value()) return true;
    keys.push_back((*sample)->key);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string tar(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> all;
  const bool complete = Keys(tar, 0, all);
  auto index = wds::ScanStream(wds::MemoryStream("fuzz.tar", tar));
  if (!complete || !index.ok() || index->samples.size() != all.size()) return 0;
  // A read that starts at sample k gives samples k.. of the full read.
  const std::vector<int64_t> starts = wds::SampleStartOffsets(*index);
  for (size_t k : {size_t{1}, starts.size() / 2, starts.size() - 1}) {
    if (k == 0 || k >= starts.size()) continue;
    std::vector<std::string> tail;
    if (!Keys(tar, starts[k], tail)) __builtin_trap();
    if (tail != std::vector<std::string>(all.begin() + k, all.end())) __builtin_trap();
  }
  return 0;
}
