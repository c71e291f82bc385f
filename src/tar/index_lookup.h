// Index lookup for sample-granular reading: where a reader finds a shard's
// index (its sidecar, a remote "<url>.idx", or a header scan) and at which tar
// offset each of its samples starts. The pipeline's ShardCatalog
// (tar/shard_catalog.h) is built on these; they live beside the index format
// in shard_index.cc.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/byte_stream.h"
#include "wds/shard_index.h"

namespace wds {

// HasSidecar is true when `url` is a local file whose sidecar exists.
bool HasSidecar(std::string_view url);

// IndexOf returns the index of `url`: its sidecar when HasSidecar(url); for
// a remote URL, "<url>.idx" fetched through `opener` when the server has it;
// otherwise a header scan (ScanStream) of the stream `opener` opens (for a
// remote shard, a read of the whole object).
[[nodiscard]] absl::StatusOr<ShardIndex> IndexOf(std::string_view url, const Opener& opener);

// SampleStartOffsets gives, per sample of `index`, the tar offset at which
// reading starts with that sample (TarReaderOptions::start_offset): 0 for the
// first, else the end of the previous sample's last member data, padded to
// 512 bytes, where the next header starts.
std::vector<int64_t> SampleStartOffsets(const ShardIndex& index);

}  // namespace wds
