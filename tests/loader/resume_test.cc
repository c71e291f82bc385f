// Exact mid-epoch resume: a Loader restored from State() hands out the same
// items, in bytes and order, as one that was never stopped, for a stop after
// every item of small runs.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/base/array.h"
#include "wds/decode/npy.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using testing::Compression;
using testing::TarEntry;
using testing::TempDir;

// Shards of uneven sizes; sample "s<i>_<j>" holds a 2x3 uint8 npy array and a
// class, both derived from (i, j).
std::vector<std::string> WriteShards(const TempDir& dir, const std::vector<int>& sizes,
                                     Compression compression, bool sidecars) {
  std::vector<std::string> urls;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<TarEntry> entries;
    for (int j = 0; j < sizes[i]; ++j) {
      const std::string key = absl::StrCat("s", i, "_", j);
      std::string pixels(6, '\0');
      for (int p = 0; p < 6; ++p) pixels[p] = static_cast<char>(i * 31 + j * 7 + p);
      entries.push_back({key + ".npy", EncodeNpy({DType::kUInt8, {2, 3}, Buffer::Copy(pixels)})});
      entries.push_back({key + ".cls", std::to_string((i + j) % 5)});
    }
    urls.push_back(dir.Write(absl::StrCat("shard-", i, ".tar"),
                             testing::MakeTar(entries, testing::TarFormat::kPax, compression)));
    if (sidecars) EXPECT_TRUE(ScanShard(urls.back()).value().Save(IndexPath(urls.back())).ok());
  }
  return urls;
}

// Describe renders an item's fields (names, keys, array bytes) so that two
// items compare equal exactly when their content does.
std::string Describe(const Sample& item) {
  std::string out;
  for (const auto& [name, value] : item) {
    absl::StrAppend(&out, name, "=");
    if (const auto* text = std::get_if<TextList>(&value)) {
      for (const std::string& t : *text) absl::StrAppend(&out, t, ",");
    } else if (const auto* array = std::get_if<Array>(&value)) {
      absl::StrAppend(
          &out, static_cast<int>(array->dtype), ":",
          std::string(reinterpret_cast<const char*>(array->data.data()), array->nbytes()));
    } else if (const auto* n = std::get_if<int64_t>(&value)) {
      absl::StrAppend(&out, *n);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      absl::StrAppend(&out, *s);
    } else if (const auto* b = std::get_if<Buffer>(&value)) {
      absl::StrAppend(&out, std::string(reinterpret_cast<const char*>(b->data()), b->size()));
    }
    absl::StrAppend(&out, ";");
  }
  return out;
}

// Take hands out up to `n` items of the loader's current epoch.
std::vector<std::string> Take(Loader& loader, int64_t n) {
  std::vector<std::string> out;
  while (static_cast<int64_t>(out.size()) < n) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    EXPECT_TRUE(item.ok()) << item.status();
    if (!item.ok() || !item->has_value()) break;
    out.push_back(Describe(**item));
  }
  return out;
}

struct Recipe {
  std::vector<std::string> urls;
  WebDatasetOptions source;
  size_t shuffle = 0;
  size_t batch = 0;
  std::optional<int64_t> length;
  LoaderOptions loader;

  Pipeline Build() const {
    Pipeline p = WebDataset(urls, source).value();
    if (shuffle > 0) p = p.Shuffle(shuffle, 3);
    p = p.Decode();
    if (batch > 0) p = p.Batched(batch);
    if (length.has_value()) p = p.WithLength(*length);
    return p;
  }
};

// ExpectExactResume stops a loader after every item of epoch `epoch` and
// checks that a new loader restored from its state hands out the rest of the
// uninterrupted epoch, and then the same next epoch.
void ExpectExactResume(const Recipe& recipe, int64_t epoch) {
  Loader whole(recipe.Build(), recipe.loader);
  whole.SetEpoch(epoch);
  const std::vector<std::string> expected = Take(whole, INT64_MAX);
  const std::vector<std::string> next_epoch = Take(whole, INT64_MAX);
  ASSERT_GT(expected.size(), 3u);
  for (size_t stop = 0; stop <= expected.size(); ++stop) {
    SCOPED_TRACE(absl::StrCat("stopped after ", stop, " of ", expected.size(), " items"));
    std::string state;
    {
      Loader first(recipe.Build(), recipe.loader);
      first.SetEpoch(epoch);
      std::vector<std::string> head = Take(first, static_cast<int64_t>(stop));
      ASSERT_EQ(head.size(), stop);
      absl::StatusOr<std::string> taken = first.State();
      ASSERT_TRUE(taken.ok()) << taken.status();
      state = *taken;
    }
    Loader second(recipe.Build(), recipe.loader);
    ASSERT_TRUE(second.Restore(state).ok());
    EXPECT_EQ(second.epoch(), epoch);
    std::vector<std::string> tail = Take(second, INT64_MAX);
    ASSERT_EQ(tail.size(), expected.size() - stop);
    for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], expected[stop + i]) << i;
    if (stop % 7 == 0) EXPECT_EQ(Take(second, INT64_MAX), next_epoch);
  }
}

