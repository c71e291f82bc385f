// webdataset_cpp._core.Loader: the core's threaded Loader for chains that
// are entirely native. Threads exist only while an epoch is being iterated:
// they start at its first item and are joined at its end, when it is
// abandoned (close) and when the Loader goes.
#include "wds/loader/loader.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chain.h"
#include "errors.h"
#include "handlers.h"
#include "opener.h"
#include "py_ref.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/loader/elastic.h"
#include "wds/loader/placement.h"

namespace wdspy {
namespace {

class Loader {
 public:
  Loader(const Chain& chain, std::optional<int64_t> length, wds::LoaderOptions options,
         py::object kinds, std::vector<std::shared_ptr<NameSet>> kind_names)
      : recipe_(chain.Recipe(length)),
        options_(std::move(options)),
        kinds_(std::move(kinds), std::move(kind_names)) {
    const std::vector<std::string> python = chain.PythonSteps();
    if (!python.empty()) {
      std::string names;
      for (const std::string& n : python) names += (names.empty() ? "" : ", ") + n;
      throw py::value_error(
          "webdataset_cpp.Loader runs only native pipelines; these steps call "
          "Python: " +
          names + " (iterate the dataset itself, or through a torch DataLoader)");
    }
    options_.warn = PythonWarnings();
  }

  ~Loader() { Stop(); }

  // Next returns the next item of the running epoch (starting it if needed),
  // or None at its end.
  py::object Next() {
    if (loader_.inherited()) {
      throw py::value_error("this Loader was iterated before the process forked");
    }
    Core();
    if (!running_) {
      loader_->SetEpoch(epoch_);
      running_ = true;
    }
    absl::StatusOr<std::optional<wds::Sample>> item;
    SignalCheck signals;
    {
      ScopedGilRelease release;
      wds::ScopedInterruptCheck check(signals.check());
      item = loader_->Next();
    }
    // A signal handler raised: the epoch goes on (webdataset_cpp.Loader
    // stops it when the exception leaves its loop).
    signals.RethrowIfRaised();
    if (!item.ok()) {
      EndEpoch();
      RaiseStatus(item.status(), Phase::kData);
    }
    if (!item->has_value()) {
      EndEpoch();
      return py::none();
    }
    return SampleToPython(**std::move(item), &kinds_);
  }

  // Stop abandons the running epoch: its threads are stopped and joined now.
  void Stop() {
    std::unique_ptr<wds::Loader> loader = loader_.take();
    if (running_) EndEpoch();
    if (loader == nullptr) return;
    if (!PythonIsUsable()) {
      loader.reset();
      return;
    }
    ScopedGilRelease release;  // workers may need the GIL to warn
    loader.reset();
  }

  // State is the core loader's state (wds::Loader::State), taken without
  // starting an epoch.
  std::string State() {
    wds::Loader& loader = Core();
    if (!running_) loader.SetEpoch(epoch_);
    absl::StatusOr<std::string> state = loader.State();
    ThrowIfError(state.status());
    return *std::move(state);
  }

  // Restore makes the next item the one after `state` (wds::Loader::Restore).
  void Restore(const std::string& state) {
    if (running_) Stop();
    wds::Loader& loader = Core();
    ThrowIfError(loader.Restore(state));
    running_ = loader.in_epoch();
    epoch_ = loader.epoch();
  }

  // JobState gathers every rank's State() into one job state
  // (wds::Loader::JobState), which Restore takes on any layout.
  std::string JobState(const std::vector<std::string>& states) {
    absl::StatusOr<std::string> job = Core().JobState(states);
    ThrowIfError(job.status());
    return *std::move(job);
  }

  void SetEpoch(int64_t epoch) {
    if (running_) Stop();
    epoch_ = epoch;
  }
  int64_t epoch() const { return epoch_; }
  bool running() const { return running_; }
  std::optional<int64_t> size() const { return recipe_.length(); }
  // pinned is the last core loader's: an epoch left early (its loader
  // stopped and dropped) does not change what its batches were.
  bool pinned() const { return loader_ ? loader_->pool()->pinned() : pinned_; }
  // PoolStats is the batch pool's counters (none before the first epoch).
  py::dict PoolStats() const {
    py::dict d;
    if (!loader_) return d;
    const wds::BufferPoolStats s = loader_->pool()->stats();
    d["allocations"] = s.allocations;
    d["reuses"] = s.reuses;
    d["live_bytes"] = s.live_bytes;
    d["cached_bytes"] = s.cached_bytes;
    return d;
  }

 private:
  // Core is the core loader, made on first use (it starts no thread).
  wds::Loader& Core() {
    if (loader_.inherited()) {
      throw py::value_error("this Loader was iterated before the process forked");
    }
    if (!loader_) {
      loader_ = ProcessLocal<wds::Loader>(std::make_unique<wds::Loader>(recipe_, options_));
      pinned_ = loader_->pool()->pinned();
    }
    return *loader_.get();
  }

