// The native stages and sources that only the Python layer needs, built on
// the core's public Stage API: shard sources fed by Python iterators, the
// reading of shards one at a time for Python error handlers, a shuffle with
// its own seed, and a counter behind the source for empty_check.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convert.h"
#include "handlers.h"
#include "opener.h"
#include "wds/base/stage.h"
#include "wds/pipeline/pipeline.h"
#include "wds/tar/shard_counts.h"
#include "wds/tar/tar_reader.h"

namespace wdspy {

namespace py = pybind11;

struct ShardSourceOptions {
  bool shuffle = false;
  bool resampled = false;
  std::optional<int64_t> nshards;
  bool split_nodes = true;
  bool split_workers = true;
  bool allow_empty = false;
  uint64_t seed = 0;
  // split_samples splits by samples instead of whole shards
  // (wds::SplitGranularity::kSamples); it needs a native handler.
  bool split_samples = false;
  // dataset_index is the path or URL of a dataset index (wds-shard index)
  // giving shard counts; empty: none. Counts are cached per process
  // (CountsFor). A remote index is read with index_remote's options (the
  // shard list's; null: the environment's).
  std::string dataset_index;
  std::shared_ptr<const RemoteAccess> index_remote;
  // index_digest is the index's ListCounts::IndexDigest(urls) when the
  // dataset was made (0: unchecked); CheckIndexUnchanged compares it.
  uint64_t index_digest = 0;
  // shard_weights weigh resampled draws (wds::WebDatasetOptions); empty:
  // uniform.
  std::vector<double> shard_weights = {};
};

// ShardSource reads `urls` as the core's WebDataset() does (per-epoch
// permutation, node and worker splits, tar reading and grouping). A native
// handler runs inside the reader; a Python callable handler makes the shards
// be read one at a time, the callable deciding after each failing shard.
// Setup errors (an empty list) raise ValueError.
// `recipe`, when not null, receives the source's wds::Pipeline::recipe().
// Shards are opened by PythonOpener(remote).
wds::StreamFactory ShardSource(std::vector<std::string> urls, const ShardSourceOptions& options,
                               StageHandler handler, std::shared_ptr<const RemoteAccess> remote,
                               std::string* recipe = nullptr);

// ProcessCounts is this process's cache of shard counts, made at first use
// and kept for the process's life: each iteration of a Python dataset (a new
// native pipeline) and each plan_epoch call would otherwise read the dataset
// index, the sidecars or whole shards again. The fork handlers lock it across
// fork() (a DataLoader worker keeps the counts).
wds::ShardCounts& ProcessCounts();

// CountsFor is ProcessCounts().For(urls, index_url), the GIL released (and
// Ctrl-C heard) while the index is read: a remote one through
// `index_remote` without its cache (a dataset index may be replaced under
// its URL), so each process fetches it once. Its errors raise ValueError
// naming it, those of a remote index as remote shards' do (FileNotFoundError,
// ConnectionError, ...). REQUIRES: the GIL is held.
std::shared_ptr<wds::ListCounts> CountsFor(const std::vector<std::string>& urls,
                                           const std::string& index_url,
                                           const std::shared_ptr<const RemoteAccess>& index_remote);

// CheckIndexUnchanged raises ValueError when `expected` (the index's digest
// of `urls` when the dataset was made; 0: none to check) is not `counts`'
// own: the index at `index_url` was replaced since, and this process (a
// spawned worker) would share out samples by other counts than the rest of
// the job. Only a sample-granular split depends on the counts.
void CheckIndexUnchanged(const wds::ListCounts& counts, const std::vector<std::string>& urls,
                         const std::string& index_url, uint64_t expected);

// UrlSource reads the shards a Python iterator yields (str URLs or dicts with
// a "url"), one at a time, with `handler` deciding after a failing shard.
// Shards are opened by PythonOpener(remote); `member_name`, if set, renames
// or skips members before grouping (WebDatasetOptions::member_name).
// REQUIRES: the GIL is held.
wds::StreamFactory UrlSource(py::handle iterator, StageHandler handler,
                             std::shared_ptr<const RemoteAccess> remote,
                             wds::MemberNameHook member_name = nullptr);

// PythonMemberNames is the core's member-name hook for tarfile_to_samples'
// `rename_files` and `select_files` (None: not given), called under the GIL
// in the reference's order: rename_files(name), then select_files on the new
// name (falsy: the member is skipped). Their exceptions come back as
// themselves (StorePythonError). Null when both are None, so that reading
// without them takes no GIL. REQUIRES: the GIL is held.
wds::MemberNameHook PythonMemberNames(py::handle select_files, py::handle rename_files);

// SampleSource is a Python iterator of samples (dicts or tuples) as a
// native stream. Fields that held torch tensors are added to `tensor_names`.
// REQUIRES: the GIL is held.
wds::StreamFactory SampleSource(py::handle iterator, std::shared_ptr<NameSet> tensor_names);

// CountingStage counts the samples that pass (the source's, for empty_check).
wds::StageFactory CountingStage(std::shared_ptr<std::atomic<int64_t>> count);

// SeededShuffle is the core's ShuffleStage drawing from `seed` (in place of
// the recipe's seed) when given; the stages before it keep the recipe's.
wds::StageFactory SeededShuffle(size_t bufsize, size_t initial, std::optional<uint64_t> seed);

}  // namespace wdspy
