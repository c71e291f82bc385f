// Shard lists, counts, indexes and equalized epoch plans for Python, and the
// tar members of one shard (for tarfile_to_samples' select_files and
// rename_files, which run Python on member names).
#include <pthread.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chain.h"
#include "errors.h"
#include "opener.h"
#include "py_ref.h"
#include "shared_batches.h"
#include "sources.h"
#include "wds/base/interrupt.h"
#include "wds/base/random.h"
#include "wds/internal/base/strings.h"
#include "wds/loader/equalize.h"
#include "wds/loader/placement.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_counts.h"
#include "wds/tar/shard_index.h"
#include "wds/tar/tar_reader.h"
#include "worker_context.h"

namespace wdspy {
namespace {

template <typename T>
T ValueOrRaise(absl::StatusOr<T> value, Phase phase = Phase::kSetup) {
  if (!value.ok()) RaiseStatus(value.status(), phase);
  return *std::move(value);
}

wds::ShardListOptions ListOptions(bool shuffle, bool split_nodes, bool split_workers,
                                  bool allow_empty) {
  wds::ShardListOptions o;
  o.shuffle = shuffle;
  o.nodesplitter = split_nodes ? wds::ShardSplitter(wds::SplitByNode) : nullptr;
  o.workersplitter = split_workers ? wds::ShardSplitter(wds::SplitByWorker) : nullptr;
  o.allow_empty = allow_empty;
  return o;
}

// TarMembers iterates (name, bytes) over one shard's regular members.
// Waits release the GIL and run Python's signal handlers (Ctrl-C).
class TarMembers {
 public:
  TarMembers(const std::string& url, py::handle remote) {
    wds::Opener open = PythonOpener(RemoteAccess::FromPython(remote));
    absl::StatusOr<std::unique_ptr<wds::TarReader>> reader;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      absl::StatusOr<std::unique_ptr<wds::ByteStream>> stream = open(url);
      reader = stream.ok() ? wds::TarReader::Open(*std::move(stream)) : stream.status();
    }
    signals.RethrowIfRaised();
    reader_ = ProcessLocal<wds::TarReader>(ValueOrRaise(std::move(reader), Phase::kData));
  }

  py::object Next() {
    if (!reader_) throw py::stop_iteration();
    absl::StatusOr<std::optional<wds::TarMember>> member;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      member = reader_->Next();
    }
    if (signals.raised()) {
      reader_.reset();
      signals.RethrowIfRaised();
    }
    if (!member.ok()) {
      reader_.reset();
      RaiseStatus(member.status(), Phase::kData);
    }
    if (!member->has_value()) {
      reader_.reset();
      throw py::stop_iteration();
    }
    const wds::Buffer& data = (*member)->data;
    return py::make_tuple((*member)->name,
                          py::bytes(reinterpret_cast<const char*>(data.data()), data.size()));
  }

  void Close() { reader_.reset(); }

 private:
  ProcessLocal<wds::TarReader> reader_;
};

// PlanWithCachedCounts is wds::PlanRankEpoch with the counts it reads taken
// from (and added to) this process's cache: those of every shard for a
// sample-granular split, else those of the shards this rank's workers read.
absl::StatusOr<wds::RankEpochPlan> PlanWithCachedCounts(const std::vector<std::string>& urls,
                                                        const wds::ShardListOptions& list,
                                                        const wds::WorkerContext& ctx,
                                                        const wds::EpochBatching& batching,
                                                        wds::ListCounts& cached,
                                                        const wds::Opener& opener) {
  std::vector<std::string> needed;
  if (list.split == wds::SplitGranularity::kSamples) {
    needed = urls;
  } else {
    // A worker without shards is PlanRankEpoch's error to report.
    wds::ShardListOptions lenient = list;
    lenient.allow_empty = true;
    for (int w = 0; w < ctx.num_workers; ++w) {
      wds::WorkerContext worker = ctx;
      worker.worker = w;
      absl::StatusOr<std::vector<std::string>> mine = wds::ShardsForWorker(urls, lenient, worker);
      if (!mine.ok()) return mine.status();
      needed.insert(needed.end(), mine->begin(), mine->end());
    }
  }
  absl::StatusOr<std::vector<int64_t>> read = cached.Counts(needed, opener);
  if (!read.ok()) return read.status();
  wds::ShardSampleCounts counts;
  for (size_t i = 0; i < needed.size(); ++i) counts.Set(needed[i], (*read)[i]);
  return wds::PlanRankEpoch(urls, list, ctx, batching, counts);
}

