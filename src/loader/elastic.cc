#include "wds/loader/elastic.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <utility>

#include "loader/elastic_plan.h"
#include "loader/loader_state.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"

namespace wds {
namespace {

// Leftover is what one worker of a job state had not handed out of its
// pass: the samples its shuffle buffer held (`buffered`, positions in the
// pass, ascending), then positions [rest_from, pass_samples).
struct Leftover {
  std::vector<ShardSlice> pass;  // the pass's slices, every end known
  std::vector<int64_t> buffered;
  int64_t rest_from = 0;
  int64_t pass_samples = 0;

  int64_t size() const {
    return static_cast<int64_t>(buffered.size()) + std::max<int64_t>(0, pass_samples - rest_from);
  }
};

// StartOf is where worker `w` of rank `r` stood; a rank state without its
// workers' positions (none taken yet) stands at the start.
WorkerStart StartOf(const JobStateData& job, int r, int w) {
  const LoaderStateData& rank = job.ranks[r];
  if (rank.group.has_value()) return rank.group->workers[w];
  WorkerStart start;
  start.checkpoint = {0, 0, 0, -1};
  return start;
}

bool LeftNothing(const WorkerStart& start) { return start.ended || start.checkpoint.pass != 0; }

WorkerContext JobWorker(const JobStateData& job, int r, int w) {
  WorkerContext ctx;
  ctx.rank = r;
  ctx.world_size = job.first().world_size;
  ctx.worker = w;
  ctx.num_workers = job.first().workers;
  ctx.epoch = job.first().epoch;
  ctx.pass = 0;
  return ctx;
}

// OpenLeftover opens pass 0 of worker (r, w) of `job` at its checkpoint and
// asks its source and shuffle what the pass holds and what the buffer held.
absl::StatusOr<Leftover> OpenLeftover(const Pipeline& pipeline, const JobStateData& job, int r,
                                      int w) {
  const WorkerStart start = StartOf(job, r, w);
  Leftover leftover;
  if (LeftNothing(start)) return leftover;
  WorkerContext ctx = JobWorker(job, r, w);
  auto resume = std::make_shared<ResumeChannel>();
  resume->restore = start.checkpoint;
  if (job.base != nullptr) {
    // This epoch was itself resumed: the worker's pass was its share of the
    // base's leftover.
    WDS_ASSIGN_OR_RETURN(std::vector<ShardSlice> share, LeftoverShare(pipeline, *job.base, ctx));
    resume->slices = std::make_shared<const std::vector<ShardSlice>>(std::move(share));
    resume->slices_epoch = ctx.epoch;
    resume->generation = job.first().generation;
  }
  Rewire(ctx).resume = resume;
  std::unique_ptr<SampleStream> stream = pipeline.OpenPass(ctx);
  absl::Status error = resume->error;
  if (error.ok() && resume->pass_samples == kEndlessPass) {
    error = absl::FailedPreconditionError(
        "its pass draws shards with replacement, so what it left cannot be shared out: resume "
        "with the same ranks and workers, or from the start of an epoch");
  }
  if (error.ok() && resume->pass_samples < 0) {
    // The source could not plan its pass; its first Next() says why
    // without reading a sample.
    SampleResult first = stream->Next();
    error = first.ok() ? absl::InternalError("the source did not plan its pass") : first.status();
  }
  if (!error.ok()) {
    return absl::Status(error.code(), Cat("elastic resume: rank ", r, " worker ", w,
                                          " of the job state: ", ToStd(error.message())));
  }
  if (resume->planned_slices != nullptr) leftover.pass = *resume->planned_slices;
  leftover.buffered = std::move(resume->replay);
  std::sort(leftover.buffered.begin(), leftover.buffered.end());
  leftover.rest_from =
      resume->continue_at >= 0 ? resume->continue_at : start.checkpoint.source_out;
  leftover.pass_samples = resume->pass_samples;
  return leftover;
}

// SliceAppender turns runs of positions in a pass into slices, merging runs
// that continue each other.
class SliceAppender {
 public:
  SliceAppender(const std::vector<ShardSlice>& pass, std::vector<ShardSlice>& out)
      : pass_(pass), out_(out) {
    int64_t total = 0;
    for (const ShardSlice& s : pass_) {
      first_.push_back(total);
      total += s.end - s.begin;
    }
  }

