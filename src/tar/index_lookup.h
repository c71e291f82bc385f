// Index lookup for sample-granular reading: at which tar offset each sample
// of an index (IndexOf, wds/tar/shard_index.h) starts. The pipeline's
// ShardCatalog (tar/shard_catalog.h) is built on it; it lives beside the index
// format in shard_index.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "wds/tar/shard_index.h"

namespace wds {

// SampleStartOffsets gives, per sample of `index`, the tar offset at which
// reading starts with that sample (TarReaderOptions::start_offset): 0 for the
// first, else the end of the previous sample's last member data, padded to
// 512 bytes, where the next header starts.
std::vector<int64_t> SampleStartOffsets(const ShardIndex& index);

}  // namespace wds
