#include "wds/pipeline/pipeline.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "shards/shard_streams.h"
#include "stages/passes.h"
#include "tar/index_lookup.h"
#include "tar/tar_samples.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_counts.h"

namespace wds {

Pipeline::Pipeline(StreamFactory source, uint64_t seed, std::string recipe)
    : source_(std::move(source)), seed_(seed), recipe_(std::move(recipe)) {}

Pipeline Pipeline::Then(StageFactory stage) const { return Then(std::move(stage), "then"); }

Pipeline Pipeline::Then(StageFactory stage, std::string_view what, bool checkpointable) const {
  Pipeline next = *this;
  next.stages_.push_back(std::move(stage));
  next.recipe_ = Cat(recipe_, "|", what);
  if (!checkpointable) next.checkpoint_blocker_ = std::string(what.substr(0, what.find('(')));
  return next;
}

Pipeline Pipeline::Shuffle(size_t bufsize, size_t initial) const {
  return Then(ShuffleStage(bufsize, initial), Cat("shuffle(", bufsize, ",", initial, ")"));
}

Pipeline Pipeline::Map(std::function<absl::StatusOr<Sample>(Sample)> fn, Handler handler) const {
  return Then(MapStage(std::move(fn), handler), "map");
}

Pipeline Pipeline::Select(std::function<bool(const Sample&)> predicate) const {
  return Then(SelectStage(std::move(predicate)), "select");
}

Pipeline Pipeline::Rename(std::vector<std::pair<std::string, std::string>> renames, bool keep,
                          Handler handler) const {
  return Then(RenameStage(std::move(renames), keep, handler), "rename");
}

Pipeline Pipeline::ToTuple(std::vector<std::string> fields, MissingField missing,
                           Handler handler) const {
  std::string what = "to_tuple(";
  for (const std::string& f : fields) what = Cat(what, f, ",");
  return Then(ToTupleStage(std::move(fields), missing, handler), Cat(what, ")"));
}

Pipeline Pipeline::Slice(int64_t start, std::optional<int64_t> stop, int64_t step) const {
  return Then(SliceStage(start, stop, step),
              Cat("Slice(", start, ",", stop.value_or(-1), ",", step, ")"),
              /*checkpointable=*/false);
}

Pipeline Pipeline::Repeat(std::optional<int64_t> count) const {
  return Then(RepeatStage(count), Cat("Repeat(", count.value_or(-1), ")"),
              /*checkpointable=*/false);
}

Pipeline Pipeline::Decode(std::vector<FieldDecoder> decoders, DecodeOptions options) const {
  return Then(DecodeStage(std::move(decoders), std::move(options)), "decode");
}

namespace {

// ImageDecodeRecipe is the recipe text of Decode(image_spec, ...) and of
// DecodeOnGpu: the device changes no position, draw or key.
std::string ImageDecodeRecipe(std::string_view image_spec, const ImageDecodeOptions& image) {
  return Cat("decode(", image_spec, ",", image.resize.width, "x", image.resize.height, ")");
}

}  // namespace

Pipeline Pipeline::Decode(std::string_view image_spec, ImageDecodeOptions image,
                          DecodeOptions options) const {
  const std::string what = ImageDecodeRecipe(image_spec, image);
  return Then(DecodeStage(image_spec, std::move(image), std::move(options)), what);
}

Pipeline Pipeline::DecodeOnGpu(std::string_view image_spec, ImageDecodeOptions image,
                               GpuDecodeOptions gpu, DecodeOptions options) const {
  const std::string what = ImageDecodeRecipe(image_spec, image);
  return Then(GpuDecodeStage(image_spec, std::move(image), gpu, std::move(options)), what);
}

Pipeline Pipeline::Batched(size_t batch_size, BatchOptions options) const {
  const std::string what = Cat("batched(", batch_size, ",", int{options.partial}, ")");
  return Then(BatchedStage(batch_size, std::move(options)), what);
}

Pipeline Pipeline::WithLength(int64_t n) const {
  Pipeline next = *this;
  next.epoch_mode_ = EpochMode::kLength;
  next.length_ = n;
  return next;
}

Pipeline Pipeline::WithEpoch(int64_t n) const {
  Pipeline next = *this;
  next.epoch_mode_ = EpochMode::kEpoch;
  next.length_ = n;
  return next;
}

StreamFactory Pipeline::Compose() const {
  StreamFactory factory = source_;
  for (const StageFactory& stage : stages_) {
    factory = [upstream = std::move(factory), stage](const WorkerContext& ctx) {
      return stage(upstream, ctx);
    };
  }
  return factory;
}

std::unique_ptr<SampleStream> Pipeline::Open(WorkerContext ctx) const {
  ctx.seed = seed_;
  if (epoch_mode_ == EpochMode::kNatural) return Compose()(ctx);
  return LimitStream(OpenEndless(std::move(ctx)), *length_);
}

std::unique_ptr<SampleStream> Pipeline::OpenPass(WorkerContext ctx) const {
  ctx.seed = seed_;
  return Compose()(ctx);
}

std::unique_ptr<SampleStream> Pipeline::OpenEndless(WorkerContext ctx) const {
  ctx.seed = seed_;
  return PassesStream(Compose(), std::move(ctx), std::nullopt, /*empty_pass_is_error=*/true);
}

absl::StatusOr<Pipeline> WebDataset(std::string_view urls, WebDatasetOptions options) {
  WDS_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandUrls(urls));
  return WebDataset(std::move(shards), std::move(options));
}

