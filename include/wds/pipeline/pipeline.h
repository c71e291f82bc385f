// Pipeline: an immutable recipe of stages, built fluently and opened once per
// worker. It sits above every stage layer: its fluent methods only append the
// stages that stages.h, decode.h, image.h and batch.h export.
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
#include <map>
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
#include "wds/image/image.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"
#include "wds/shards/shard_list.h"
#include "wds/stages/stages.h"
#include "wds/tar/shard_index.h"
#include "wds/tar/tar_reader.h"

namespace wds {

// EpochMode is how a recipe's epochs are sized (see WithLength / WithEpoch).
enum class EpochMode { kNatural, kLength, kEpoch };

// WebDatasetOptions configure the shard list and tar reading of WebDataset().
struct WebDatasetOptions {
  uint64_t seed = 0;
  // shardshuffle permutes the shard list each epoch by (seed, epoch, pass),
  // identically on every rank, before split_by_node.
  bool shardshuffle = false;
  // resampled draws shards with replacement instead (seeded per rank and
  // worker); endless unless nshards is set. No node/worker split applies.
  bool resampled = false;
  std::optional<int64_t> nshards;
  // Splitters; null means "do not split at this level".
  ShardSplitter nodesplitter = SplitByNode;
  ShardSplitter workersplitter = SplitByWorker;
  // allow_empty lets a rank or worker with no shards yield nothing instead of
  // failing with an error naming the counts.
  bool allow_empty = false;
  // split chooses whole shards or equal runs of samples per rank and worker
  // (SplitGranularity in shard_list.h). nullopt chooses kSamples when every
  // shard's count is known without reading the shard (dataset_index lists
  // it, or it is a local file with a sidecar .idx) and the splitters are
  // SplitByNode / SplitByWorker / null, else kShards. kSamples with unknown
  // counts scans the shards' headers once per process (a full read for
  // remote and pipe: shards); kSamples with a custom splitter is
  // InvalidArgument (a splitter picks shards, not samples). Not used with
  // `resampled`.
  std::optional<SplitGranularity> split;
  // dataset_index, if set, gives shard sample counts (by URL, as listed).
  std::shared_ptr<const DatasetIndex> dataset_index;
  // handler applies to opening shards, reading tars and grouping members.
  Handler handler = Handler::kReraise;
  // max_member_size is the largest tar member accepted (see tar_reader.h);
  // a larger one is a ResourceExhausted error for `handler`.
  int64_t max_member_size = kDefaultMaxMemberSize;
  // member_name, if set, is asked for each member's name (metadata names
  // aside) before grouping: nullopt skips the member, a name is grouped in
  // its place. Its errors go to `handler` per member, as the reference's
  // tar_file_iterator hands them over: "continue" skips that member, "stop"
  // ends that shard after the sample in progress (the next shard is read).
  MemberNameHook member_name;
  // opener turns a URL into a byte stream; tests substitute in-memory streams.
  // The default reads remote URLs with RemoteOptions::FromEnvironment() (read
  // when these options are made) and one connection pool for the pipeline.
  Opener opener = MakeOpener();
};

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

// WebDataset builds the standard source: expand `urls` (brace patterns and
// "::" lists), order/split the shard list per epoch, open each shard and group
// its tar members into samples. A malformed pattern or an empty list is an
// InvalidArgument setup error.
[[nodiscard]] absl::StatusOr<Pipeline> WebDataset(std::string_view urls,
                                                  WebDatasetOptions options = {});
[[nodiscard]] absl::StatusOr<Pipeline> WebDataset(std::vector<std::string> urls,
                                                  WebDatasetOptions options = {});

}  // namespace wds
