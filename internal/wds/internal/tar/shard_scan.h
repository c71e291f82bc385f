// ScanStream: the header-only scan of ScanShard (wds/tar/shard_index.h) over a
// stream the caller opened, measuring the stream on the way. wds-shard indexes
// and inspects shards opened with its own remote options this way, and learns
// their sizes without a second request. LocalPath: which file a shard URL
// names (wds-shard index tells two spellings of one shard apart by it).
// UnknownRemoteUrls: which shards of a list a count reads kCountThreads at a
// time.
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
#include "wds/tar/shard_index.h"

namespace wds {

// ScanStream is ScanShard over an open stream (taking ownership of it);
// `stream_bytes`, when not null, receives how many bytes the stream
// delivered or skipped: the shard's size, also for a remote one.
[[nodiscard]] absl::StatusOr<ShardIndex> ScanStream(std::unique_ptr<ByteStream> stream,
                                                    int64_t* stream_bytes = nullptr);

// LocalPath returns the file a URL names, or nullopt for standard input,
// commands and remote URLs, which have no sidecar to look for.
std::optional<std::string> LocalPath(std::string_view url);

// UnknownRemoteUrls returns the remote URLs of `urls` that are not `known`,
// each once, in list order (views of `urls`).
std::vector<std::string_view> UnknownRemoteUrls(
    const std::vector<std::string>& urls, const std::function<bool(const std::string&)>& known);

}  // namespace wds
