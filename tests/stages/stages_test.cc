// Tests for the sample stages: Shuffle, Map, Select, Rename, ToTuple, Slice,
// Repeat and ParseMissingField.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/base/random.h"
#include "wds/pipeline/pipeline.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::wds::testing::Drain;
using ::wds::testing::FieldText;
using ::wds::testing::Keys;
using ::wds::testing::MakeSample;
using ::wds::testing::VectorSource;

constexpr char kUrl[] = "mem/shard-000.tar";

// Numbered returns samples keyed "0", "1", ... "n-1".
std::vector<Sample> Numbered(int n) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) samples.push_back(MakeSample(std::to_string(i)));
  return samples;
}

std::vector<std::string> NumberedKeys(int start, int stop, int step = 1) {
  std::vector<std::string> keys;
  for (int i = start; i < stop; i += step) keys.push_back(std::to_string(i));
  return keys;
}

std::vector<std::string> FieldNamesOf(const Sample& s) {
  std::vector<std::string> names;
  for (const Sample::Field& f : s) names.push_back(f.first);
  return names;
}

absl::StatusOr<std::vector<Sample>> RunAll(const Pipeline& p, WorkerContext ctx = {}) {
  std::unique_ptr<SampleStream> stream = p.Open(std::move(ctx));
  return Drain(*stream);
}

std::vector<std::string> RunKeys(const Pipeline& p, WorkerContext ctx = {}) {
  absl::StatusOr<std::vector<Sample>> out = RunAll(p, std::move(ctx));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? Keys(*out) : std::vector<std::string>{};
}

// CountingSource yields Numbered(n) (n < 0: endless) and counts the reads.
struct CountingSource {
  std::shared_ptr<int> reads = std::make_shared<int>(0);
  int n;

  StreamFactory Factory() const {
    class Stream : public SampleStream {
     public:
      Stream(std::shared_ptr<int> reads, int n) : reads_(std::move(reads)), n_(n) {}
      SampleResult Next() override {
        if (n_ >= 0 && next_ >= n_) return std::nullopt;
        ++*reads_;
        return MakeSample(std::to_string(next_++));
      }

     private:
      std::shared_ptr<int> reads_;
      int n_;
      int next_ = 0;
    };
    return
        [reads = reads, n = n](const WorkerContext&) { return std::make_unique<Stream>(reads, n); };
  }
};

// FailingSource yields Numbered(n) and then `error` forever.
StreamFactory FailingSource(int n, absl::Status error) {
  class Stream : public SampleStream {
   public:
    Stream(int n, absl::Status error) : n_(n), error_(std::move(error)) {}
    SampleResult Next() override {
      if (next_ < n_) return MakeSample(std::to_string(next_++));
      return error_;
    }

   private:
    int n_;
    int next_ = 0;
    absl::Status error_;
  };
  return [n, error](const WorkerContext&) { return std::make_unique<Stream>(n, error); };
}

// ---------------------------------------------------------------- Shuffle

Pipeline ShuffledNumbers(int n, size_t bufsize, size_t initial = 100, uint64_t seed = 7) {
  return Pipeline(VectorSource(Numbered(n)), seed).Shuffle(bufsize, initial);
}

TEST(ShuffleTest, SameContextGivesSameOrder) {
  WorkerContext ctx{.rank = 1, .world_size = 2, .worker = 2, .num_workers = 3, .epoch = 4};
  EXPECT_EQ(RunKeys(ShuffledNumbers(200, 50), ctx), RunKeys(ShuffledNumbers(200, 50), ctx));
}

TEST(ShuffleTest, OutputIsPermutationOfInput) {
  std::vector<std::string> keys = RunKeys(ShuffledNumbers(1000, 100));
  ASSERT_EQ(keys.size(), 1000u);
  EXPECT_NE(keys, NumberedKeys(0, 1000));
  std::sort(keys.begin(), keys.end());
  std::vector<std::string> expected = NumberedKeys(0, 1000);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);
}

TEST(ShuffleTest, DifferentEpochGivesDifferentOrder) {
  EXPECT_NE(RunKeys(ShuffledNumbers(100, 100), {.epoch = 0}),
            RunKeys(ShuffledNumbers(100, 100), {.epoch = 1}));
}