  // Append adds positions [lo, hi) of the pass.
  void Append(int64_t lo, int64_t hi) {
    size_t i = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), lo) -
                                   first_.begin() - 1);
    for (; lo < hi && i < pass_.size(); ++i) {
      const ShardSlice& s = pass_[i];
      const int64_t end = std::min(hi, first_[i] + (s.end - s.begin));
      if (lo >= end) continue;
      Add({s.url, s.begin + (lo - first_[i]), s.begin + (end - first_[i])});
      lo = end;
    }
  }

 private:
  void Add(ShardSlice slice) {
    if (!out_.empty() && out_.back().url == slice.url && out_.back().end == slice.begin) {
      out_.back().end = slice.end;
    } else {
      out_.push_back(std::move(slice));
    }
  }

  const std::vector<ShardSlice>& pass_;
  std::vector<ShardSlice>& out_;
  std::vector<int64_t> first_;
};

// AppendPart adds items [x, y) of `leftover` (buffered first, then the rest).
void AppendPart(const Leftover& leftover, int64_t x, int64_t y, std::vector<ShardSlice>& out) {
  SliceAppender appender(leftover.pass, out);
  const int64_t nb = static_cast<int64_t>(leftover.buffered.size());
  for (int64_t i = x; i < std::min(y, nb); ++i) {
    appender.Append(leftover.buffered[i], leftover.buffered[i] + 1);
  }
  const int64_t from = std::max(x, nb);
  if (from < y) appender.Append(leftover.rest_from + (from - nb), leftover.rest_from + (y - nb));
}

}  // namespace

