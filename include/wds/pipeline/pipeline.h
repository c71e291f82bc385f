// Pipeline: an immutable recipe of stages, built fluently and opened once per
// worker. It sits above every stage layer: its fluent methods only append the
// stages that stages.h, decode.h, image.h and batch.h export. The standard
// source, WebDataset(), is in web_dataset.h.
//
//   absl::StatusOr<wds::Pipeline> pipe = wds::WebDataset("data/train-{000000..000099}.tar",
//                                                        {.seed = 7, .shardshuffle = true});
//   wds::Pipeline p = pipe->Shuffle(1000).Decode().ToTuple({"jpg;png", "cls"}).WithLength(n);
//   for (auto s = p.Open({}); ...)            // one thread, or
//   wds::Loader loader(p, {.workers = 4});    // one running copy per worker
//
// Every builder method returns a new Pipeline; the receiver is unchanged, so a
// recipe can be shared between threads and opened any number of times.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/error.h"
#include "wds/base/sample.h"
#include "wds/base/stage.h"
#include "wds/batch/batch.h"
#include "wds/decode/decode.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/image/image.h"
#include "wds/stages/stages.h"

namespace wds {

// EpochMode is how a recipe's epochs are sized (see WithLength / WithEpoch).
enum class EpochMode { kNatural, kLength, kEpoch };

class Pipeline {
 public:
  // A pipeline whose source is `source`; `recipe` describes the source (see
  // recipe()).
  explicit Pipeline(StreamFactory source, uint64_t seed = 0, std::string recipe = "source");

  // Then appends any stage; `what` describes it (with its parameters) in
  // recipe(), and checkpointable = false marks a stage that keeps a position
  // of its own, which a Loader state cannot record.
  [[nodiscard]] Pipeline Then(StageFactory stage) const;
  [[nodiscard]] Pipeline Then(StageFactory stage, std::string_view what,
                              bool checkpointable = true) const;

  // The fluent forms of the stages; each is Then(<the stage>) (stages.h,
  // decode.h, image.h, batch.h document them).
  [[nodiscard]] Pipeline Shuffle(size_t bufsize, size_t initial = 100) const;
  [[nodiscard]] Pipeline Map(std::function<absl::StatusOr<Sample>(Sample)> fn,
                             Handler handler = Handler::kReraise) const;
  [[nodiscard]] Pipeline Select(std::function<bool(const Sample&)> predicate) const;
  [[nodiscard]] Pipeline Rename(std::vector<std::pair<std::string, std::string>> renames,
                                bool keep = true, Handler handler = Handler::kReraise) const;
  [[nodiscard]] Pipeline ToTuple(std::vector<std::string> fields,
                                 MissingField missing = MissingField::kError,
                                 Handler handler = Handler::kReraise) const;
  [[nodiscard]] Pipeline Slice(int64_t start, std::optional<int64_t> stop, int64_t step = 1) const;
  [[nodiscard]] Pipeline Repeat(std::optional<int64_t> count) const;
  [[nodiscard]] Pipeline Decode(std::vector<FieldDecoder> decoders = BasicDecoders(),
                                DecodeOptions options = {}) const;
  [[nodiscard]] Pipeline Decode(std::string_view image_spec, ImageDecodeOptions image = {},
                                DecodeOptions options = {}) const;
  // DecodeOnGpu is Decode(image_spec, image, options) with the images' decode
  // left to the batches' consumer, on its device (wds/gpu/gpu_decode.h): the
  // same draws, keys, order and state as Decode, and the same recipe, so a
  // checkpoint of one resumes the other.
  [[nodiscard]] Pipeline DecodeOnGpu(std::string_view image_spec, ImageDecodeOptions image = {},
                                     GpuDecodeOptions gpu = {}, DecodeOptions options = {}) const;
  [[nodiscard]] Pipeline Batched(size_t batch_size, BatchOptions options = {}) const;

  // WithLength(n): size() reports n and every epoch yields exactly n items; if
  // the data runs out first, a fresh pass over the shards continues it. Under a
  // Loader the n items are counted over all workers together.
  [[nodiscard]] Pipeline WithLength(int64_t n) const;
  // WithEpoch(n): each epoch is the next n items of one continuing stream (the
  // reference package's with_epoch): the next epoch resumes where this one
  // stopped, and the data restarts with a fresh pass when it runs out.
  [[nodiscard]] Pipeline WithEpoch(int64_t n) const;

  // Open starts one running copy of the recipe for `ctx`. ctx.seed is replaced
  // by the recipe's seed. For WithLength / WithEpoch recipes the stream yields
  // exactly length() items.
  [[nodiscard]] std::unique_ptr<SampleStream> Open(WorkerContext ctx) const;
  // OpenEndless opens the recipe as an endless sequence of passes (pass 0, 1,
  // ...); a pass that yields nothing is an error. Used by Loader for
  // WithLength / WithEpoch recipes.
  [[nodiscard]] std::unique_ptr<SampleStream> OpenEndless(WorkerContext ctx) const;

  // OpenPass opens pass ctx.pass of the recipe alone, without its epoch
  // sizing. An elastic resume opens the interrupted workers' passes this way
  // to ask their stages where they stood; nothing is read before Next().
  [[nodiscard]] std::unique_ptr<SampleStream> OpenPass(WorkerContext ctx) const;

  // recipe is a description of the recipe (source, stages with their
  // parameters, epoch sizing) that a Loader state records, so that a state is
  // never restored into another recipe. Custom stages (Then) count by
  // position only.
  const std::string& recipe() const { return recipe_; }
  // checkpoint_blocker names a stage whose position a Loader state cannot
  // record (Slice, Repeat); empty when the recipe can be checkpointed.
  const std::string& checkpoint_blocker() const { return checkpoint_blocker_; }

  EpochMode epoch_mode() const { return epoch_mode_; }
  // length is n for WithLength / WithEpoch recipes.
  std::optional<int64_t> length() const { return length_; }
  uint64_t seed() const { return seed_; }

 private:
  StreamFactory Compose() const;

  StreamFactory source_;
  std::vector<StageFactory> stages_;
  uint64_t seed_ = 0;
  EpochMode epoch_mode_ = EpochMode::kNatural;
  std::optional<int64_t> length_;
  std::string recipe_;
  std::string checkpoint_blocker_;
};

}  // namespace wds