TEST(ShuffleTest, DifferentWorkerGivesDifferentOrder) {
  EXPECT_NE(RunKeys(ShuffledNumbers(100, 100), {.worker = 0, .num_workers = 2}),
            RunKeys(ShuffledNumbers(100, 100), {.worker = 1, .num_workers = 2}));
}

TEST(ShuffleTest, DifferentRankGivesDifferentOrder) {
  EXPECT_NE(RunKeys(ShuffledNumbers(100, 100), {.rank = 0, .world_size = 2}),
            RunKeys(ShuffledNumbers(100, 100), {.rank = 1, .world_size = 2}));
}

TEST(ShuffleTest, DifferentPassGivesDifferentOrder) {
  EXPECT_NE(RunKeys(ShuffledNumbers(100, 100), {.pass = 0}),
            RunKeys(ShuffledNumbers(100, 100), {.pass = 1}));
}

TEST(ShuffleTest, DifferentSeedGivesDifferentOrder) {
  EXPECT_NE(RunKeys(ShuffledNumbers(100, 100, 100, 1)), RunKeys(ShuffledNumbers(100, 100, 100, 2)));
}

// The model re-implements the reference algorithm with the documented seed
// derivation; the stage must match it item for item.
std::vector<std::string> ModelShuffle(int n, size_t bufsize, size_t initial, uint64_t seed,
                                      const WorkerContext& ctx) {
  Rng rng(
      DeriveSeed(seed, {kShuffle, static_cast<uint64_t>(ctx.epoch), static_cast<uint64_t>(ctx.pass),
                        static_cast<uint64_t>(ctx.rank), static_cast<uint64_t>(ctx.worker)}));
  initial = std::min(initial, bufsize);
  std::vector<std::string> input = NumberedKeys(0, n), buf, out;
  auto pick = [&] {
    size_t k = rng.Below(buf.size());
    std::swap(buf[k], buf.back());
    out.push_back(buf.back());
    buf.pop_back();
  };
  size_t next = 0;
  while (next < input.size()) {
    buf.push_back(input[next++]);
    if (buf.size() < bufsize && next < input.size()) buf.push_back(input[next++]);
    if (buf.size() >= initial) pick();
  }
  while (!buf.empty()) pick();
  return out;
}

TEST(ShuffleTest, FollowsReferenceAlgorithm) {
  WorkerContext ctx{.rank = 1, .world_size = 2, .worker = 1, .num_workers = 2, .epoch = 3};
  EXPECT_EQ(RunKeys(ShuffledNumbers(57, 10, 3, 11), ctx), ModelShuffle(57, 10, 3, 11, ctx));
  EXPECT_EQ(RunKeys(ShuffledNumbers(57, 100, 100, 11), ctx), ModelShuffle(57, 100, 100, 11, ctx));
}

// First output after exactly `reads` upstream reads (bufsize >= n).
int ReadsBeforeFirstOutput(size_t bufsize, size_t initial) {
  CountingSource source{.n = 50};
  std::unique_ptr<SampleStream> s = Pipeline(source.Factory()).Shuffle(bufsize, initial).Open({});
  SampleResult first = s->Next();
  EXPECT_TRUE(first.ok() && first->has_value());
  return *source.reads;
}

TEST(ShuffleTest, FirstItemComesOnlyAfterInitialWereRead) {
  EXPECT_EQ(ReadsBeforeFirstOutput(100, 4), 4);
  EXPECT_EQ(ReadsBeforeFirstOutput(100, 20), 20);
}

TEST(ShuffleTest, OddInitialReadsOneMoreBecauseEachStepReadsTwo) {
  EXPECT_EQ(ReadsBeforeFirstOutput(100, 5), 6);
}

TEST(ShuffleTest, InitialIsCappedByBufsize) { EXPECT_EQ(ReadsBeforeFirstOutput(4, 100), 4); }