const std::vector<int> kSizes = {7, 23, 3, 0, 15, 11};  // 59 samples

TEST(ResumeTest, ShuffleBufferDecodeAndBatchesOverThreeWorkers) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, false)};
  r.source = {.seed = 5, .shardshuffle = true, .allow_empty = true};
  r.shuffle = 10;
  r.batch = 4;
  r.loader = {.workers = 3, .prefetch = 2};
  ExpectExactResume(r, 1);
}

TEST(ResumeTest, ShardsDrawnWithReplacementResumeExactly) {
  // An endless source (resampled, no nshards): a restore replays the seeded
  // draws up to the checkpoint and reads on from there; shards are counted
  // from their sidecars, or by reading them.
  for (const bool sidecars : {true, false}) {
    SCOPED_TRACE(sidecars ? "sidecars" : "no sidecars");
    TempDir dir;
    Recipe r{WriteShards(dir, kSizes, Compression::kNone, sidecars)};
    r.source = {.seed = 3, .resampled = true, .allow_empty = true};
    r.shuffle = 6;
    r.batch = 3;
    r.length = 13;
    r.loader = {.workers = 2, .prefetch = 2};
    ExpectExactResume(r, 2);
    // A count of draws (nshards): the pass ends, at every stop point too.
    r.source.nshards = 3;
    r.length.reset();
    ExpectExactResume(r, 1);
    // Weighted draws (the empty shard never drawn).
    r.source.shard_weights = {1, 3, 0.5, 0, 2, 1};
    r.source.nshards.reset();
    r.length = 13;
    ExpectExactResume(r, 2);
  }
}

TEST(ResumeTest, ShardWeightsBelongToTheRecipeAndToResampledDrawsAlone) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, false)};
  r.source = {.seed = 3, .resampled = true};
  const std::string uniform = r.Build().recipe();
  r.source.shard_weights = {1, 1, 1, 1, 1, 1};
  const std::string weighted = r.Build().recipe();
  r.source.shard_weights = {1, 1, 1, 1, 1, 2};
  EXPECT_NE(weighted, uniform);  // a state of one is refused by the other
  EXPECT_NE(r.Build().recipe(), weighted);
  EXPECT_THAT(weighted, HasSubstr(",weights "));
  absl::StatusOr<Pipeline> unresampled = WebDataset(r.urls, {.shard_weights = {1, 1, 1, 1, 1, 1}});
  EXPECT_EQ(unresampled.status(),
            absl::InvalidArgumentError(
                "WebDataset: shard_weights weigh resampled draws; the dataset is not resampled"));
  absl::StatusOr<Pipeline> short_list =
      WebDataset(r.urls, {.resampled = true, .shard_weights = {1, 1}});
  EXPECT_EQ(short_list.status(),
            absl::InvalidArgumentError("shard weights: 2 weights for 6 shards"));
}

TEST(ResumeTest, AnEndlessPassIsNotSharedOutByAnElasticResume) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, true)};
  r.source = {.seed = 3, .resampled = true, .allow_empty = true};
  r.shuffle = 6;
  r.length = 20;
  r.loader = {.workers = 2, .prefetch = 2};
  std::string job;
  {
    Loader first(r.Build(), r.loader);
    ASSERT_EQ(Take(first, 5).size(), 5u);
    job = first.JobState({first.State().value()}).value();
  }
  r.loader.workers = 3;
  Loader other(r.Build(), r.loader);
  const absl::Status refused = other.Restore(job);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("its pass draws shards with replacement, so what it left cannot be "
                        "shared out"));
}

TEST(ResumeTest, SampleSplitAcrossRanksWithLengthOverSeveralPasses) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kGzip, true)};
  r.source = {.seed = 9, .shardshuffle = true, .split = SplitGranularity::kSamples};
  r.shuffle = 8;
  r.batch = 3;
  r.length = 25;  // each rank of 2 holds 29 or 30 samples: about 10 batches a pass
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of 2"));
    r.loader = {.workers = 2, .prefetch = 3, .rank = rank, .world_size = 2};
    ExpectExactResume(r, 2);
  }
}

