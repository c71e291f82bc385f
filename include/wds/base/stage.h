// Stage: a pull-based stream, the unit that pipelines are made of.
//
//   std::unique_ptr<wds::SampleStream> s = pipeline.Open(ctx);
//   while (true) {
//     absl::StatusOr<std::optional<wds::Sample>> item = s->Next();
//     if (!item.ok()) { /* error: sticky */ break; }
//     if (!item->has_value()) break;   // end of stream: sticky
//     Use(**item);
//   }
//
// Each running stream belongs to one thread at a time (not thread-safe).
// WorkerContext tells a stream which rank, worker, epoch and pass it serves.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/error.h"
#include "wds/base/sample.h"

namespace wds {

template <typename T>
class Stage {
 public:
  virtual ~Stage() = default;
  // Next returns the next item; std::nullopt at end of stream; an error Status
  // otherwise. End and errors are sticky: later calls return the same.
  [[nodiscard]] virtual absl::StatusOr<std::optional<T>> Next() = 0;
};

using SampleStream = Stage<Sample>;
using SampleResult = absl::StatusOr<std::optional<Sample>>;

// WorkerContext is what one running copy of a pipeline recipe knows about
// where it runs. The Loader fills it for each worker; a plain Open() uses the
// defaults (one process, one worker).
struct WorkerContext {
  int rank = 0;
  int world_size = 1;
  int worker = 0;
  int num_workers = 1;
  int64_t epoch = 0;
  // pass counts fresh passes over the data within one epoch (WithLength,
  // WithEpoch and Repeat start new passes when their upstream runs out).
  int64_t pass = 0;
  uint64_t seed = 0;
  // errors receives every handled error; may be null (then nothing is counted).
  std::shared_ptr<ErrorCounters> errors;
  // warn receives handler warnings; null means stderr.
  WarningSink warn;
  // Wiring is how the library connects the stages of one running chain with
  // each other and with the Loader that runs it (memory pools, the slots a
  // Batched offers its decoders, checkpoint counters). Opaque here: it is
  // defined by an internal header (wds/internal/base/worker_wiring.h). A
  // stage of a user's passes it on by handing its upstream a copy of its
  // context; null where nothing is wired (a plain Open()).
  struct Wiring;
  std::shared_ptr<const Wiring> wiring;

  // Handle applies `handler` to `error` with this context's counters and sink.
  ErrorAction Handle(Handler handler, std::string_view stage, const absl::Status& error) const;
};

// StreamFactory opens a fresh stream for a context: the upstream half of a
// recipe. Opening never fails; errors surface from the stream's Next().
using StreamFactory = std::function<std::unique_ptr<SampleStream>(const WorkerContext&)>;

// StageFactory builds one stage on top of its upstream. It may open the
// upstream more than once (Repeat does, with ctx.pass incremented).
using StageFactory = std::function<std::unique_ptr<SampleStream>(const StreamFactory& upstream,
                                                                 const WorkerContext&)>;

// ErrorStream returns a stream whose Next() always returns `error`.
std::unique_ptr<SampleStream> ErrorStream(absl::Status error);

// FailingStage is the stage of a recipe step that could not be set up (a bad
// option): its stream returns `error` from every Next(), so the error reaches
// whoever runs the recipe at its place.
StageFactory FailingStage(absl::Status error);

}  // namespace wds
