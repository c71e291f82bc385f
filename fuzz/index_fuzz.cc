// Shard indexes: DALI's text index (.idx) and the wids JSON dataset index.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tar/index_lookup.h"
#include "wds/tar/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = wds::ShardIndex::Parse(text, "fuzz.idx");
  if (index.ok()) {
    (void)wds::SampleStartOffsets(*index);
    auto rendered = index->ToText();
    // Names (tar's escapes undone) are rendered back to the same index.
    if (rendered.ok() && text.substr(0, 4) == "v1.2") {
      auto again = wds::ShardIndex::Parse(*rendered, "rendered.idx");
      if (!again.ok() || again->samples.size() != index->samples.size()) std::abort();
      for (size_t i = 0; i < index->samples.size(); ++i) {
        if (again->samples[i].members != index->samples[i].members) std::abort();
      }
    }
  }
  auto dataset = wds::DatasetIndex::Parse(text, "fuzz.json", "base");
  if (dataset.ok()) (void)dataset->ToJson();
  return 0;
}