  void EndEpoch() {
    running_ = false;
    ++epoch_;
  }

  wds::Pipeline recipe_;
  wds::LoaderOptions options_;
  FieldKinds kinds_;
  ProcessLocal<wds::Loader> loader_;
  int64_t epoch_ = 0;
  bool running_ = false;
  bool pinned_ = false;
};

}  // namespace

void RegisterLoader(py::module_& m) {
  m.def(
      "launcher_local_rank",
      [] {
        absl::StatusOr<std::optional<int>> rank = wds::LauncherLocalRank("device");
        if (!rank.ok()) RaiseStatus(rank.status(), Phase::kSetup);
        return *rank;
      },
      "The local rank the launcher's environment gives (LOCAL_RANK, else SLURM_LOCALID), or "
      "None. ValueError for a malformed or negative value.");
  py::class_<Loader>(m, "Loader", "The core's threaded Loader over a native chain.")
      .def(py::init([](const Chain& chain, std::optional<int64_t> length, int workers, int prefetch,
                       bool ordered, bool pin_memory, int rank, int world_size,
                       std::optional<int> device, bool decode_gpu_jobs_on_host,
                       std::shared_ptr<wds::GpuWorkerDecoders> gpu_decoders, py::object kinds,
                       py::object kind_names) {
             wds::LoaderOptions options;
             options.workers = workers;
             options.prefetch = prefetch;
             options.ordered = ordered;
             options.pin_memory = pin_memory;
             options.rank = rank;
             options.world_size = world_size;
             options.device = device;
             options.decode_gpu_jobs_on_host = decode_gpu_jobs_on_host;
             options.gpu_decoders = std::move(gpu_decoders);
             // Options are checked by webdataset_cpp.Loader (at once) and by
             // the core (at the first batch), not a third time here.
             std::vector<std::shared_ptr<NameSet>> names;
             if (!kind_names.is_none()) {
               for (py::handle h : kind_names) names.push_back(h.cast<std::shared_ptr<NameSet>>());
             }
             return std::make_unique<Loader>(chain, length, options, kinds, names);
           }),
           py::arg("chain"), py::kw_only(), py::arg("length") = py::none(), py::arg("workers") = 1,
           py::arg("prefetch") = 2, py::arg("ordered") = true, py::arg("pin_memory") = false,
           py::arg("rank") = 0, py::arg("world_size") = 1, py::arg("device") = py::none(),
           py::arg("decode_gpu_jobs_on_host") = false, py::arg("gpu_decoders") = nullptr,
           py::arg("kinds") = py::none(), py::arg("kind_names") = py::none())
      .def("next", &Loader::Next)
      .def("stop", &Loader::Stop)
      .def("set_epoch", &Loader::SetEpoch)
      .def("state", &Loader::State)
      .def("restore", &Loader::Restore, py::arg("state"))
      .def("job_state", &Loader::JobState, py::arg("states"))
      .def_property_readonly("epoch", &Loader::epoch)
      .def_property_readonly("running", &Loader::running)
      .def_property_readonly("size", &Loader::size)
      .def_property_readonly("pinned", &Loader::pinned)
      .def_property_readonly("pool_stats", &Loader::PoolStats,
                             "The batch pool's allocations, reuses, live and cached bytes.");
  m.def(
      "plan_resumed_epoch",
      [](const Chain& chain, const std::string& job_state, int rank, int world_size,
         int num_workers, int64_t batch_size, bool partial) {
        wds::WorkerContext ctx;
        ctx.rank = rank;
        ctx.world_size = world_size;
        ctx.num_workers = num_workers;
        absl::StatusOr<wds::RankEpochPlan> plan;
        {
          ScopedGilRelease release;
          plan = wds::PlanResumedEpoch(chain.Recipe(std::nullopt), job_state, ctx,
                                       {.batch_size = batch_size, .partial = partial});
        }
        ThrowIfError(plan.status());
        return *std::move(plan);
      },
      py::arg("chain"), py::arg("job_state"), py::kw_only(), py::arg("rank"),
      py::arg("world_size"), py::arg("num_workers"), py::arg("batch_size"), py::arg("partial"),
      "This rank's share of what a job state left of its epoch (wds::PlanResumedEpoch).");
  m.def(
      "describe_job_state",
      [](const std::string& job_state) {
        absl::StatusOr<wds::JobStateInfo> info = wds::DescribeJobState(job_state);
        ThrowIfError(info.status());
        py::dict d;
        d["epoch"] = info->epoch;
        d["running"] = info->running;
        d["world_size"] = info->world_size;
        d["workers"] = info->workers;
        d["generation"] = info->generation;
        return d;
      },
      py::arg("job_state"), "What a job state says of itself (wds::DescribeJobState).");
}

}  // namespace wdspy
