// Index lookup for sample-granular reading: at which tar offset each sample
// of an index (IndexOf, wds/tar/shard_index.h) starts, and which file a URL
// names. The pipeline's ShardCatalog (tar/shard_catalog.h) and IndexedShard
// (wds/tar/indexed_shard.h) are built on it; it lives beside the index format
// in shard_index.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/internal/tar/shard_scan.h"  // LocalPath
#include "wds/io/byte_stream.h"
#include "wds/tar/shard_index.h"

namespace wds {

// SampleStartOffsets gives, per sample of `index`, the tar offset at which
// reading starts with that sample (TarReaderOptions::start_offset): 0 for the
// first, else the end of the previous sample's last member data, padded to
// 512 bytes, where the next header starts.
std::vector<int64_t> SampleStartOffsets(const ShardIndex& index);

// SidecarUrl is the URL of `url`'s index sidecar: IndexPath(url), except
// that a remote URL's query and fragment stay at its end
// ("https://h/a.tar?v=1" -> "https://h/a.tar.idx?v=1").
std::string SidecarUrl(std::string_view url);

// RemoteSidecar fetches and parses SidecarUrl(url) through `opener`: nullopt when
// the server has none (404, or S3's 403 to a reader without list rights);
// other failures and a malformed sidecar are errors naming it.
[[nodiscard]] absl::StatusOr<std::optional<ShardIndex>> RemoteSidecar(std::string_view url,
                                                                      const Opener& opener);

}  // namespace wds