TEST(ShuffleTest, BufferNeverHoldsMoreThanBufsize) {
  CountingSource source{.n = -1};
  std::unique_ptr<SampleStream> s = Pipeline(source.Factory()).Shuffle(8, 2).Open({});
  for (int yielded = 1; yielded <= 200; ++yielded) {
    SampleResult item = s->Next();
    ASSERT_TRUE(item.ok() && item->has_value());
    EXPECT_LE(*source.reads - yielded, 8 - 1) << "after " << yielded << " outputs";
  }
}

TEST(ShuffleTest, BufsizeBelowTwoKeepsOrder) {
  EXPECT_EQ(RunKeys(ShuffledNumbers(20, 1)), NumberedKeys(0, 20));
  EXPECT_EQ(RunKeys(ShuffledNumbers(20, 0)), NumberedKeys(0, 20));
}

TEST(ShuffleTest, EmptyUpstreamEnds) {
  absl::StatusOr<std::vector<Sample>> out = RunAll(ShuffledNumbers(0, 10));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->empty());
}

TEST(ShuffleTest, UpstreamErrorIsReturnedAtOnceAndSticky) {
  std::unique_ptr<SampleStream> s =
      Pipeline(FailingSource(3, absl::DataLossError("mem.tar: truncated")))
          .Shuffle(10, 10)
          .Open({});
  for (int i = 0; i < 2; ++i) {
    SampleResult item = s->Next();
    ASSERT_FALSE(item.ok());
    EXPECT_EQ(item.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(item.status().message()), HasSubstr("mem.tar: truncated"));
  }
}

TEST(ShuffleTest, UpstreamErrorAfterFirstOutputsStopsTheStream) {
  std::unique_ptr<SampleStream> s =
      Pipeline(FailingSource(6, absl::DataLossError("bad"))).Shuffle(100, 2).Open({});
  int yielded = 0;
  SampleResult item = s->Next();
  while (item.ok() && item->has_value()) {
    ++yielded;
    item = s->Next();
  }
  EXPECT_EQ(yielded, 3);  // each step reads two and yields one
  EXPECT_EQ(item.status().code(), absl::StatusCode::kDataLoss);
}

// -------------------------------------------------------------------- Map

TEST(MapTest, ReplacesEachSample) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"txt", "x"}}), MakeSample("b")}))
                   .Map([](Sample s) -> absl::StatusOr<Sample> {
                     s.Set("n", int64_t{static_cast<int64_t>(s.size())});
                     return s;
                   });
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].GetInt("n"), 3);
  EXPECT_EQ((*out)[1].GetInt("n"), 2);
  EXPECT_EQ(FieldText((*out)[0], "txt"), "x");
}

TEST(MapTest, KeyIsRestoredLikeReference) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a"), MakeSample("b")}))
                   .Map([](Sample) -> absl::StatusOr<Sample> {
                     Sample fresh;
                     fresh.Set(std::string(kKeyField), std::string("changed"));
                     fresh.Set("x", int64_t{1});
                     return fresh;
                   });
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Keys(*out), ElementsAre("a", "b"));
  EXPECT_EQ((*out)[0].GetInt("x"), 1);
}

TEST(MapTest, TupleResultIsNotGivenAKey) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a")})).Map([](Sample) -> absl::StatusOr<Sample> {
    Sample t;
    t.set_is_tuple(true);
    t.Append("0", int64_t{5});
    return t;
  });
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_THAT(FieldNamesOf((*out)[0]), ElementsAre("0"));
}

TEST(MapTest, EmptyFunctionIsInvalidArgument) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(VectorSource(Numbered(1))).Map(nullptr));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

// ----------------------------------------------------------------- Select

TEST(SelectTest, KeepsSamplesMatchingPredicate) {
  Pipeline p = Pipeline(VectorSource(Numbered(10))).Select([](const Sample& s) {
    return std::stoi(std::string(s.key())) % 3 == 0;
  });
  EXPECT_THAT(RunKeys(p), ElementsAre("0", "3", "6", "9"));
}

TEST(SelectTest, UpstreamErrorPassesThrough) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(FailingSource(2, absl::DataLossError("gone"))).Select([](const Sample&) {
        return false;
      }));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
}

// ----------------------------------------------------------------- Rename

