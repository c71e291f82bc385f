#include "wds/tar/shard_counts.h"

#include <string_view>
#include <unordered_set>
#include <utility>

namespace wds {
namespace {

std::string Key(const std::vector<std::string>& urls, const std::string& index_path) {
  size_t size = index_path.size() + 1;
  for (const std::string& url : urls) size += url.size() + 1;
  std::string key;
  key.reserve(size);
  key.append(index_path).push_back('\0');
  for (const std::string& url : urls) key.append(url).push_back('\0');
  return key;
}

}  // namespace

bool CountsKnownWithoutReading(const std::vector<std::string>& urls, const DatasetIndex* index) {
  std::unordered_set<std::string_view> listed;
  if (index != nullptr) {
    for (const DatasetShard& shard : index->shards) listed.insert(shard.url);
  }
  for (const std::string& url : urls) {
    if (listed.count(url) == 0 && !HasSidecar(url)) return false;
  }
  return true;
}

absl::StatusOr<int64_t> ReadShardCount(const std::string& url, const Opener& opener) {
  if (HasSidecar(url)) return CountSamples(url);
  absl::StatusOr<ShardIndex> index = IndexOf(url, opener);
  if (!index.ok()) return index.status();
  return static_cast<int64_t>(index->samples.size());
}

ListCounts::ListCounts(std::shared_ptr<std::mutex> mu, std::shared_ptr<const DatasetIndex> index,
                       bool known)
    : mu_(std::move(mu)), index_(std::move(index)), known_(known) {
  if (index_ == nullptr) return;
  for (const DatasetShard& shard : index_->shards) counted_[shard.url] = shard.nsamples;
  known_index_ = index_;
}

absl::StatusOr<int64_t> ListCounts::Count(const std::string& url, const Opener& opener) {
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (auto it = counted_.find(url); it != counted_.end()) return it->second;
  }
  absl::StatusOr<int64_t> count = ReadShardCount(url, opener);
  if (!count.ok()) return count.status();
  std::lock_guard<std::mutex> lock(*mu_);
  if (counted_.emplace(url, *count).second) known_index_ = nullptr;
  return *count;
}

absl::StatusOr<std::vector<int64_t>> ListCounts::Counts(const std::vector<std::string>& urls,
                                                        const Opener& opener) {
  std::vector<int64_t> counts;
  counts.reserve(urls.size());
  for (const std::string& url : urls) {
    absl::StatusOr<int64_t> count = Count(url, opener);
    if (!count.ok()) return count.status();
    counts.push_back(*count);
  }
  return counts;
}

std::shared_ptr<const DatasetIndex> ListCounts::Known() {
  std::lock_guard<std::mutex> lock(*mu_);
  if (known_index_ == nullptr) {
    auto index = std::make_shared<DatasetIndex>();
    index->shards.reserve(counted_.size());
    for (const auto& [url, count] : counted_) index->shards.push_back({url, count, 0});
    known_index_ = std::move(index);
  }
  return known_index_;
}

ShardCounts::ShardCounts() : mu_(std::make_shared<std::mutex>()) {}

absl::StatusOr<std::shared_ptr<ListCounts>> ShardCounts::For(const std::vector<std::string>& urls,
                                                             const std::string& index_path) {
  const std::string key = Key(urls, index_path);
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (auto it = lists_.find(key); it != lists_.end()) return it->second;
  }
  // Made outside the lock, which no file read may hold; another thread may
  // make the same entry meanwhile (the first one stays).
  std::shared_ptr<const DatasetIndex> index;
  if (!index_path.empty()) {
    absl::StatusOr<DatasetIndex> loaded = DatasetIndex::Load(index_path);
    if (!loaded.ok()) return loaded.status();
    index = std::make_shared<const DatasetIndex>(*std::move(loaded));
  }
  const bool known = CountsKnownWithoutReading(urls, index.get());
  auto list = std::make_shared<ListCounts>(mu_, std::move(index), known);
  std::lock_guard<std::mutex> lock(*mu_);
  return lists_.emplace(key, std::move(list)).first->second;
}

}  // namespace wds
