#include "chain.h"

#include <pybind11/stl.h>

#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "decoders.h"
#include "errors.h"
#include "handlers.h"
#include "opener.h"
#include "py_ref.h"
#include "shared_batches.h"
#include "sources.h"
#include "wds/base/buffer_pool.h"
#include "wds/batch/batch.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/loader/elastic.h"
#include "wds/shards/shard_list.h"
#include "wds/stages/stages.h"
#include "worker_context.h"

namespace wdspy {
namespace {

// BatchPool is host memory that the batches of several openings share: a
// chain opened without one makes its own pool, whose fresh pages cost more
// than a short chain's work (a collation called from Python).
struct BatchPool {
  std::shared_ptr<wds::BufferPool> pool = std::make_shared<wds::BufferPool>(
      wds::AlignedHostAllocator(), wds::BufferPoolOptions{size_t{32} << 20});
};

// ChainIterator runs one opened chain in the calling thread. Each step
// releases the GIL while native stages read, decode and batch.
class ChainIterator {
 public:
  // `resume` is the stream's ResumeChannel; `restored`, the checkpoint it
  // was opened at, if any.
  ChainIterator(std::unique_ptr<wds::SampleStream> stream, std::unique_ptr<FieldKinds> kinds,
                std::shared_ptr<std::atomic<int64_t>> count,
                std::shared_ptr<wds::ErrorCounters> errors,
                std::shared_ptr<SharedBlocks> shared_blocks,
                std::shared_ptr<wds::ResumeChannel> resume,
                std::optional<wds::StreamCheckpoint> restored)
      : stream_(std::move(stream)),
        kinds_(std::move(kinds)),
        count_(std::move(count)),
        errors_(std::move(errors)),
        shared_blocks_(std::move(shared_blocks)),
        resume_(std::move(resume)),
        checkpoint_(restored),
        dropped_(resume_->restore_dropped) {
    for (const auto& [first, end] : dropped_) dropped_samples_ += end - first;
  }

  py::object Next() {
    if (stream_.inherited()) {
      throw py::value_error(
          "this iterator was started before the process forked; start a new one in this process");
    }
    wds::SampleStream* stream = stream_.get();
    if (stream == nullptr) throw py::stop_iteration();
    // Blocks the main process has released go back to the pool before the
    // next batch takes one.
    if (shared_blocks_ != nullptr) shared_blocks_->Sweep();
    wds::SampleResult item;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      item = stream->Next();
    }
    if (signals.raised()) {
      Close();  // the stream gave up mid-read: its pipe: commands are stopped
      signals.RethrowIfRaised();
    }
    // A stage that could not restore as asked reports it at the first item.
    if (!resume_->error.ok()) item = resume_->error;
    if (!item.ok()) {
      Close();
      RaiseStatus(item.status(), Phase::kData);
    }
    if (!item->has_value()) {
      Close();
      throw py::stop_iteration();
    }
    NoteCheckpoint();
    return SampleToPython(**std::move(item), kinds_.get());
  }

  // Checkpoint is where the stream stood after the last item it yielded
  // (the checkpoint it was restored at before its first), nullopt before
  // any. Still answers after Close().
  const std::optional<wds::StreamCheckpoint>& Checkpoint() const { return checkpoint_; }
  // Dropped is the checkpoint's ResumeChannel::dropped: samples of its pass
  // that a stage before the shuffle skipped.
  const std::vector<std::pair<int64_t, int64_t>>& Dropped() const { return dropped_; }
  // Unrecordable says why the checkpoint cannot be restored from (empty: it
  // can), as found while the chain runs.
  std::string_view Unrecordable() const { return unrecordable_; }

  // Close ends the chain now: open shards are closed, pipe: commands stopped.
  void Close() { stream_.reset(); }

  int64_t count() const { return count_->load(); }
  const wds::ErrorCounters& errors() const { return *errors_; }