TEST(RenameTest, TakesFirstPresentAlternativeAndAppendsNewNames) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"png", "P"}, {"cls", "1"}, {"x", "X"}})}))
                   .Rename({{"image", "jpg;png"}, {"label", "cls"}});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const Sample& s = (*out)[0];
  EXPECT_THAT(FieldNamesOf(s), ElementsAre("__key__", "__url__", "x", "image", "label"));
  EXPECT_EQ(FieldText(s, "image"), "P");
  EXPECT_EQ(FieldText(s, "label"), "1");
}

TEST(RenameTest, RemovesEveryListedAlternativeLikeReference) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"jpg", "J"}, {"png", "P"}})}))
                   .Rename({{"image", "jpg;png"}});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(FieldNamesOf((*out)[0]), ElementsAre("__key__", "__url__", "image"));
  EXPECT_EQ(FieldText((*out)[0], "image"), "J");
}

TEST(RenameTest, WithoutKeepDropsEveryUnnamedFieldMetadataTooLikeReference) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"jpg", "J"}, {"cls", "1"}, {"x", "X"}})}))
                   .Rename({{"label", "cls"}, {"key", "__key__"}}, /*keep=*/false);
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(FieldNamesOf((*out)[0]), ElementsAre("label", "key"));
  EXPECT_EQ(FieldText((*out)[0], "key"), "a");
}

TEST(RenameTest, SameSourceForTwoNamesCopiesIt) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"jpg", "J"}})}))
                   .Rename({{"a", "jpg"}, {"b", "jpg"}});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(FieldNamesOf((*out)[0]), ElementsAre("__key__", "__url__", "a", "b"));
  EXPECT_EQ(FieldText((*out)[0], "a"), "J");
  EXPECT_EQ(FieldText((*out)[0], "b"), "J");
}

TEST(RenameTest, MetadataSourceIsMovedLikeReference) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a")})).Rename({{"name", "__key__"}});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(FieldNamesOf((*out)[0]), ElementsAre("__url__", "name"));
  EXPECT_EQ(FieldText((*out)[0], "name"), "a");
}

TEST(RenameTest, MissingFieldIsNotFoundNamingKeyWantedAndPresent) {
  absl::StatusOr<std::vector<Sample>> out = RunAll(
      Pipeline(VectorSource({MakeSample("k7", {{"gif", "G"}})})).Rename({{"image", "jpg;png"}}));
  ASSERT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  const std::string message(out.status().message());
  EXPECT_THAT(message, HasSubstr(kUrl));
  EXPECT_THAT(message, HasSubstr("key k7"));
  EXPECT_THAT(message, HasSubstr("\"jpg;png\""));
  EXPECT_THAT(message, HasSubstr("\"image\""));
  EXPECT_THAT(message, HasSubstr("fields present: __key__, __url__, gif"));
}

TEST(RenameTest, MetadataTargetIsInvalidArgument) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(VectorSource(Numbered(1))).Rename({{"__key__", "jpg"}}));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("__key__"));
}

TEST(RenameTest, EmptyAlternativeIsInvalidArgument) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(VectorSource(Numbered(1))).Rename({{"image", "jpg;"}}));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("\"jpg;\""));
}

// ---------------------------------------------------------------- ToTuple

TEST(ToTupleTest, KeepsExactlyRequestedFieldsInOrderNamedBySpec) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"png", "P"}, {"cls", "1"}, {"x", "X"}})}))
                   .ToTuple({"cls", "jpg;png"});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const Sample& t = (*out)[0];
  EXPECT_TRUE(t.is_tuple());
  EXPECT_THAT(FieldNamesOf(t), ElementsAre("cls", "jpg;png"));
  EXPECT_EQ(FieldText(t, "cls"), "1");
  EXPECT_EQ(FieldText(t, "jpg;png"), "P");
}

TEST(ToTupleTest, OverlappingAlternativesBothGetTheValue) {
  Pipeline p =
      Pipeline(VectorSource({MakeSample("a", {{"jpg", "J"}})})).ToTuple({"jpg", "png;jpg"});
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(FieldText((*out)[0], "jpg"), "J");
  EXPECT_EQ(FieldText((*out)[0], "png;jpg"), "J");
}

