#include "dataset_counts.h"

#include <pybind11/pybind11.h>

#include <mutex>
#include <unordered_map>
#include <utility>

#include "errors.h"
#include "wds/internal/strings.h"

namespace wdspy {
namespace {

namespace py = pybind11;

// The cache's one lock guards the registry (also under the GIL) and every
// DatasetCounts' memo. It is never held while a count is read, so the fork
// handlers can take it without waiting on I/O.
std::mutex& CacheLock() {
  static auto* lock = new std::mutex;
  return *lock;
}

// The registry, keyed by the index path and the URLs, each ended by a NUL
// (which no path or URL holds). Entries live as long as the process: a
// process iterates few shard lists, and each entry holds only counts.
using Registry = std::unordered_map<std::string, std::shared_ptr<DatasetCounts>>;
Registry& TheRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

std::string Key(const std::vector<std::string>& urls, const std::string& index_path) {
  size_t size = index_path.size() + 1;
  for (const std::string& url : urls) size += url.size() + 1;
  std::string key;
  key.reserve(size);
  key.append(index_path).push_back('\0');
  for (const std::string& url : urls) key.append(url).push_back('\0');
  return key;
}

bool AllKnown(const std::vector<std::string>& urls, const wds::DatasetIndex* index) {
  std::unordered_map<std::string_view, bool> listed;
  if (index != nullptr) {
    for (const wds::DatasetShard& shard : index->shards) listed.emplace(shard.url, true);
  }
  for (const std::string& url : urls) {
    if (listed.count(url) == 0 && !wds::HasSidecar(url)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<int64_t> ReadShardCount(const std::string& url, const wds::Opener& opener) {
  if (wds::HasSidecar(url)) return wds::CountSamples(url);
  absl::StatusOr<wds::ShardIndex> index = wds::IndexOf(url, opener);
  if (!index.ok()) return index.status();
  return static_cast<int64_t>(index->samples.size());
}

DatasetCounts::DatasetCounts(std::shared_ptr<const wds::DatasetIndex> index, bool known)
    : index_(std::move(index)), known_(known) {
  if (index_ == nullptr) return;
  for (const wds::DatasetShard& shard : index_->shards) counted_[shard.url] = shard.nsamples;
  known_index_ = index_;
}

absl::StatusOr<int64_t> DatasetCounts::Count(const std::string& url, const wds::Opener& opener) {
  {
    std::lock_guard<std::mutex> lock(CacheLock());
    if (auto it = counted_.find(url); it != counted_.end()) return it->second;
  }
  absl::StatusOr<int64_t> count = ReadShardCount(url, opener);
  if (!count.ok()) return count.status();
  std::lock_guard<std::mutex> lock(CacheLock());
  if (counted_.emplace(url, *count).second) known_index_ = nullptr;
  return *count;
}

absl::StatusOr<std::vector<int64_t>> DatasetCounts::Counts(const std::vector<std::string>& urls,
                                                           const wds::Opener& opener) {
  std::vector<int64_t> counts;
  counts.reserve(urls.size());
  for (const std::string& url : urls) {
    absl::StatusOr<int64_t> count = Count(url, opener);
    if (!count.ok()) return count.status();
    counts.push_back(*count);
  }
  return counts;
}

std::shared_ptr<const wds::DatasetIndex> DatasetCounts::Known() {
  std::lock_guard<std::mutex> lock(CacheLock());
  if (known_index_ == nullptr) {
    auto index = std::make_shared<wds::DatasetIndex>();
    index->shards.reserve(counted_.size());
    for (const auto& [url, count] : counted_) index->shards.push_back({url, count, 0});
    known_index_ = std::move(index);
  }
  return known_index_;
}

std::shared_ptr<DatasetCounts> CountsFor(const std::vector<std::string>& urls,
                                         const std::string& index_path) {
  const std::string key = Key(urls, index_path);
  {
    std::lock_guard<std::mutex> lock(CacheLock());
    if (auto it = TheRegistry().find(key); it != TheRegistry().end()) return it->second;
  }
  // Made outside the lock, which no file read may hold; another thread may
  // make the same entry meanwhile (the first one stays).
  std::shared_ptr<const wds::DatasetIndex> index;
  bool known = false;
  absl::Status error;
  {
    py::gil_scoped_release release;
    if (!index_path.empty()) {
      absl::StatusOr<wds::DatasetIndex> loaded = wds::DatasetIndex::Load(index_path);
      if (loaded.ok()) {
        index = std::make_shared<const wds::DatasetIndex>(*std::move(loaded));
      } else {
        error = loaded.status();
      }
    }
    if (error.ok()) known = AllKnown(urls, index.get());
  }
  if (!error.ok()) {
    RaiseStatus(absl::Status(error.code(), wds::Cat("dataset_index ", wds::ToStd(error.message()))),
                Phase::kSetup);
  }
  auto counts = std::make_shared<DatasetCounts>(std::move(index), known);
  std::lock_guard<std::mutex> lock(CacheLock());
  return TheRegistry().emplace(key, std::move(counts)).first->second;
}

void CountsBeforeFork() { CacheLock().lock(); }

void CountsAfterFork() { CacheLock().unlock(); }

}  // namespace wdspy