namespace {

// UrlsHash fingerprints a shard list (FNV-1a over the URLs), for recipe().
std::string UrlsHash(const std::vector<std::string>& urls) {
  uint64_t h = kFnv1aOffset;
  for (const std::string& url : urls) h = Fnv1a("\xff", Fnv1a(url, h));
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

// WeightsHash fingerprints shard weights (FNV-1a over their bits), for recipe().
std::string WeightsHash(const std::vector<double>& weights) {
  uint64_t h = kFnv1aOffset;
  for (double w : weights) {
    uint64_t bits;
    std::memcpy(&bits, &w, sizeof(bits));
    h = Fnv1a(std::string_view(reinterpret_cast<const char*>(&bits), sizeof(bits)), h);
  }
  return absl::StrCat(absl::Hex(h, absl::kZeroPad16));
}

// SamplesCanSplit is true when the splitters are the built-in ones (or null):
// those the sample-granular split reproduces at sample granularity. A custom
// splitter's choice of shards has no meaning for a run of samples.
bool SamplesCanSplit(const WebDatasetOptions& options) {
  using SplitFunction =
      std::vector<std::string> (*)(std::vector<std::string>, const WorkerContext&);
  auto is = [](const ShardSplitter& splitter, SplitFunction builtin) {
    if (!splitter) return true;
    const SplitFunction* f = splitter.target<SplitFunction>();
    return f != nullptr && *f == builtin;
  };
  return is(options.nodesplitter, SplitByNode) && is(options.workersplitter, SplitByWorker);
}

absl::StatusOr<SplitGranularity> ChooseSplit(const std::vector<std::string>& urls,
                                             const WebDatasetOptions& options) {
  if (options.resampled) return SplitGranularity::kShards;
  if (!options.split.has_value()) {
    return SamplesCanSplit(options) && CountsKnownWithoutReading(urls, options.dataset_index.get())
               ? SplitGranularity::kSamples
               : SplitGranularity::kShards;
  }
  if (*options.split == SplitGranularity::kSamples && !SamplesCanSplit(options)) {
    return absl::InvalidArgumentError(
        "WebDataset: split=samples shares runs of samples among ranks and workers itself; a "
        "custom nodesplitter or workersplitter cannot apply to them (use split=shards, or "
        "SplitByNode / SplitByWorker / none)");
  }
  return *options.split;
}

}  // namespace

absl::StatusOr<Pipeline> WebDataset(std::vector<std::string> urls, WebDatasetOptions options) {
  if (urls.empty()) return absl::InvalidArgumentError("WebDataset: the shard list is empty");
  if (!options.opener) return absl::InvalidArgumentError("WebDataset: no opener");
  if (options.open_ahead < 0 || options.open_ahead > RemoteOptions::kMaxOpenAhead) {
    return absl::InvalidArgumentError(Cat("WebDataset: open_ahead must be from 0 to ",
                                          RemoteOptions::kMaxOpenAhead, ", got ",
                                          options.open_ahead));
  }
  if (!options.shard_weights.empty()) {
    if (!options.resampled) {
      return absl::InvalidArgumentError(
          "WebDataset: shard_weights weigh resampled draws; the dataset is not resampled");
    }
    WDS_RETURN_IF_ERROR(CheckShardWeights(options.shard_weights, urls.size()));
  }
  WDS_ASSIGN_OR_RETURN(const SplitGranularity split, ChooseSplit(urls, options));
  auto shards = std::make_shared<const std::vector<std::string>>(std::move(urls));
  std::shared_ptr<ShardCatalog> catalog;
  if (split == SplitGranularity::kSamples && !options.resampled) {
    catalog = std::make_shared<ShardCatalog>(options.opener, options.dataset_index);
  }
  std::shared_ptr<ShardCatalog> counts_for_restore =
      catalog != nullptr ? catalog
                         : std::make_shared<ShardCatalog>(options.opener, options.dataset_index);
  std::string recipe =
      Cat("webdataset(", shards->size(), " shards ", UrlsHash(*shards), ",seed ", options.seed,
          ",shuffle ", int{options.shardshuffle}, ",split ", int(split), ",resampled ",
          int{options.resampled}, ",nodes ", int{bool(options.nodesplitter)}, ",workers ",
          int{bool(options.workersplitter)},
          options.shard_weights.empty() ? std::string()
                                        : Cat(",weights ", WeightsHash(options.shard_weights)),
          ")");
  StreamFactory source = [shards, options, split, catalog,
                          counts_for_restore](const WorkerContext& ctx) {
    std::unique_ptr<UrlStream> url_stream;
    ShardListOptions list{options.shardshuffle, options.nodesplitter, options.workersplitter,
                          options.allow_empty, split};
    // An elastic resume hands this worker its share of what is left of the
    // epoch's pass 0 (ResumeChannel::slices). A sample-granular split knows
    // its pass's size on opening (StreamCheckpoint::pass_samples).
    const std::shared_ptr<ResumeChannel>& resume = WiringOf(ctx).resume;
    std::optional<absl::StatusOr<std::vector<ShardSlice>>> slices;
    if (resume != nullptr && resume->SlicesApply(ctx.epoch, ctx.pass)) {
      slices = *resume->slices;
    } else if (options.resampled) {
      url_stream = ResampledShardStream(*shards, options.nshards, ctx, options.shard_weights);
    } else if (catalog != nullptr) {
      absl::StatusOr<std::vector<int64_t>> counts = catalog->Counts(*shards);
      slices = counts.ok() ? SlicesForWorker(*shards, *counts, list, ctx)
                           : absl::StatusOr<std::vector<ShardSlice>>(counts.status());
    } else {
      url_stream = ShardStream(*shards, list, ctx);
    }
    int64_t pass_samples = -1;
    if (slices.has_value()) {
      if (slices->ok()) pass_samples = SampleCount(**slices);
      url_stream = SlicesStream(*std::move(slices));
    }
    // Shards drawn with replacement (forever, without nshards).
    const bool drawn = options.resampled && !slices.has_value();
    std::unique_ptr<SampleStream> stream = TarSamples(
        std::move(url_stream), options.opener, options.handler, ctx, options.max_member_size,
        counts_for_restore, options.member_name, drawn, options.open_ahead);
    if (resume != nullptr) resume->position.pass_samples = pass_samples;
    return stream;
  };
  return Pipeline(std::move(source), options.seed, std::move(recipe));
}

}  // namespace wds