TEST(ResumeTest, EveryRankOfThreeResumesExactly) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, true)};
  r.source = {.seed = 4, .shardshuffle = true};  // sample split: sidecars give the counts
  r.shuffle = 5;
  r.batch = 2;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank, " of 3"));
    r.loader = {.workers = 2, .prefetch = 2, .rank = rank, .world_size = 3};
    ExpectExactResume(r, 1);
  }
}

TEST(ResumeTest, UnshuffledSamplesOfZstdShards) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kZstd, false)};
  r.source = {.allow_empty = true};
  r.loader = {.workers = 2, .prefetch = 1};
  ExpectExactResume(r, 0);
}

// Tokens hands out `n` tokens: items, and "END" for each end of an epoch.
std::vector<std::string> Tokens(Loader& loader, size_t n) {
  std::vector<std::string> out;
  while (out.size() < n) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    EXPECT_TRUE(item.ok()) << item.status();
    if (!item.ok()) break;
    out.push_back(item->has_value() ? Describe(**item) : "END");
  }
  return out;
}

// Under WithEpoch the worker streams live on from epoch to epoch: a state
// taken anywhere, also between epochs, continues the same streams.
TEST(ResumeTest, WithEpochStreamsContinueAcrossEpochs) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, true)};
  r.source = {.seed = 8, .shardshuffle = true};
  r.shuffle = 6;
  r.batch = 2;
  r.loader = {.workers = 2, .prefetch = 2};
  auto build = [&] { return r.Build().WithEpoch(7); };
  Loader whole(build(), r.loader);
  const std::vector<std::string> expected = Tokens(whole, 40);  // 5 epochs of 7 and END
  for (size_t stop = 0; stop <= expected.size(); stop += 3) {
    std::string state;
    {
      Loader first(build(), r.loader);
      ASSERT_EQ(Tokens(first, stop).size(), stop);
      state = first.State().value();
    }
    Loader second(build(), r.loader);
    ASSERT_TRUE(second.Restore(state).ok());
    const std::vector<std::string> tail = Tokens(second, expected.size() - stop);
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), expected.begin() + stop))
        << "stopped after " << stop << " tokens";
  }
}

TEST(ResumeTest, StateBetweenEpochsStartsTheNextOne) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, false)};
  r.source = {.seed = 2, .shardshuffle = true, .allow_empty = true};
  r.shuffle = 5;
  Loader whole(r.Build(), r.loader);
  Take(whole, INT64_MAX);
  const std::string state = whole.State().value();
  const std::vector<std::string> epoch1 = Take(whole, INT64_MAX);
  Loader restored(r.Build(), r.loader);
  ASSERT_TRUE(restored.Restore(state).ok());
  EXPECT_EQ(restored.epoch(), 1);
  EXPECT_EQ(Take(restored, INT64_MAX), epoch1);
}