 private:
  ProcessLocal<wds::SampleStream> stream_;
  std::unique_ptr<FieldKinds> kinds_;
  std::shared_ptr<std::atomic<int64_t>> count_;
  std::shared_ptr<wds::ErrorCounters> errors_;
  std::shared_ptr<SharedBlocks> shared_blocks_;
  std::shared_ptr<wds::ResumeChannel> resume_;
  std::optional<wds::StreamCheckpoint> checkpoint_;
  std::vector<std::pair<int64_t, int64_t>> dropped_;
  int64_t dropped_samples_ = 0;
  std::string_view unrecordable_;  // one of NoteCheckpoint's literals

  // NoteCheckpoint copies the stream's position after an item, as the core's
  // Loader does for each item it queues (src/loader/loader.cc), and says
  // whether it can be restored from: anew after each item, so that a pass
  // that cannot be recorded does not make the later ones unrecordable.
  // Unlike the Loader's, a shuffle here may be fed fewer samples than the
  // source gave: the samples skipped between them are recorded (the bindings
  // refuse, before running, a stage between them that merges samples).
  void NoteCheckpoint() {
    const wds::ResumeChannel& r = *resume_;
    if (r.sources != 1) {
      unrecordable_ =
          "its shards are read one at a time (a Python handler callable), so no one source "
          "counts the pass's samples";
    } else if (r.shuffles > 1) {
      unrecordable_ = "it has more than one shuffle stage (at most one can be restored)";
    } else if (r.shuffles == 1 && r.shuffle_in + r.dropped_samples != r.position.source_out) {
      unrecordable_ = "its shuffle stage is not fed sample by sample by the shard source";
    } else {
      unrecordable_ = {};
    }
    // Within a pass the drops only grow (runs appended, the last one
    // extended): only what changed is copied, so that a stage dropping every
    // other sample costs O(1) per item here, not a copy of every run.
    const bool new_pass = checkpoint_.has_value() && checkpoint_->pass != r.position.pass;
    if (new_pass || r.dropped.size() < dropped_.size()) {
      dropped_ = r.dropped;
    } else if (r.dropped_samples != dropped_samples_) {
      if (!dropped_.empty()) dropped_.back() = r.dropped[dropped_.size() - 1];
      dropped_.insert(dropped_.end(), r.dropped.begin() + static_cast<ptrdiff_t>(dropped_.size()),
                      r.dropped.end());
    }
    dropped_samples_ = r.dropped_samples;
    checkpoint_ = r.position;
  }
};

std::vector<std::shared_ptr<NameSet>> NameSets(py::handle list) {
  std::vector<std::shared_ptr<NameSet>> out;
  if (list.is_none()) return out;
  for (py::handle h : list) out.push_back(h.cast<std::shared_ptr<NameSet>>());
  return out;
}

wds::MissingField ParseMissing(const std::string& name) {
  absl::StatusOr<wds::MissingField> missing = wds::ParseMissingField(name);
  ThrowIfError(missing.status());
  return *missing;
}

Stage MakeStage(wds::StageFactory factory, std::string name, bool native = true,
                std::string recipe = "", bool checkpointable = true) {
  if (recipe.empty()) recipe = name;
  return Stage{std::move(factory), std::move(name), native, std::move(recipe), checkpointable};
}

void RegisterSources(py::module_& m) {
  py::class_<Source>(m, "Source", "The first step of a native chain.")
      .def_readonly("native", &Source::native)
      .def_readonly("tensor_names", &Source::tensor_names);
  m.def(
      "check_shard_weights",
      [](const std::vector<double>& weights, size_t shards) {
        ThrowIfError(wds::CheckShardWeights(weights, shards));
      },
      py::arg("weights"), py::arg("shards"),
      "ValueError, naming the problem, unless `weights` are `shards` finite values >= 0, not "
      "all 0 (the core's check of resampled shards' weights).");
  m.def(
      "shard_source",
      [](std::vector<std::string> urls, bool shuffle, bool resampled,
         std::optional<int64_t> nshards, bool split_nodes, bool split_workers, bool allow_empty,
         uint64_t seed, py::handle handler, bool split_samples, std::string dataset_index,
         py::handle remote, py::handle index_remote, uint64_t index_digest,
         std::vector<double> weights) {
        ShardSourceOptions options{shuffle,     resampled,     nshards,
                                   split_nodes, split_workers, allow_empty,
                                   seed,        split_samples, std::move(dataset_index),
                                   nullptr};
        options.index_remote = RemoteAccess::FromPython(index_remote);
        options.index_digest = index_digest;
        options.shard_weights = std::move(weights);
        StageHandler h = StageHandler::FromPython(handler);
        std::string recipe = "shard_source";
        wds::StreamFactory factory =
            ShardSource(std::move(urls), options, h, RemoteAccess::FromPython(remote), &recipe);
        return Source{std::move(factory), h.is_native(), nullptr, std::move(recipe)};
      },
      py::arg("urls"), py::kw_only(), py::arg("shuffle") = false, py::arg("resampled") = false,
      py::arg("nshards") = py::none(), py::arg("split_nodes") = true,
      py::arg("split_workers") = true, py::arg("allow_empty") = false, py::arg("seed") = 0,
      py::arg("handler") = "reraise", py::arg("split_samples") = false,
      py::arg("dataset_index") = "", py::arg("remote") = py::none(),
      py::arg("index_remote") = py::none(), py::arg("index_digest") = 0,
      py::arg("weights") = std::vector<double>(),
      "Shards read as the core's WebDataset() reads them (permuted per epoch, split by node "
      "and worker, in whole shards or, with split_samples, in equal runs of samples); counts "
      "come from the dataset index (a path or URL), sidecars or scans, cached per process; "
      "remote URLs with the options of `remote` (RemoteOptions._native()), a remote index "
      "with those of `index_remote` (None: the environment's), uncached, and checked against "
      "`index_digest` (counts_known's, when the dataset was made; 0: unchecked); resampled "
      "draws weighed by `weights` (empty: uniform).");
  m.def(
      "url_source",
      [](py::handle iterator, py::handle handler, py::handle remote, py::handle select_files,
         py::handle rename_files) {
        return Source{
            UrlSource(iterator, StageHandler::FromPython(handler), RemoteAccess::FromPython(remote),
                      PythonMemberNames(select_files, rename_files)),
            false, nullptr};
      },
      py::arg("iterator"), py::arg("handler") = "reraise", py::arg("remote") = py::none(),
      py::arg("select_files") = py::none(), py::arg("rename_files") = py::none(),
      "The shards a Python iterator of URLs (or {'url': ...} dicts) names; members renamed "
      "by rename_files(name) and kept where select_files(new name) is true, before grouping.");
  m.def(
      "sample_source",
      [](py::handle iterator) {
        auto names = std::make_shared<NameSet>();
        return Source{SampleSource(iterator, names), false, names};
      },
      py::arg("iterator"), "Samples (dicts or tuples) from a Python iterator.");
}

void RegisterStages(py::module_& m) {
  py::class_<Stage>(m, "Stage", "One native stage of a chain.")
      .def_readonly("name", &Stage::name)
      .def_readonly("native", &Stage::native);
  m.def(
      "shuffle",
      [](size_t bufsize, size_t initial, std::optional<uint64_t> seed) {
        return MakeStage(SeededShuffle(bufsize, initial, seed), "shuffle", true,
                         wds::Cat("shuffle(", bufsize, ",", initial, ",",
                                  seed.has_value() ? std::to_string(*seed) : "-", ")"));
      },
      py::arg("bufsize"), py::arg("initial"), py::arg("seed") = py::none());
  m.def(
      "decode",
      [](py::list items, std::vector<std::string> only, bool partial, py::handle handler,
         py::handle continue_type, std::shared_ptr<NameSet> tensor_names, bool native) {
        wds::DecodeOptions options;
        options.only = std::move(only);
        options.partial = partial;
        StageHandler h = StageHandler::FromPython(handler);
        auto decoders = MakeDecoders(items, continue_type, partial, std::move(tensor_names));
        return MakeStage(DecodeStage(std::move(decoders), std::move(options), h), "decode",
                         native && h.is_native());
      },
      py::arg("items"), py::arg("only"), py::arg("partial"), py::arg("handler"),
      py::arg("continue_type"), py::arg("tensor_names"), py::arg("native"));
  m.def(
      "to_tuple",
      [](std::vector<std::string> fields, const std::string& missing, const std::string& handler) {
        absl::StatusOr<wds::Handler> h = wds::ParseHandler(handler);
        ThrowIfError(h.status());
        std::string recipe = "to_tuple(";
        for (const std::string& f : fields) recipe = wds::Cat(recipe, f, ",");
        return MakeStage(wds::ToTupleStage(std::move(fields), ParseMissing(missing), *h),
                         "to_tuple", true, recipe + ")");
      },
      py::arg("fields"), py::arg("missing") = "error", py::arg("handler") = "reraise");
  m.def(
      "rename",
      [](std::vector<std::pair<std::string, std::string>> renames, bool keep,
         const std::string& handler) {
        absl::StatusOr<wds::Handler> h = wds::ParseHandler(handler);
        ThrowIfError(h.status());
        return MakeStage(wds::RenameStage(std::move(renames), keep, *h), "rename");
      },
      py::arg("renames"), py::arg("keep") = true, py::arg("handler") = "reraise");
  m.def(
      "batched",
      [](size_t batch_size, bool partial) {
        wds::BatchOptions options;
        options.partial = partial;
        return MakeStage(wds::BatchedStage(batch_size, options), "batched", true,
                         wds::Cat("batched(", batch_size, ",", int{partial}, ")"));
      },
      py::arg("batch_size"), py::arg("partial") = true);
  m.def(
      "slice",
      [](int64_t start, std::optional<int64_t> stop, int64_t step) {
        return MakeStage(wds::SliceStage(start, stop, step), "slice", true, "slice",
                         /*checkpointable=*/false);
      },
      py::arg("start"), py::arg("stop"), py::arg("step") = 1);
}

// ParseRestore reads a ChainIterator.checkpoint: (pass, source_out,
// shuffle_out) and, optionally, the runs of samples dropped before the
// shuffle, which go to `dropped`. ValueError for values out of bounds.
wds::StreamCheckpoint ParseRestore(py::handle restore,
                                   std::vector<std::pair<int64_t, int64_t>>& dropped) {
  const py::tuple t = py::tuple(py::reinterpret_borrow<py::object>(restore));
  if (t.size() != 3 && t.size() != 4) {
    throw py::value_error(wds::Cat("restore: a checkpoint is (pass, source_out, shuffle_out) ",
                                   "and optionally the dropped runs, got ", t.size(), " values"));
  }
  const wds::StreamCheckpoint at{t[0].cast<int64_t>(), t[1].cast<int64_t>(), t[2].cast<int64_t>()};
  if (at.pass < 0 || at.source_out < 0 || at.shuffle_out < -1) {
    throw py::value_error(
        wds::Cat("restore: a checkpoint needs pass >= 0, source_out >= 0 and shuffle_out >= -1 "
                 "(-1: no shuffle stage), got (",
                 at.pass, ", ", at.source_out, ", ", at.shuffle_out, ")"));
  }
  if (t.size() == 4) {
    int64_t previous_end = 0;
    for (py::handle run : t[3]) {
      const auto [first, end] = run.cast<std::pair<int64_t, int64_t>>();
      if (first < previous_end || end <= first || end > at.source_out) {
        throw py::value_error(wds::Cat(
            "restore: the dropped runs must be increasing, non-empty [first, end) ranges "
            "within [0, source_out = ",
            at.source_out, "), got [", first, ", ", end, ") after one ending at ", previous_end));
      }
      dropped.emplace_back(first, end);
      previous_end = end;
    }
  }
  return at;
}

void RegisterChainClass(py::module_& m) {
  py::class_<ChainIterator>(m, "ChainIterator", "One running copy of a chain.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &ChainIterator::Next)
      .def("close", &ChainIterator::Close)
      .def_property_readonly("count", &ChainIterator::count, "Samples the source yielded so far.")
      .def_property_readonly(
          "checkpoint",
          [](const ChainIterator& self) -> py::object {
            const std::optional<wds::StreamCheckpoint>& c = self.Checkpoint();
            if (!c.has_value() || !self.Unrecordable().empty()) return py::none();
            if (self.Dropped().empty()) {
              return py::make_tuple(c->pass, c->source_out, c->shuffle_out);
            }
            py::list dropped;
            for (const auto& [first, end] : self.Dropped()) {
              dropped.append(py::make_tuple(first, end));
            }
            return py::make_tuple(c->pass, c->source_out, c->shuffle_out, dropped);
          },
          "(pass, source_out, shuffle_out) after the last item, and the [first, end) runs of "
          "the pass's samples dropped before the shuffle when there are any; None before any "
          "item, and when the position cannot be restored from (`unrecordable` says why).")
      .def_property_readonly("unrecordable", &ChainIterator::Unrecordable,
                             "Why the checkpoint cannot be restored from; empty when it can.")
      .def_property_readonly("errors", [](const ChainIterator& self) {
        py::list out;
        for (const auto& e : self.errors().Snapshot()) {
          out.append(py::make_tuple(e.stage, absl::StatusCodeToString(e.cause), e.count));
        }
        return out;
      });
  py::class_<BatchPool, std::shared_ptr<BatchPool>>(
      m, "BatchPool", "Host memory reused by the batches of the chains opened with it.")
      .def(py::init<>())
      .def_property_readonly(
          "stats",
          [](const BatchPool& self) {
            const wds::BufferPoolStats s = self.pool->stats();
            return py::dict(py::arg("allocations") = s.allocations, py::arg("reuses") = s.reuses);
          },
          "Blocks taken from the allocator, and Acquires served from the cache.");
  py::class_<Chain>(m, "Chain", "A source and native stages, run as one native pipeline.")
      .def(py::init<Source, std::vector<Stage>, uint64_t>(), py::arg("source"), py::arg("stages"),
           py::arg("seed") = 0)
      .def_property_readonly("python_steps", &Chain::PythonSteps)
      .def_property_readonly(
          "recipe", [](const Chain& chain) { return chain.Recipe(std::nullopt).recipe(); },
          "The chain's description (source, stages, parameters), as a Loader state records it.")
      .def_property_readonly(
          "checkpoint_blocker",
          [](const Chain& chain) { return chain.Recipe(std::nullopt).checkpoint_blocker(); },
          "The stage whose position a checkpoint cannot record (slice); empty if none.")
      .def(
          "open",
          [](const Chain& chain, int rank, int world_size, int worker, int num_workers,
             int64_t epoch, int64_t pass, std::optional<int64_t> length, py::object kinds,
             py::object kind_names, std::shared_ptr<SharedBlocks> shared_blocks, py::object restore,
             std::shared_ptr<BatchPool> pool, std::optional<std::string> elastic) {
            wds::WorkerContext ctx =
                CheckedWorkerContext(rank, world_size, worker, num_workers, epoch, pass);
            ctx.errors = std::make_shared<wds::ErrorCounters>();
            ctx.warn = PythonWarnings();
            if (pool != nullptr) wds::Rewire(ctx).pool = pool->pool;
            if (shared_blocks != nullptr) wds::Rewire(ctx).pool = shared_blocks->pool();
            if (length.has_value() && *length < 0) throw py::value_error("length must be >= 0");
            const auto resume = std::make_shared<wds::ResumeChannel>();
            wds::Rewire(ctx).resume = resume;
            std::optional<wds::StreamCheckpoint> restored;
            if (!restore.is_none()) {
              restored = ParseRestore(restore, resume->restore_dropped);
              resume->restore = restored;
              ctx.pass = restored->pass;
            }
            if (elastic.has_value()) {
              // This worker's share of what a job state left of its epoch
              // (wds/loader/elastic.h), read in pass 0 of that epoch.
              absl::StatusOr<wds::ResumedShare> share;
              {
                ScopedGilRelease release;
                share = wds::LeftoverShareOf(chain.Recipe(std::nullopt), *elastic, ctx);
              }
              ThrowIfError(share.status());
              resume->slices =
                  std::make_shared<const std::vector<wds::ShardSlice>>(std::move(share->slices));
              resume->slices_epoch = share->epoch;
              resume->generation = share->generation;
            }
            std::unique_ptr<wds::SampleStream> stream = chain.Recipe(length).Open(ctx);
            return ChainIterator(
                std::move(stream), std::make_unique<FieldKinds>(kinds, NameSets(kind_names)),
                chain.count(), ctx.errors, std::move(shared_blocks), resume, restored);
          },
          py::kw_only(), py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("worker") = 0,
          py::arg("num_workers") = 1, py::arg("epoch") = 0, py::arg("pass_") = 0,
          py::arg("length") = py::none(), py::arg("kinds") = py::none(),
          py::arg("kind_names") = py::none(), py::arg("shared_blocks") = nullptr,
          py::arg("restore") = py::none(), py::arg("pool") = nullptr,
          py::arg("elastic") = py::none(),
          "Runs one copy of the chain in this thread; with shared_blocks (a DataLoader "
          "worker's), batches are collated into that pool's shared memory, else with pool (a "
          "BatchPool) into its memory. restore, a "
          "ChainIterator.checkpoint of a copy of this chain with the same placement, epoch and "
          "length (one it could be restored from), makes it continue where that copy stood "
          "(its pass replaces pass_). elastic, a job state, makes pass 0 of its epoch this "
          "worker's share of what that job left over (an elastic resume).");
  m.def(
      "job_state_of_workers",
      [](const Chain& chain, int64_t epoch, const std::vector<std::vector<py::tuple>>& positions,
         const std::string& base) {
        std::vector<std::vector<wds::WorkerPosition>> at;
        for (const std::vector<py::tuple>& rank : positions) {
          std::vector<wds::WorkerPosition>& workers = at.emplace_back();
          for (const py::tuple& p : rank) {
            if (p.size() != 4) {
              throw py::value_error("a worker position is (pass, source_out, shuffle_out, ended)");
            }
            workers.push_back({p[0].cast<int64_t>(), p[1].cast<int64_t>(), p[2].cast<int64_t>(),
                               p[3].cast<bool>()});
          }
        }
        absl::StatusOr<std::string> job =
            wds::JobStateOfWorkers(chain.Recipe(std::nullopt), epoch, at, base);
        ThrowIfError(job.status());
        return *std::move(job);
      },
      py::arg("chain"), py::arg("epoch"), py::arg("positions"), py::arg("base") = "",
      "The job state of the chain's epoch whose worker w of rank r stood at positions[r][w] = "
      "(pass, source_out, shuffle_out, ended) (wds::JobStateOfWorkers).");
}

}  // namespace

Chain::Chain(Source source, std::vector<Stage> stages, uint64_t seed)
    : source_(std::move(source)), stages_(std::move(stages)), seed_(seed) {}

wds::Pipeline Chain::Recipe(std::optional<int64_t> length) const {
  wds::Pipeline pipeline =
      wds::Pipeline(source_.factory, seed_, source_.recipe).Then(CountingStage(count_), "count");
  for (const Stage& stage : stages_) {
    pipeline = pipeline.Then(stage.factory, stage.recipe, stage.checkpointable);
  }
  if (length.has_value()) pipeline = pipeline.WithLength(*length);
  return pipeline;
}

std::vector<std::string> Chain::PythonSteps() const {
  std::vector<std::string> steps;
  if (!source_.native) steps.push_back("source");
  for (const Stage& stage : stages_) {
    if (!stage.native) steps.push_back(stage.name);
  }
  return steps;
}

void CheckPlacement(int rank, int world_size, int worker, int num_workers) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw py::value_error(
        wds::Cat("rank ", rank, " of world size ", world_size, ": needs 0 <= rank < world_size"));
  }
  if (num_workers < 1 || worker < 0 || worker >= num_workers) {
    throw py::value_error(wds::Cat("worker ", worker, " of ", num_workers,
                                   " workers: needs 0 <= worker < num_workers"));
  }
}

void RegisterChain(py::module_& m) {
  RegisterSources(m);
  RegisterStages(m);
  RegisterChainClass(m);
}

}  // namespace wdspy