TEST(ToTupleTest, MissingFieldErrorNamesUrlKeySpecAndPresentFields) {
  absl::StatusOr<std::vector<Sample>> out = RunAll(
      Pipeline(VectorSource({MakeSample("k3", {{"cls", "1"}})})).ToTuple({"cls", "jpg;png"}));
  ASSERT_EQ(out.status().code(), absl::StatusCode::kNotFound);
  const std::string message(out.status().message());
  EXPECT_THAT(message, HasSubstr(kUrl));
  EXPECT_THAT(message, HasSubstr("key k3"));
  EXPECT_THAT(message, HasSubstr("\"jpg;png\""));
  EXPECT_THAT(message, HasSubstr("fields present: __key__, __url__, cls"));
}

TEST(ToTupleTest, MissingSkipDropsSampleWithoutCounting) {
  auto counters = std::make_shared<ErrorCounters>();
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"jpg", "J"}}), MakeSample("b"),
                                      MakeSample("c", {{"jpg", "C"}})}))
                   .ToTuple({"jpg"}, MissingField::kSkip);
  absl::StatusOr<std::vector<Sample>> out = RunAll(p, {.errors = counters});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ(FieldText((*out)[0], "jpg"), "J");
  EXPECT_EQ(FieldText((*out)[1], "jpg"), "C");
  EXPECT_EQ(counters->Total(), 0);
}

TEST(ToTupleTest, MissingEmptyGivesEmptyBytes) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"cls", "1"}})}))
                   .ToTuple({"jpg", "cls"}, MissingField::kEmpty);
  absl::StatusOr<std::vector<Sample>> out = RunAll(p);
  ASSERT_TRUE(out.ok()) << out.status();
  const Sample& t = (*out)[0];
  EXPECT_THAT(FieldNamesOf(t), ElementsAre("jpg", "cls"));
  ASSERT_NE(t.GetBytes("jpg"), nullptr);
  EXPECT_TRUE(t.GetBytes("jpg")->empty());
}

TEST(ToTupleTest, DuplicateSpecIsInvalidArgument) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(VectorSource(Numbered(1))).ToTuple({"jpg", "jpg"}));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("listed twice"));
}

TEST(ParseMissingFieldTest, ParsesPolicyNames) {
  EXPECT_EQ(*ParseMissingField("error"), MissingField::kError);
  EXPECT_EQ(*ParseMissingField("skip"), MissingField::kSkip);
  EXPECT_EQ(*ParseMissingField("empty"), MissingField::kEmpty);
}

TEST(ParseMissingFieldTest, UnknownNameIsInvalidArgument) {
  absl::StatusOr<MissingField> m = ParseMissingField("ignore");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("\"ignore\""));
}

// ------------------------------------------------ handlers of Map/Rename/ToTuple

// Each case fails on the middle sample "b" of a, b, c.
struct ErrorCase {
  std::string stage;
  std::function<Pipeline(const Pipeline&, Handler)> add;
  absl::StatusCode code;
  std::string detail;
};

std::vector<ErrorCase> ErrorCases() {
  return {
      {"map",
       [](const Pipeline& p, Handler h) {
         return p.Map(
             [](Sample s) -> absl::StatusOr<Sample> {
               if (s.key() == "b") return absl::OutOfRangeError("too big");
               return s;
             },
             h);
       },
       absl::StatusCode::kOutOfRange, "map function failed: too big"},
      {"rename",
       [](const Pipeline& p, Handler h) {
         return p.Rename({{"image", "jpg"}}, true, h);
       },
       absl::StatusCode::kNotFound, "no field \"jpg\""},
      {"to_tuple",
       // The tuple keeps __key__ so that the outputs can be identified.
       [](const Pipeline& p, Handler h) {
         return p.ToTuple({"__key__", "jpg"}, MissingField::kError, h);
       },
       absl::StatusCode::kNotFound, "no field \"jpg\""},
  };
}

class StageHandlerTest : public ::testing::TestWithParam<std::tuple<int, Handler>> {
 protected:
  struct Result {
    std::vector<std::string> keys;
    absl::Status end;
    absl::Status end_again;
    std::vector<std::string> warnings;
    int64_t count;
  };

