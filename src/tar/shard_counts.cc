#include "wds/tar/shard_counts.h"

#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "wds/internal/base/concurrently.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/io/remote.h"

namespace wds {
namespace {

// Key names a list in any order by two independent sums of its URLs'
// hashes (128 bits: two lists collide with odds of about 2^-128) and its
// length, after the index URL. What a ListCounts holds is per URL but for
// known(), which depends on the set of URLs alone.
std::string Key(const std::vector<std::string>& urls, const std::string& index_url) {
  uint64_t sum = 0;
  uint64_t salted = 0;
  for (const std::string& url : urls) {
    const uint64_t h = Fnv1a(url);
    sum += h;
    salted += Fnv1a(url, h ^ 0x9e3779b97f4a7c15ull);
  }
  return Cat(index_url, std::string_view("\0", 1), urls.size(), ":", sum, ":", salted);
}

std::unordered_set<std::string_view> ListedUrls(const DatasetIndex* index) {
  std::unordered_set<std::string_view> listed;
  if (index == nullptr) return listed;
  listed.reserve(index->shards.size());
  for (const DatasetShard& shard : index->shards) listed.insert(shard.url);
  return listed;
}

}  // namespace

bool CountsKnownWithoutReading(const std::vector<std::string>& urls, const DatasetIndex* index) {
  const std::unordered_set<std::string_view> listed = ListedUrls(index);
  for (const std::string& url : urls) {
    if (listed.count(url) == 0 && !HasSidecar(url)) return false;
  }
  return true;
}

UnlistedShards FindUnlisted(const std::vector<std::string>& urls, const DatasetIndex& index) {
  const std::unordered_set<std::string_view> listed = ListedUrls(&index);
  UnlistedShards unlisted;
  for (const std::string& url : urls) {
    if (listed.count(url) != 0) continue;
    if (unlisted.count++ == 0) unlisted.first = url;
  }
  return unlisted;
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
  listed_.reserve(index_->shards.size());
  for (const DatasetShard& shard : index_->shards) {
    counted_[shard.url] = shard.nsamples;
    listed_[shard.url] = shard.nsamples;
  }
  known_index_ = index_;
}

uint64_t ListCounts::IndexDigest(const std::vector<std::string>& urls) const {
  if (index_ == nullptr) return 0;
  // A sum of each listed URL's own hash (with its length, so that no two
  // entries fold alike by where a URL ends): the same for any order.
  uint64_t digest = 1;  // 0 stands for "no index"
  for (const std::string& url : urls) {
    auto it = listed_.find(url);
    if (it != listed_.end()) {
      digest += Fnv1aValue(static_cast<uint64_t>(it->second),
                           Fnv1a(url, Fnv1aValue(url.size(), kFnv1aOffset)));
    }
  }
  return digest == 0 ? 1 : digest;
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
  // The remote shards not counted yet, each once, in list order: each read
  // waits on round trips, so they are read kCountThreads at a time.
  std::vector<std::string_view> remote;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    remote =
        UnknownRemoteUrls(urls, [&](const std::string& url) { return counted_.count(url) != 0; });
  }
  std::unordered_map<std::string_view, absl::Status> failed;
  if (!remote.empty()) {
    std::vector<absl::StatusOr<int64_t>> read = ReadEach<int64_t>(
        remote, kCountThreads,
        [&](std::string_view url) { return ReadShardCount(std::string(url), opener); });
    std::lock_guard<std::mutex> lock(*mu_);
    for (size_t i = 0; i < remote.size(); ++i) {
      if (!read[i].ok()) {
        failed.emplace(remote[i], read[i].status());
      } else if (counted_.emplace(remote[i], *read[i]).second) {
        known_index_ = nullptr;
      }
    }
  }
  // In list order, the rest read here (local files, pipe: commands): the
  // first failure is the one a loop over the list meets, since no remote
  // read was skipped before the first remote failure (ReadEach).
  std::vector<int64_t> counts;
  counts.reserve(urls.size());
  for (const std::string& url : urls) {
    if (auto it = failed.find(url); it != failed.end()) return it->second;
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
                                                             const std::string& index_url) {
  return For(urls, index_url, nullptr);
}

absl::StatusOr<std::shared_ptr<ListCounts>> ShardCounts::For(const std::vector<std::string>& urls,
                                                             const std::string& index_url,
                                                             const Opener& index_opener) {
  const std::string key = Key(urls, index_url);
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (auto it = lists_.find(key); it != lists_.end()) return it->second;
  }
  // Made outside the lock, which no file read may hold; another thread may
  // make the same entry meanwhile (the first one stays).
  std::shared_ptr<const DatasetIndex> index;
  if (!index_url.empty()) {
    absl::StatusOr<DatasetIndex> loaded = DatasetIndex::Load(index_url, index_opener);
    if (!loaded.ok()) return loaded.status();
    index = std::make_shared<const DatasetIndex>(*std::move(loaded));
  }
  const bool known = CountsKnownWithoutReading(urls, index.get());
  auto list = std::make_shared<ListCounts>(mu_, std::move(index), known);
  std::lock_guard<std::mutex> lock(*mu_);
  return lists_.emplace(key, std::move(list)).first->second;
}

}  // namespace wds
