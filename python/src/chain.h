// Native chains for Python: a source and the native stages that follow it in
// a Python pipeline, run as one wds::Pipeline with the GIL released.
//
//   chain = _core.Chain(_core.shard_source(urls, ...), [_core.shuffle(100), ...], seed)
//   for sample in chain.open(rank, world_size, worker, num_workers, epoch, 0):
//       ...
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convert.h"
#include "wds/pipeline/pipeline.h"

namespace wdspy {

namespace py = pybind11;

// Source is a chain's first step. `native` is false for sources that call
// Python (fed by a Python iterator): those cannot run in a threaded Loader.
struct Source {
  wds::StreamFactory factory;
  bool native = true;
  std::shared_ptr<NameSet> tensor_names;  // for sources fed with samples
  // recipe describes the source for wds::Pipeline::recipe() (loader states).
  std::string recipe = "source";
};

// Stage is one native stage; `native` is false when it calls Python (a
// decoder or handler that is a Python callable).
struct Stage {
  wds::StageFactory factory;
  std::string name;
  bool native = true;
  // recipe is the name with its parameters (wds::Pipeline::recipe());
  // checkpointable is false for stages that keep a position (slice).
  std::string recipe;
  bool checkpointable = true;
};

// Chain is an immutable recipe: it may be opened any number of times (under
// the GIL); each opened copy belongs to one thread.
class Chain {
 public:
  Chain(Source source, std::vector<Stage> stages, uint64_t seed);

  // Recipe is the chain as a wds::Pipeline (with WithLength(n) when given),
  // counting the source's samples in count().
  wds::Pipeline Recipe(std::optional<int64_t> length) const;
  // PythonStages names the steps that call Python (empty: fully native).
  std::vector<std::string> PythonSteps() const;
  const Source& source() const { return source_; }
  uint64_t seed() const { return seed_; }
  const std::shared_ptr<std::atomic<int64_t>>& count() const { return count_; }

 private:
  Source source_;
  std::vector<Stage> stages_;
  uint64_t seed_;
  std::shared_ptr<std::atomic<int64_t>> count_ = std::make_shared<std::atomic<int64_t>>(0);
};

// CheckPlacement raises ValueError unless 0 <= rank < world_size and
// 0 <= worker < num_workers.
void CheckPlacement(int rank, int world_size, int worker, int num_workers);

void RegisterChain(py::module_& m);

}  // namespace wdspy