  ErrorCase error_case() const { return ErrorCases()[std::get<0>(GetParam())]; }

  Result RunCase() {
    ErrorCase c = error_case();
    Pipeline source(VectorSource(
        {MakeSample("a", {{"jpg", "A"}}), MakeSample("b"), MakeSample("c", {{"jpg", "C"}})}));
    auto counters = std::make_shared<ErrorCounters>();
    Result r;
    WorkerContext ctx{.errors = counters,
                      .warn = [&r](std::string_view m) { r.warnings.emplace_back(m); }};
    std::unique_ptr<SampleStream> s = c.add(source, std::get<1>(GetParam())).Open(ctx);
    SampleResult item = s->Next();
    for (; item.ok() && item->has_value(); item = s->Next()) {
      r.keys.push_back(std::string((*item)->key()));
    }
    r.end = item.status();
    SampleResult again = s->Next();
    r.end_again =
        again.ok() && again->has_value() ? absl::UnknownError("item after end") : again.status();
    r.count = counters->Count(c.stage, c.code);
    EXPECT_EQ(counters->Total(), 1);
    return r;
  }
};

TEST_P(StageHandlerTest, HandlerDecidesWhatFollowsTheError) {
  const ErrorCase c = error_case();
  const Handler handler = std::get<1>(GetParam());
  Result r = RunCase();
  EXPECT_EQ(r.count, 1);
  const bool warns = handler == Handler::kWarnAndContinue || handler == Handler::kWarnAndStop;
  if (warns) {
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_THAT(r.warnings[0], HasSubstr(c.stage + ": "));
    EXPECT_THAT(r.warnings[0], HasSubstr("key b"));
  } else {
    EXPECT_TRUE(r.warnings.empty());
  }
  switch (handler) {
    case Handler::kReraise:
      EXPECT_THAT(r.keys, ElementsAre("a"));
      EXPECT_EQ(r.end.code(), c.code);
      EXPECT_THAT(std::string(r.end.message()), HasSubstr(std::string(kUrl) + ": key b: "));
      EXPECT_THAT(std::string(r.end.message()), HasSubstr(c.detail));
      EXPECT_EQ(r.end_again, r.end);
      break;
    case Handler::kWarnAndContinue:
    case Handler::kIgnoreAndContinue:
      EXPECT_THAT(r.keys, ElementsAre("a", "c"));
      EXPECT_TRUE(r.end.ok());
      EXPECT_TRUE(r.end_again.ok());
      break;
    case Handler::kWarnAndStop:
    case Handler::kIgnoreAndStop:
      EXPECT_THAT(r.keys, ElementsAre("a"));
      EXPECT_TRUE(r.end.ok());
      EXPECT_TRUE(r.end_again.ok());
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllStagesAllHandlers, StageHandlerTest,
    ::testing::Combine(::testing::Values(0, 1, 2),
                       ::testing::Values(Handler::kReraise, Handler::kWarnAndContinue,
                                         Handler::kIgnoreAndContinue, Handler::kWarnAndStop,
                                         Handler::kIgnoreAndStop)),
    [](const ::testing::TestParamInfo<std::tuple<int, Handler>>& info) {
      std::string name = ErrorCases()[std::get<0>(info.param)].stage + "_" +
                         std::string(HandlerName(std::get<1>(info.param)));
      return name;
    });

// ------------------------------------------------------------------ Slice

TEST(SliceTest, StartStopStepLikeIslice) {
  EXPECT_EQ(RunKeys(Pipeline(VectorSource(Numbered(10))).Slice(2, 8, 3)), NumberedKeys(2, 8, 3));
  EXPECT_THAT(RunKeys(Pipeline(VectorSource(Numbered(10))).Slice(0, 5, 2)),
              ElementsAre("0", "2", "4"));
}

TEST(SliceTest, OpenEndedStop) {
  EXPECT_THAT(RunKeys(Pipeline(VectorSource(Numbered(10))).Slice(3, std::nullopt, 2)),
              ElementsAre("3", "5", "7", "9"));
}

TEST(SliceTest, StopPastEndYieldsTheRest) {
  EXPECT_EQ(RunKeys(Pipeline(VectorSource(Numbered(4))).Slice(1, 100)), NumberedKeys(1, 4));
}

// CPython's islice reads up to index stop - 1 and never further.
int ReadsForSlice(int64_t start, int64_t stop, int64_t step) {
  CountingSource source{.n = -1};
  std::unique_ptr<SampleStream> s = Pipeline(source.Factory()).Slice(start, stop, step).Open({});
  absl::StatusOr<std::vector<Sample>> out = Drain(*s);
  EXPECT_TRUE(out.ok());
  return *source.reads;
}

TEST(SliceTest, ReadsNoFurtherThanStopLikeIslice) {
  EXPECT_EQ(ReadsForSlice(0, 2, 1), 2);
  EXPECT_EQ(ReadsForSlice(0, 6, 4), 6);
  EXPECT_EQ(ReadsForSlice(2, 8, 3), 8);
  EXPECT_EQ(ReadsForSlice(0, 0, 1), 0);
  EXPECT_EQ(ReadsForSlice(3, 3, 1), 3);
}

TEST(SliceTest, InvalidArgumentsGiveInvalidArgumentStream) {
  const Pipeline p(VectorSource(Numbered(3)));
  for (const Pipeline& bad : {p.Slice(-1, 3), p.Slice(0, 3, 0), p.Slice(4, 3)}) {
    absl::StatusOr<std::vector<Sample>> out = RunAll(bad);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("slice: "));
  }
}

