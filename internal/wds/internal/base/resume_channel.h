// ResumeChannel: how a worker's stream reports its position to the Loader,
// and how the Loader restarts it there (Loader::State / Restore). Internal:
// the tar source, the shuffle stage, the pass stages and the Loader use it;
// a stage of a user's never sees it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace wds {

// kEndlessPass is ResumeChannel::pass_samples of a pass whose size is not
// known (shards drawn with replacement, perhaps forever).
inline constexpr int64_t kEndlessPass = INT64_MAX;

// ShardSlice is a part of a shard (wds/shards/shard_list.h); the channel
// only hands lists of them between the loader and the tar source.
struct ShardSlice;

// StreamCheckpoint is how far one worker's stream has got, in positions, not
// data: the pass it reads, how many samples its source has yielded in that
// pass and how many its shuffle stage has (-1: the recipe has none). With the
// recipe and its context this fixes everything else: the shuffle buffer's
// content and the random state are recomputed from them (see Loader::State).
// pass_samples is the number of samples of the pass when the source knows
// it on opening (a sample-granular split: every slice has an end), else -1;
// an elastic resume sizes what a worker left over from it without re-planning
// the worker's pass.
struct StreamCheckpoint {
  int64_t pass = 0;
  int64_t source_out = 0;
  int64_t shuffle_out = -1;
  int64_t pass_samples = -1;
};

// ResumeChannel connects the resumable stages of one worker's stream (its tar
// source and at most one shuffle stage) with the Loader that runs it. The
// stages keep the counters current as they yield; the Loader reads them after
// each item the stream yields. To restart at a checkpoint the Loader sets
// `restore` before opening the stream: the source and the shuffle of the pass
// `restore->pass` then start where the checkpoint stood (the shuffle buffer
// re-read by seeking to its samples), and `restore` is cleared once that pass
// is open. Used by one worker thread at a time.
struct ResumeChannel {
  StreamCheckpoint position;
  std::optional<StreamCheckpoint> restore;
  // Filled by a restoring source for the shuffle above it: the samples of
  // the pass, and then by the shuffle for the source: the ordinals (positions
  // in the pass) of the samples its buffer held, in buffer order, which the
  // source yields first, and the ordinal it continues from.
  int64_t pass_samples = -1;
  // (kEndlessPass: not known, shards drawn with replacement planned only up
  // to the position.)
  std::vector<int64_t> replay;
  int64_t continue_at = -1;
  // sources and shuffles count the stages of the open pass (`counted_pass`;
  // a source opening another pass resets them); a recipe with more than one
  // of either cannot be checkpointed.
  int64_t counted_pass = -1;
  // shuffle_in counts the samples the shuffle took in the open pass: a
  // checkpoint holds only when it took every sample of the source, one by
  // one (no stage between them drops, merges or batches samples).
  int64_t shuffle_in = 0;
  // dropped lists the ordinals of the open pass that the source yielded and
  // the shuffle never took (a stage between them skipped those samples), as
  // increasing [first, end) runs, and dropped_samples counts them. The
  // shuffle keeps them as it pulls, taking a pulled sample's ordinal to be
  // source_out - 1: right when every stage between them passes or drops
  // samples one at a time (a stage that merges or reads ahead makes them
  // meaningless). With them, a checkpoint whose shuffle_in + dropped_samples
  // is source_out holds too: `restore_dropped` (the checkpoint's `dropped`)
  // makes a restoring shuffle skip those ordinals. The Loader does not use
  // them: its checkpoints need shuffle_in == source_out.
  std::vector<std::pair<int64_t, int64_t>> dropped;
  int64_t dropped_samples = 0;
  std::vector<std::pair<int64_t, int64_t>> restore_dropped;
  int sources = 0;
  int shuffles = 0;
  // slices, when set, replace the recipe's own split for pass 0 of epoch
  // `slices_epoch`: the worker's share of what an elastic resume left over
  // (see wds/loader/elastic.h), of generation `generation` (the shuffle seeds
  // differ from the interrupted run's).
  std::shared_ptr<const std::vector<ShardSlice>> slices;
  int64_t slices_epoch = -1;
  int64_t generation = 0;
  // SlicesApply is whether `slices` are what pass `pass` of epoch `epoch`
  // reads (the source reads them, the shuffle seeds by the generation).
  bool SlicesApply(int64_t epoch, int64_t pass) const {
    return slices != nullptr && pass == 0 && epoch == slices_epoch;
  }
  // planned_slices is what a restoring source found its pass to be (the
  // slices with their counts), kept for an elastic resume's planning.
  std::shared_ptr<const std::vector<ShardSlice>> planned_slices;
  // error is set by a stage that cannot restore as asked.
  absl::Status error;
};

}  // namespace wds
