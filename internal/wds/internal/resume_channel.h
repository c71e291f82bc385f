// ResumeChannel: how a worker's stream reports its position to the Loader,
// and how the Loader restarts it there (Loader::State / Restore). Internal:
// the tar source, the shuffle stage, the pass stages and the Loader use it;
// a stage of a user's never sees it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace wds {

// StreamCheckpoint is how far one worker's stream has got, in positions, not
// data: the pass it reads, how many samples its source has yielded in that
// pass and how many its shuffle stage has (-1: the recipe has none). With the
// recipe and its context this fixes everything else: the shuffle buffer's
// content and the random state are recomputed from them (see Loader::State).
struct StreamCheckpoint {
  int64_t pass = 0;
  int64_t source_out = 0;
  int64_t shuffle_out = -1;
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
  int sources = 0;
  int shuffles = 0;
  // error is set by a stage that cannot restore as asked.
  absl::Status error;
};

}  // namespace wds