void RegisterPlan(py::module_& m) {
  py::class_<wds::WorkerPlan>(m, "WorkerPlan", "One loader worker's pass over its shards.")
      .def_readonly("shards", &wds::WorkerPlan::shards)
      .def_readonly("samples", &wds::WorkerPlan::samples)
      .def_readonly("batches", &wds::WorkerPlan::batches);
  py::class_<wds::RankEpochPlan>(m, "RankEpochPlan", "This rank's epoch, planned exactly.")
      .def_readonly("workers", &wds::RankEpochPlan::workers)
      .def_property_readonly("samples", &wds::RankEpochPlan::samples)
      .def_property_readonly("batches", &wds::RankEpochPlan::batches)
      .def_readonly("list_digest", &wds::RankEpochPlan::list_digest,
                    "What every rank must see alike: the URLs in order and, for a "
                    "sample-granular split, their counts (0 for a resumed epoch).")
      .def_readonly("dataset_shards", &wds::RankEpochPlan::dataset_shards)
      .def_readonly("dataset_samples", &wds::RankEpochPlan::dataset_samples,
                    "A sample-granular split's total (0 for whole shards).")
      .def("batches_without_repeats", &wds::RankEpochPlan::BatchesWithoutRepeats)
      .def("batches_covering_pass", &wds::RankEpochPlan::BatchesCoveringPass)
      .def("local_steps",
           [](const wds::RankEpochPlan& plan, const std::string& policy) {
             return plan.LocalSteps(ValueOrRaise(wds::ParseEqualizePolicy(policy)));
           })
      .def("samples_in_first", [](const wds::RankEpochPlan& plan, int64_t n) {
        if (n < 0 || n > plan.BatchesWithoutRepeats()) {
          throw py::value_error("n must lie in [0, batches_without_repeats()]");
        }
        return plan.SamplesInFirst(n);
      });
  m.def(
      "plan_rank_epoch",
      [](const std::vector<std::string>& urls, bool shuffle, bool split_nodes, bool split_workers,
         int rank, int world_size, int num_workers, int64_t epoch, uint64_t seed,
         int64_t batch_size, bool partial, bool split_samples, const std::string& dataset_index,
         py::handle remote, py::handle index_remote, uint64_t index_digest) {
        wds::WorkerContext ctx =
            CheckedWorkerContext(rank, world_size, 0, num_workers, epoch, 0, seed);
        wds::EpochBatching batching{batch_size, partial};
        std::shared_ptr<const RemoteAccess> access = RemoteAccess::FromPython(remote);
        std::shared_ptr<wds::ListCounts> cached =
            CountsFor(urls, dataset_index, RemoteAccess::FromPython(index_remote));
        if (split_samples) CheckIndexUnchanged(*cached, urls, dataset_index, index_digest);
        const wds::Opener opener = PythonOpener(access);
        absl::StatusOr<wds::RankEpochPlan> plan;
        SignalCheck signals;  // counts may read stalled shards
        {
          ScopedGilRelease release;
          wds::ScopedInterruptCheck check(signals.check());
          wds::ShardListOptions list = ListOptions(shuffle, split_nodes, split_workers, false);
          if (split_samples) list.split = wds::SplitGranularity::kSamples;
          plan = PlanWithCachedCounts(urls, list, ctx, batching, *cached, opener);
        }
        signals.RethrowIfRaised();
        return ValueOrRaise(std::move(plan));
      },
      py::arg("urls"), py::kw_only(), py::arg("shuffle"), py::arg("split_nodes"),
      py::arg("split_workers"), py::arg("rank"), py::arg("world_size"), py::arg("num_workers"),
      py::arg("epoch"), py::arg("seed"), py::arg("batch_size"), py::arg("partial"),
      py::arg("split_samples") = false, py::arg("dataset_index") = "",
      py::arg("remote") = py::none(), py::arg("index_remote") = py::none(),
      py::arg("index_digest") = 0,
      "This rank's epoch planned exactly; shards not counted yet in this process are counted "
      "through the reader of `remote` (RemoteOptions._native()), a remote dataset index read "
      "with `index_remote`'s options (None: the environment's).");
  m.def(
      "counts_known",
      [](const std::vector<std::string>& urls, const std::string& dataset_index,
         py::handle remote) {
        std::shared_ptr<wds::ListCounts> counts =
            CountsFor(urls, dataset_index, RemoteAccess::FromPython(remote));
        wds::UnlistedShards unlisted;
        if (counts->index() != nullptr) unlisted = wds::FindUnlisted(urls, *counts->index());
        return py::make_tuple(counts->known(), unlisted.count, unlisted.first,
                              counts->IndexDigest(urls));
      },
      py::arg("urls"), py::arg("dataset_index") = "", py::arg("remote") = py::none(),
      "(known, unlisted, first unlisted, index digest): whether every shard's count is known "
      "without reading the shard (listed in the dataset index, or a local file with an .idx "
      "sidecar), as this process first saw it; how many of the URLs the index does not list, "
      "and the first; the index's digest (0 without one).");
}