TEST(ResumeTest, AnotherRecipeOrLayoutIsRefused) {
  TempDir dir;
  Recipe r{WriteShards(dir, kSizes, Compression::kNone, false)};
  r.source = {.seed = 5, .shardshuffle = true, .allow_empty = true};
  r.shuffle = 10;
  r.batch = 4;
  r.loader = {.workers = 2};
  Loader first(r.Build(), r.loader);
  Take(first, 3);
  const std::string state = first.State().value();

  auto refused = [&](const Recipe& other) {
    Loader loader(other.Build(), other.loader);
    return loader.Restore(state);
  };
  Recipe seed = r;
  seed.source.seed = 6;
  Recipe batch = r;
  batch.batch = 5;
  Recipe shards = r;
  shards.urls.pop_back();
  Recipe length = r;
  length.length = 10;
  for (const Recipe* other : {&seed, &batch, &shards, &length}) {
    absl::Status s = refused(*other);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.message()), HasSubstr("the state was taken with another recipe"));
  }
  Recipe workers = r;
  workers.loader.workers = 3;
  absl::Status s = refused(workers);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(s.message()),
            "Loader::Restore: the state was taken by rank 0 of 1 with 2 workers, not rank 0 of 1 "
            "with 3 (gather every rank's state with JobState to resume on another layout)");

  Loader loader(r.Build(), r.loader);
  s = loader.Restore("{\"format\": \"webdataset-cpp loader state\", \"version\": 9}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "Loader::Restore: loader state version 9 is unknown (this build reads versions 1 and 2)");
  s = loader.Restore("not json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()), "Loader::Restore: the text is not a loader state");
  // A refused state leaves the loader as it was.
  EXPECT_EQ(Take(loader, 2).size(), 2u);
}

// A number where an integer goes must be one that fits: nlohmann's
// get<int64_t>() would cast a float (undefined past the range: state_fuzz
// found 5.6e86 in a stream's position) or wrap a large integer.
TEST(ResumeTest, NumbersThatAreNotIntegersThatFitAreRefusedNamingTheField) {
  TempDir dir;
  Recipe r{WriteShards(dir, {4, 4}, Compression::kNone, false)};
  r.loader.workers = 2;
  Loader taken(r.Build(), r.loader);
  Take(taken, 3);
  const absl::StatusOr<std::string> state = taken.State();
  ASSERT_TRUE(state.ok()) << state.status();
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(*state);
    edit(j);
    Loader loader(r.Build(), r.loader);
    const absl::Status s = loader.Restore(j.dump());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(Take(loader, 2).size(), 2u);  // a refused state changes nothing
    return std::string(s.message());
  };
  EXPECT_THAT(refused([](nlohmann::json& j) { j["streams"][1][1] = 5.6e86; }),
              AllOf(StartsWith("Loader::Restore: the loader state's element 1 is 5.6"),
                    EndsWith(", not an integer that fits")));
  EXPECT_EQ(refused([](nlohmann::json& j) { j["remaining"] = 1.5; }),
            "Loader::Restore: the loader state's \"remaining\" is 1.5, not an integer that fits");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["workers"] = int64_t{1} << 40; }),
            "Loader::Restore: the loader state's \"workers\" is 1099511627776, not an integer "
            "that fits");
  EXPECT_EQ(refused([](nlohmann::json& j) { j["epoch"] = uint64_t{1} << 63; }),
            "Loader::Restore: the loader state's \"epoch\" is 9223372036854775808, not an "
            "integer that fits");
  EXPECT_THAT(refused([](nlohmann::json& j) { j["cursor"] = "1"; }),
              StartsWith("Loader::Restore: the loader state is incomplete: "));
  // The job state's fields are read the same way.
  absl::StatusOr<std::string> job = taken.JobState({*state});
  ASSERT_TRUE(job.ok()) << job.status();
  nlohmann::json j = nlohmann::json::parse(*job);
  j["ranks"][0]["stream_epoch"] = -1e300;
  Loader loader(r.Build(), r.loader);
  const absl::Status s = loader.Restore(j.dump());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(StartsWith("Loader::Restore: the job state's \"stream_epoch\" is -1"),
                    EndsWith(", not an integer that fits")));
}

TEST(ResumeTest, TheRecipeShowsASeedOf2To64Minus1Unsigned) {
  TempDir dir;
  Recipe r{WriteShards(dir, {2}, Compression::kNone, false)};
  r.source.seed = UINT64_MAX;
  EXPECT_THAT(r.Build().recipe(), HasSubstr(",seed 18446744073709551615,"));
  r.source.seed = uint64_t{1} << 63;
  EXPECT_THAT(r.Build().recipe(), HasSubstr(",seed 9223372036854775808,"));
}

TEST(ResumeTest, RecipesWithoutAStateAreFailedPrecondition) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, kSizes, Compression::kNone, false);
  Pipeline base = WebDataset(urls, {.allow_empty = true}).value();
  {
    Loader loader(base.Slice(0, std::nullopt, 2), {});
    absl::StatusOr<std::string> state = loader.State();
    EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(std::string(state.status().message()),
              "Loader::State: the recipe's Slice stage keeps a position the state cannot record");
  }
  {
    Loader loader(base, {.workers = 2, .ordered = false});
    EXPECT_EQ(loader.State().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    Loader loader(base.Shuffle(4).Shuffle(4), {});
    Take(loader, 1);
    absl::StatusOr<std::string> state = loader.State();
    EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(state.status().message()), HasSubstr("at most one shuffle stage"));
  }
}