absl::Status CheckElastic(const Pipeline& pipeline, const JobStateData& job) {
  const LoaderStateData& d = job.first();
  if (d.recipe != pipeline.recipe()) {
    return absl::FailedPreconditionError(
        "Loader::Restore: the job state was taken with another recipe (its shards, seed, stages "
        "or their parameters differ)");
  }
  if (pipeline.epoch_mode() == EpochMode::kEpoch || d.mode == static_cast<int>(EpochMode::kEpoch)) {
    return absl::FailedPreconditionError(
        "Loader::Restore: a WithEpoch recipe's streams continue across epochs, so an epoch has no "
        "leftover to share out on another layout (resume on the job's own layout)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> LeftoverSizes(const Pipeline& pipeline,
                                                   const JobStateData& job) {
  std::vector<int64_t> sizes;
  const int workers = job.first().workers;
  for (int r = 0; r < static_cast<int>(job.ranks.size()); ++r) {
    for (int w = 0; w < workers; ++w) {
      const WorkerStart start = StartOf(job, r, w);
      const StreamCheckpoint& at = start.checkpoint;
      if (LeftNothing(start)) {
        sizes.push_back(0);
      } else if (at.pass_samples >= 0) {
        sizes.push_back(at.pass_samples - (at.shuffle_out >= 0 ? at.shuffle_out : at.source_out));
      } else {
        WDS_ASSIGN_OR_RETURN(Leftover leftover, OpenLeftover(pipeline, job, r, w));
        sizes.push_back(leftover.size());
      }
    }
  }
  return sizes;
}

absl::StatusOr<std::vector<ShardSlice>> LeftoverShare(const Pipeline& pipeline,
                                                      const JobStateData& job,
                                                      const WorkerContext& ctx) {
  WDS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, LeftoverSizes(pipeline, job));
  return LeftoverShare(pipeline, job, sizes, ctx);
}

absl::StatusOr<std::vector<ShardSlice>> LeftoverShare(const Pipeline& pipeline,
                                                      const JobStateData& job,
                                                      const std::vector<int64_t>& sizes,
                                                      const WorkerContext& ctx) {
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const auto [a, b] = SampleShare(total, ctx, /*by_node=*/true, /*by_worker=*/true);
  std::vector<ShardSlice> out;
  const int workers = job.first().workers;
  int64_t pos = 0;  // where job worker i's leftover starts in the sequence
  for (size_t i = 0; i < sizes.size() && pos < b; pos += sizes[i], ++i) {
    const int64_t lo = std::max(a, pos);
    const int64_t hi = std::min(b, pos + sizes[i]);
    if (lo >= hi) continue;
    const int r = static_cast<int>(i) / workers;
    const int w = static_cast<int>(i) % workers;
    WDS_ASSIGN_OR_RETURN(Leftover leftover, OpenLeftover(pipeline, job, r, w));
    if (leftover.size() != sizes[i]) {
      return absl::FailedPreconditionError(
          Cat("elastic resume: rank ", r, " worker ", w, " of the job state left ",
              leftover.size(), " samples over by its pass but ", sizes[i],
              " by its checkpoint (another dataset than at the checkpoint?)"));
    }
    AppendPart(leftover, lo - pos, hi - pos, out);
  }
  return out;
}

absl::StatusOr<std::string> JobStateOfWorkers(
    const Pipeline& pipeline, int64_t epoch,
    const std::vector<std::vector<WorkerPosition>>& positions, std::string_view base) {
  std::shared_ptr<const JobStateData> base_job;
  if (!base.empty()) {
    WDS_ASSIGN_OR_RETURN(JobStateData parsed, ParseJobState(base));
    base_job = std::make_shared<const JobStateData>(std::move(parsed));
  }
  const int world_size = static_cast<int>(positions.size());
  const int workers = positions.empty() ? 0 : static_cast<int>(positions.front().size());
  if (world_size < 1 || workers < 1) {
    return absl::InvalidArgumentError("job state: no worker positions");
  }
  std::vector<LoaderStateData> ranks;
  for (int r = 0; r < world_size; ++r) {
    if (static_cast<int>(positions[r].size()) != workers) {
      return absl::InvalidArgumentError(Cat("job state: rank ", r, " has ", positions[r].size(),
                                            " worker positions, rank 0 ", workers));
    }
    LoaderStateData d;
    d.recipe = pipeline.recipe();
    d.rank = r;
    d.world_size = world_size;
    d.workers = workers;
    d.mode = static_cast<int>(EpochMode::kNatural);
    d.running = true;
    d.epoch = epoch;
    d.stream_epoch = epoch;
    if (base_job != nullptr && base_job->first().epoch == epoch) {
      d.generation = base_job->first().generation + 1;
      d.base_digest = base_job->digest;
    }
    GroupState group;
    for (const WorkerPosition& p : positions[r]) {
      if (p.pass < 0 || p.source_out < 0 || p.shuffle_out < -1) {
        return absl::InvalidArgumentError(
            Cat("job state: rank ", r, " has a worker position (", p.pass, ", ", p.source_out,
                ", ", p.shuffle_out, ") that is none"));
      }
      group.workers.push_back({{p.pass, p.source_out, p.shuffle_out, -1}, p.ended});
    }
    d.group = std::move(group);
    ranks.push_back(std::move(d));
  }
  WDS_ASSIGN_OR_RETURN(JobStateData job, GatherJob(std::move(ranks), std::move(base_job)));
  return JobStateJson(job);
}

absl::StatusOr<ResumedShare> LeftoverShareOf(const Pipeline& pipeline,
                                             std::string_view job_state,
                                             const WorkerContext& ctx) {
  WDS_ASSIGN_OR_RETURN(JobStateData job, ParseJobState(job_state));
  WDS_RETURN_IF_ERROR(CheckElastic(pipeline, job));
  ResumedShare share;
  share.epoch = job.first().epoch;
  share.generation = job.first().generation + 1;
  WDS_ASSIGN_OR_RETURN(share.slices, LeftoverShare(pipeline, job, ctx));
  return share;
}

absl::StatusOr<JobStateInfo> DescribeJobState(std::string_view job_state) {
  WDS_ASSIGN_OR_RETURN(JobStateData job, ParseJobState(job_state));
  const LoaderStateData& d = job.first();
  return JobStateInfo{d.epoch, d.running, d.world_size, d.workers, d.generation};
}

absl::StatusOr<RankEpochPlan> PlanResumedEpoch(const Pipeline& pipeline,
                                               std::string_view job_state,
                                               const WorkerContext& ctx,
                                               const EpochBatching& batching) {
  WDS_ASSIGN_OR_RETURN(JobStateData job, ParseJobState(job_state));
  WDS_RETURN_IF_ERROR(CheckElastic(pipeline, job));
  if (!job.first().running) {
    return absl::FailedPreconditionError(
        Cat("elastic resume: the job state was taken between epochs: epoch ", job.first().epoch,
            " runs next, with nothing left over (plan it as any epoch)"));
  }
  WDS_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, LeftoverSizes(pipeline, job));
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  std::vector<int64_t> shares;
  WorkerContext worker = ctx;
  for (worker.worker = 0; worker.worker < ctx.num_workers; ++worker.worker) {
    const auto [a, b] = SampleShare(total, worker, /*by_node=*/true, /*by_worker=*/true);
    shares.push_back(b - a);
  }
  return PlanFromSamples(shares, batching);
}

}  // namespace wds