TEST(SliceTest, UpstreamErrorWhileSkippingPassesThrough) {
  absl::StatusOr<std::vector<Sample>> out =
      RunAll(Pipeline(FailingSource(2, absl::DataLossError("gone"))).Slice(5, 10));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
}

// ----------------------------------------------------------------- Repeat

// PassSource yields `n` samples per pass while ctx.pass < passes; each is
// keyed "<pass>:<i>".
StreamFactory PassSource(int n, int64_t passes = INT64_MAX) {
  return [n, passes](const WorkerContext& ctx) -> std::unique_ptr<SampleStream> {
    std::vector<Sample> samples;
    for (int i = 0; ctx.pass < passes && i < n; ++i) {
      samples.push_back(MakeSample(std::to_string(ctx.pass) + ":" + std::to_string(i)));
    }
    return VectorSource(std::move(samples))(ctx);
  };
}

TEST(RepeatTest, CountPassesWithIncrementingPass) {
  EXPECT_THAT(RunKeys(Pipeline(PassSource(2)).Repeat(3)),
              ElementsAre("0:0", "0:1", "1:0", "1:1", "2:0", "2:1"));
}

TEST(RepeatTest, ForeverKeepsGoing) {
  EXPECT_THAT(RunKeys(Pipeline(PassSource(2)).Repeat(std::nullopt).Slice(0, 5)),
              ElementsAre("0:0", "0:1", "1:0", "1:1", "2:0"));
}

TEST(RepeatTest, ForeverEndsWhenAPassIsEmpty) {
  EXPECT_THAT(RunKeys(Pipeline(PassSource(2, /*passes=*/2)).Repeat(std::nullopt)),
              ElementsAre("0:0", "0:1", "1:0", "1:1"));
}

TEST(RepeatTest, ZeroYieldsNothing) {
  EXPECT_TRUE(RunKeys(Pipeline(PassSource(2)).Repeat(0)).empty());
}

TEST(RepeatTest, NegativeCountIsInvalidArgument) {
  absl::StatusOr<std::vector<Sample>> out = RunAll(Pipeline(PassSource(2)).Repeat(-1));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RepeatTest, ShuffleBeforeRepeatReshufflesEachPass) {
  std::vector<std::string> keys =
      RunKeys(Pipeline(VectorSource(Numbered(50)), 3).Shuffle(50).Repeat(2));
  ASSERT_EQ(keys.size(), 100u);
  std::vector<std::string> first(keys.begin(), keys.begin() + 50);
  std::vector<std::string> second(keys.begin() + 50, keys.end());
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
}

}  // namespace
}  // namespace wds