// A stage before the shuffle that drops samples (or a shuffle of batches)
// makes the replay impossible: State() says so instead of recording a
// position that would restore other items.
TEST(ResumeTest, AShuffleNotFedSampleBySampleHasNoState) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, kSizes, Compression::kNone, false);
  Pipeline p = WebDataset(urls, {.allow_empty = true})
                   .value()
                   .Select([](const Sample& s) { return s.key().back() != '3'; })
                   .Shuffle(6, 2);
  Loader first(p, {});
  Take(first, 20);
  absl::StatusOr<std::string> state = first.State();
  EXPECT_EQ(state.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(state.status().message()),
              HasSubstr("fed sample by sample from the source (put Shuffle before Batched and "
                        "Select)"));
  Loader batches(WebDataset(urls, {.allow_empty = true}).value().Batched(2).Shuffle(3), {});
  Take(batches, 2);
  EXPECT_EQ(batches.State().status().code(), absl::StatusCode::kFailedPrecondition);
}

// What a stream's ResumeChannel says after an item.
struct Noted {
  StreamCheckpoint at;
  std::vector<std::pair<int64_t, int64_t>> dropped;
};

// A stage before the shuffle that drops samples one at a time: the shuffle
// records the ordinals it never took, and a stream restored with them
// (restore_dropped) continues exactly, for a stop after every item. (The
// Python bindings resume this way; the Loader keeps needing no drops.)
TEST(ResumeTest, ShuffleRecordsWhatAStageBeforeItDroppedAndRestoresWithIt) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, kSizes, Compression::kNone, true);
  // Drops s1_3, s1_13 (ordinals 10 and 20 of the unpermuted list), and s5_*
  // but s5_0: a run at the end of the pass.
  auto keep = [](const Sample& s) {
    const std::string key(s.key());
    return key != "s1_3" && key != "s1_13" && (key.rfind("s5_", 0) != 0 || key == "s5_0");
  };
  const Pipeline p =
      WebDataset(urls, {.allow_empty = true}).value().Select(keep).Shuffle(6, 2).Decode();
  WorkerContext ctx;
  ctx.epoch = 1;
  Rewire(ctx).resume = std::make_shared<ResumeChannel>();
  std::vector<std::string> expected;
  std::vector<Noted> noted;
  {
    std::unique_ptr<SampleStream> stream = p.Open(ctx);
    while (true) {
      SampleResult item = stream->Next();
      ASSERT_TRUE(item.ok()) << item.status();
      if (!item->has_value()) break;
      expected.push_back(Describe(**item));
      const ResumeChannel& r = *WiringOf(ctx).resume;
      EXPECT_EQ(r.shuffle_in + r.dropped_samples, r.position.source_out);
      noted.push_back({r.position, r.dropped});
    }
  }
  ASSERT_EQ(expected.size(), 59u - 12u);
  const std::vector<std::pair<int64_t, int64_t>> all_dropped = {{10, 11}, {20, 21}, {49, 59}};
  EXPECT_EQ(noted.back().dropped, all_dropped);
  for (size_t stop = 1; stop <= noted.size(); ++stop) {
    SCOPED_TRACE(absl::StrCat("stopped after ", stop, " of ", expected.size(), " items"));
    WorkerContext again = ctx;
    Rewire(again).resume = std::make_shared<ResumeChannel>();
    WiringOf(again).resume->restore = noted[stop - 1].at;
    WiringOf(again).resume->restore_dropped = noted[stop - 1].dropped;
    std::unique_ptr<SampleStream> stream = p.Open(again);
    std::vector<std::string> tail;
    while (true) {
      SampleResult item = stream->Next();
      ASSERT_TRUE(item.ok()) << item.status();
      ASSERT_TRUE(WiringOf(again).resume->error.ok()) << WiringOf(again).resume->error;
      if (!item->has_value()) break;
      tail.push_back(Describe(**item));
      const ResumeChannel& r = *WiringOf(again).resume;
      EXPECT_EQ(r.shuffle_in + r.dropped_samples, r.position.source_out);
    }
    ASSERT_EQ(tail.size(), expected.size() - stop);
    for (size_t i = 0; i < tail.size(); ++i) ASSERT_EQ(tail[i], expected[stop + i]) << i;
    EXPECT_EQ(WiringOf(again).resume->dropped, all_dropped);
  }
  // Without the drops the replay takes other samples: the restore says so.
  WorkerContext blind = ctx;
  Rewire(blind).resume = std::make_shared<ResumeChannel>();
  WiringOf(blind).resume->restore = noted[30].at;
  std::unique_ptr<SampleStream> stream = p.Open(blind);
  (void)stream->Next();
  EXPECT_THAT(std::string(WiringOf(blind).resume->error.message()),
              HasSubstr("cannot restore the shuffle stage: it took"));
}

}  // namespace
}  // namespace wds
