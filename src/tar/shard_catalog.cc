#include "tar/shard_catalog.h"

#include <string_view>
#include <unordered_map>
#include <utility>

#include "tar/index_lookup.h"
#include "wds/internal/base/concurrently.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/io/remote.h"
#include "wds/tar/shard_counts.h"

namespace wds {

ShardCatalog::ShardCatalog(Opener opener, std::shared_ptr<const DatasetIndex> index)
    : opener_(std::move(opener)) {
  if (index == nullptr) return;
  for (const DatasetShard& shard : index->shards) counts_[shard.url] = shard.nsamples;
}

absl::StatusOr<std::vector<int64_t>> ShardCatalog::Counts(const std::vector<std::string>& urls) {
  const std::unordered_map<std::string_view, absl::Status> failed = ReadRemoteIndexes(urls);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> counts;
  counts.reserve(urls.size());
  for (const std::string& url : urls) {
    if (auto it = failed.find(url); it != failed.end()) return it->second;
    WDS_ASSIGN_OR_RETURN(int64_t count, CountLocked(url));
    counts.push_back(count);
  }
  return counts;
}

std::unordered_map<std::string_view, absl::Status> ShardCatalog::ReadRemoteIndexes(
    const std::vector<std::string>& urls) {
  // One caller at a time: a pipeline's workers count at once, and those
  // after the first find the shards it read.
  std::lock_guard<std::mutex> reading(read_mu_);
  std::vector<std::string_view> unread;
  {
    std::lock_guard<std::mutex> lock(mu_);
    unread =
        UnknownRemoteUrls(urls, [&](const std::string& url) { return counts_.count(url) != 0; });
  }
  std::unordered_map<std::string_view, absl::Status> failed;
  if (unread.size() < 2) return failed;  // Counts reads one as well
  // Each index is kept as its start offsets only (8 bytes a sample).
  std::vector<absl::StatusOr<std::vector<int64_t>>> read = ReadEach<std::vector<int64_t>>(
      unread, kCountThreads, [&](std::string_view url) -> absl::StatusOr<std::vector<int64_t>> {
        WDS_ASSIGN_OR_RETURN(ShardIndex index, IndexOf(url, opener_));
        return SampleStartOffsets(index);
      });
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < unread.size(); ++i) {
    if (!read[i].ok()) {
      failed.emplace(unread[i], read[i].status());
      continue;
    }
    const std::string url(unread[i]);
    const auto count = static_cast<int64_t>(read[i]->size());
    starts_.try_emplace(url, *std::move(read[i]));
    counts_.try_emplace(url, count);
  }
  return failed;
}

absl::StatusOr<int64_t> ShardCatalog::Count(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  return CountLocked(url);
}

absl::StatusOr<int64_t> ShardCatalog::StartOffset(const std::string& url, int64_t sample) {
  std::lock_guard<std::mutex> lock(mu_);
  WDS_ASSIGN_OR_RETURN(const std::vector<int64_t>* starts, StartsLocked(url));
  if (sample >= static_cast<int64_t>(starts->size())) {
    return absl::FailedPreconditionError(Cat(url, ": cannot start at sample ", sample,
                                             ": its index lists ", starts->size(),
                                             " samples (a stale sidecar or dataset index?)"));
  }
  return (*starts)[sample];
}

absl::StatusOr<int64_t> ShardCatalog::CountLocked(const std::string& url) {
  if (auto it = counts_.find(url); it != counts_.end()) return it->second;
  int64_t count = 0;
  if (HasSidecar(url)) {
    WDS_ASSIGN_OR_RETURN(count, CountSamples(url));
  } else {
    WDS_ASSIGN_OR_RETURN(const std::vector<int64_t>* starts, StartsLocked(url));
    count = static_cast<int64_t>(starts->size());
  }
  counts_[url] = count;
  return count;
}

absl::StatusOr<const std::vector<int64_t>*> ShardCatalog::StartsLocked(const std::string& url) {
  if (auto it = starts_.find(url); it != starts_.end()) return &it->second;
  WDS_ASSIGN_OR_RETURN(ShardIndex index, IndexOf(url, opener_));
  return &(starts_[url] = SampleStartOffsets(index));
}

}  // namespace wds
