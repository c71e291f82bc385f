// Shard indexes: DALI's text index (.idx) and the wids JSON dataset index.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tar/index_lookup.h"
#include "wds/tar/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = wds::ShardIndex::Parse(text, "fuzz.idx");
  if (index.ok()) {
    (void)wds::SampleStartOffsets(*index);
    (void)index->ToText();
  }
  auto dataset = wds::DatasetIndex::Parse(text, "fuzz.json", "base");
  if (dataset.ok()) (void)dataset->ToJson();
  return 0;
}