void RegisterShardLists(py::module_& m) {
  m.def(
      "expand_urls", [](const std::string& urls) { return ValueOrRaise(wds::ExpandUrls(urls)); },
      py::arg("urls"), "Brace and '::' expansion, as the reference's expand_urls.");
  m.def(
      "shards_for_worker",
      [](const std::vector<std::string>& urls, bool shuffle, bool split_nodes, bool split_workers,
         bool allow_empty, int rank, int world_size, int worker, int num_workers, int64_t epoch,
         int64_t pass, uint64_t seed) {
        return ValueOrRaise(wds::ShardsForWorker(
            urls, ListOptions(shuffle, split_nodes, split_workers, allow_empty),
            CheckedWorkerContext(rank, world_size, worker, num_workers, epoch, pass, seed)));
      },
      py::arg("urls"), py::kw_only(), py::arg("shuffle") = false, py::arg("split_nodes") = true,
      py::arg("split_workers") = true, py::arg("allow_empty") = false, py::arg("rank") = 0,
      py::arg("world_size") = 1, py::arg("worker") = 0, py::arg("num_workers") = 1,
      py::arg("epoch") = 0, py::arg("pass_") = 0, py::arg("seed") = 0);
  m.def(
      "count_samples",
      [](const std::string& url, py::handle remote) {
        const wds::Opener opener = PythonOpener(RemoteAccess::FromPython(remote));
        absl::StatusOr<int64_t> n;
        SignalCheck signals;
        {
          ScopedGilRelease release;
          wds::ScopedInterruptCheck check(signals.check());
          n = wds::ReadShardCount(url, opener);
        }
        signals.RethrowIfRaised();
        return ValueOrRaise(std::move(n), Phase::kData);
      },
      py::arg("url"), py::arg("remote") = py::none(),
      "Samples in a shard: from its .idx sidecar (a remote shard's when the server has one), "
      "else a header-only scan; remote URLs with the options of `remote`.");
  m.def(
      "write_index",
      [](const std::string& url) {
        absl::Status status;
        int64_t samples = 0;
        {
          ScopedGilRelease release;
          absl::StatusOr<wds::ShardIndex> index = wds::ScanShard(url);
          status = index.status();
          if (index.ok()) {
            samples = static_cast<int64_t>(index->samples.size());
            status = index->Save(wds::IndexPath(url));
          }
        }
        if (!status.ok()) RaiseStatus(status, Phase::kData);
        return samples;
      },
      py::arg("url"), "Writes the DALI .idx sidecar of a local shard; returns its sample count.");
  m.def(
      "resolve_placement",
      []() {
        wds::Placement p = ValueOrRaise(wds::ResolvePlacement({}, "the environment"));
        return py::make_tuple(p.rank, p.world_size);
      },
      "(rank, world_size) from RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS, else (0, 1).");
  py::class_<TarMembers>(m, "TarMembers", "The regular members of one shard: (name, bytes).")
      .def(py::init<const std::string&, py::handle>(), py::arg("url"),
           py::arg("remote") = py::none())
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TarMembers::Next)
      .def("close", &TarMembers::Close);
}

// The fork handlers hold this module's locks across a fork, so that no other
// thread holds one then, and the child closes the shard descriptors its
// parent's native iterators hold. They run inside fork() itself
// (pthread_atfork), after Python's before-fork hooks: no Python code runs
// between taking the locks and the fork, so no other thread can take the GIL
// and then wait for one of them while the forking thread waits for the GIL.
// The holders of these locks never wait for the GIL. (The wait for a thread
// making its thread state, first, may release the GIL; see py_ref.h.)
void PrepareFork() {
  WaitForThreadStatesBeforeFork();
  BeforeFork();
  SharedMappingsBeforeFork();
  ProcessCounts().LockForFork();
  LockGateForFork();  // last: its holders take no other lock
}

void AfterForkParent() {
  UnlockThreadStatesAfterFork(/*in_child=*/false);
  ProcessCounts().UnlockAfterFork();
  SharedMappingsAfterFork();
  AfterForkInParent();
}

void AfterForkChild() {
  UnlockThreadStatesAfterFork(/*in_child=*/true);
  ProcessCounts().UnlockAfterFork();
  SharedMappingsAfterFork();
  AfterForkInChild();
}

void RegisterFork(py::module_& m) {
  // Once per process: a forked child keeps its parent's handlers.
  if (const int error = pthread_atfork(PrepareFork, AfterForkParent, AfterForkChild)) {
    throw std::runtime_error(wds::Cat("pthread_atfork: ", std::strerror(error)));
  }
  m.def("_open_shard_descriptors", &OpenShardDescriptors,
        "Shard descriptors this module holds open (for tests).");
}

}  // namespace

void RegisterShards(py::module_& m) {
  // The core's one seed mixer, for the seeds Python derives (a shuffle
  // stage's own epoch).
  m.def(
      "derive_shuffle_seed",
      [](uint64_t seed, uint64_t epoch) {
        return wds::DeriveSeed(seed, {wds::kShuffle, epoch});
      },
      py::arg("seed"), py::arg("epoch"));
  RegisterShardLists(m);
  RegisterPlan(m);
  RegisterFork(m);
}

}  // namespace wdspy
