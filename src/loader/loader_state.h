// Loader states and job states as values and as text: what Loader::State()
// writes, Loader::JobState() gathers and Loader::Restore() reads back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/internal/base/resume_channel.h"

namespace wds {

// WorkerStart is how a worker of a restored loader starts: at `checkpoint`,
// or not at all when it had ended.
struct WorkerStart {
  StreamCheckpoint checkpoint;
  bool ended = false;
};

// GroupState is the consumer's view of a loader's workers: the rotation and
// the checkpoint of each worker's last item taken.
struct GroupState {
  int cursor = 0;
  std::vector<WorkerStart> workers;
  bool checkpointable = true;
};

// LoaderStateData is one rank's loader state (Loader::State).
struct LoaderStateData {
  std::string recipe;
  int rank = 0;
  int world_size = 1;
  int workers = 1;
  int mode = 0;
  int64_t length = -1;
  bool running = false;
  int64_t epoch = 0;
  int64_t remaining = 0;
  int64_t stream_epoch = 0;
  std::optional<GroupState> group;
  // generation counts the elastic resumes the running epoch has been through;
  // base_digest names the job state whose leftover it reads (empty: none).
  int64_t generation = 0;
  std::string base_digest;
};

// JobStateData is the states of every rank of a job at one step.
struct JobStateData {
  // ranks[r] is rank r's state; all share the recipe, layout and epoch.
  std::vector<LoaderStateData> ranks;
  // base is the job state whose leftover the running epoch reads (the ranks'
  // base_digest), or null.
  std::shared_ptr<const JobStateData> base;
  // digest fingerprints the job state's text (FNV-1a).
  std::string digest;

  const LoaderStateData& first() const { return ranks.front(); }
};

std::string StateJson(const LoaderStateData& d);
// ParseState reads a Loader::State() text; errors are InvalidArgument and
// say `who` (e.g. "Loader::Restore").
[[nodiscard]] absl::StatusOr<LoaderStateData> ParseState(std::string_view text);

// IsJobState is whether `text` claims to be a job state (its format field).
bool IsJobState(std::string_view text);
std::string JobStateJson(const JobStateData& job);
// ParseJobState reads a JobStateJson text, checking that its ranks agree.
[[nodiscard]] absl::StatusOr<JobStateData> ParseJobState(std::string_view text);
// GatherJob makes one job state of every rank's state (in any order); `base`
// is the job state the states' base_digest names, if any.
[[nodiscard]] absl::StatusOr<JobStateData> GatherJob(std::vector<LoaderStateData> ranks,
                                                     std::shared_ptr<const JobStateData> base);

}  // namespace wds
