// Tests for shard lists: brace expansion (expected lists checked against the
// Python braceexpand package), "::" lists, node/worker splitting, per-epoch
// permutation and resampling.
#include <algorithm>
#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shards/shard_streams.h"
#include "shards/url_patterns.h"
#include "wds/internal/base/strings.h"
#include "wds/shards/shard_list.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Names = std::vector<std::string>;

Names Expand(std::string_view pattern) {
  absl::StatusOr<Names> names = ExpandBraces(pattern);
  EXPECT_TRUE(names.ok()) << pattern << ": " << names.status();
  return names.ok() ? *names : Names{};
}

// ExpectInvalid checks that `pattern` is rejected with a message that shows
// the pattern and contains `detail`.
void ExpectInvalid(std::string_view pattern, std::string_view detail) {
  absl::StatusOr<Names> names = ExpandBraces(pattern);
  ASSERT_FALSE(names.ok()) << pattern;
  EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ToStd(names.status().message()), HasSubstr(Cat("\"", pattern, "\"")));
  EXPECT_THAT(ToStd(names.status().message()), HasSubstr(detail));
}

Names Numbered(int n, std::string_view prefix = "") {
  Names out;
  for (int i = 0; i < n; ++i) out.push_back(Cat(prefix, i));
  return out;
}

absl::StatusOr<Names> DrainUrls(UrlStream& stream) {
  Names out;
  while (true) {
    absl::StatusOr<std::optional<ShardSlice>> slice = stream.Next();
    if (!slice.ok()) return slice.status();
    if (!slice->has_value()) return out;
    // Shard-granular streams read whole shards.
    EXPECT_EQ((*slice)->begin, 0);
    EXPECT_EQ((*slice)->end, -1);
    out.push_back((*slice)->url);
  }
}

WorkerContext Ctx(int rank, int world_size, int worker, int num_workers, int64_t epoch = 0,
                  uint64_t seed = 7) {
  WorkerContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  ctx.worker = worker;
  ctx.num_workers = num_workers;
  ctx.epoch = epoch;
  ctx.seed = seed;
  return ctx;
}

// --- Brace expansion -------------------------------------------------------

TEST(ExpandBracesTest, PlainTextIsItself) {
  EXPECT_THAT(Expand("data/train.tar"), ElementsAre("data/train.tar"));
  EXPECT_THAT(Expand(""), ElementsAre(""));
}

TEST(ExpandBracesTest, AlternativesInOrder) {
  EXPECT_THAT(Expand("a{b,c}d"), ElementsAre("abd", "acd"));
}

TEST(ExpandBracesTest, EmptyAlternatives) {
  EXPECT_THAT(Expand("a{,b}"), ElementsAre("a", "ab"));
  EXPECT_THAT(Expand("{a,,b}"), ElementsAre("a", "", "b"));
  EXPECT_THAT(Expand("{,}"), ElementsAre("", ""));
}

TEST(ExpandBracesTest, IntegerRange) {
  EXPECT_THAT(Expand("item{1..3}"), ElementsAre("item1", "item2", "item3"));
  EXPECT_THAT(Expand("{1..1}"), ElementsAre("1"));
}

TEST(ExpandBracesTest, ZeroPaddedRange) {
  EXPECT_THAT(Expand("{07..10}"), ElementsAre("07", "08", "09", "10"));
  Names names = Expand("x-{000..123}.tar");
  ASSERT_EQ(names.size(), 124u);
  EXPECT_EQ(names[0], "x-000.tar");
  EXPECT_EQ(names[57], "x-057.tar");
  EXPECT_EQ(names[123], "x-123.tar");
}

TEST(ExpandBracesTest, PaddingTakesWiderEndpoint) {
  EXPECT_THAT(Expand("{9..011}"), ElementsAre("009", "010", "011"));
  EXPECT_THAT(Expand("{00..-5}"), ElementsAre("00", "-1", "-2", "-3", "-4", "-5"));
}

TEST(ExpandBracesTest, LoneZeroDoesNotPad) {
  EXPECT_THAT(Expand("{0..3}"), ElementsAre("0", "1", "2", "3"));
  EXPECT_THAT(Expand("{-0..3}"), ElementsAre("0", "1", "2", "3"));
  EXPECT_THAT(Expand("{0..-0}"), ElementsAre("0"));
}

TEST(ExpandBracesTest, DescendingRange) {
  EXPECT_THAT(Expand("{3..1}"), ElementsAre("3", "2", "1"));
}

TEST(ExpandBracesTest, SteppedRange) {
  EXPECT_THAT(Expand("{0..10..5}"), ElementsAre("0", "5", "10"));
  EXPECT_THAT(Expand("{0..9..4}"), ElementsAre("0", "4", "8"));
  EXPECT_THAT(Expand("{10..0..3}"), ElementsAre("10", "7", "4", "1"));
}

TEST(ExpandBracesTest, StepSignIsIgnored) {
  EXPECT_THAT(Expand("{0..10..-5}"), ElementsAre("0", "5", "10"));
  EXPECT_THAT(Expand("{10..0..-5}"), ElementsAre("10", "5", "0"));
}

TEST(ExpandBracesTest, ZeroStepIsOne) {
  EXPECT_THAT(Expand("{1..3..0}"), ElementsAre("1", "2", "3"));
}

TEST(ExpandBracesTest, NegativeNumbers) {
  EXPECT_THAT(Expand("{2..-1}"), ElementsAre("2", "1", "0", "-1"));
  EXPECT_THAT(Expand("{-3..-1}"), ElementsAre("-3", "-2", "-1"));
}

TEST(ExpandBracesTest, PaddedNegativeRangeCountsTheSign) {
  EXPECT_THAT(Expand("{-05..3}"),
              ElementsAre("-05", "-04", "-03", "-02", "-01", "000", "001", "002", "003"));
}

TEST(ExpandBracesTest, CharacterRange) {
  EXPECT_THAT(Expand("{a..e}"), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(Expand("{B..A}"), ElementsAre("B", "A"));
}

TEST(ExpandBracesTest, SteppedCharacterRange) {
  EXPECT_THAT(Expand("{a..e..2}"), ElementsAre("a", "c", "e"));
  EXPECT_THAT(Expand("{e..a..2}"), ElementsAre("e", "c", "a"));
}

TEST(ExpandBracesTest, CharacterRangeRunsUpperThenLowerCase) {
  EXPECT_THAT(Expand("{Y..c}"), ElementsAre("Y", "Z", "a", "b", "c"));
  EXPECT_THAT(Expand("{c..Y}"), ElementsAre("c", "b", "a", "Z", "Y"));
  EXPECT_THAT(Expand("x{Y..b..2}"), ElementsAre("xY", "xa"));
}

TEST(ExpandBracesTest, NestedGroups) {
  EXPECT_THAT(Expand("{a,b{1..2}}"), ElementsAre("a", "b1", "b2"));
  EXPECT_THAT(Expand("python{2.{5..7},3.{2,3}}"),
              ElementsAre("python2.5", "python2.6", "python2.7", "python3.2", "python3.3"));
}

TEST(ExpandBracesTest, GroupsFormCartesianProductLeftSlowest) {
  EXPECT_THAT(Expand("{a,b}{1,2}x"), ElementsAre("a1x", "a2x", "b1x", "b2x"));
  EXPECT_THAT(Expand("{0..1}{a,b}{x,y}"),
              ElementsAre("0ax", "0ay", "0bx", "0by", "1ax", "1ay", "1bx", "1by"));
}

TEST(ExpandBracesTest, EscapedBracesAreLiteral) {
  EXPECT_THAT(Expand(R"(a\{b\})"), ElementsAre("a{b}"));
  EXPECT_THAT(Expand(R"({1\{2,3})"), ElementsAre("1{2", "3"));
}

TEST(ExpandBracesTest, EscapedCommaIsLiteral) {
  EXPECT_THAT(Expand(R"(a\,b)"), ElementsAre("a,b"));
  EXPECT_THAT(Expand(R"({a\,b,c})"), ElementsAre("a,b", "c"));
}

TEST(ExpandBracesTest, EscapedBackslashKeepsOne) {
  EXPECT_THAT(Expand(R"(x\\y)"), ElementsAre(R"(x\y)"));
  EXPECT_THAT(Expand(R"(x\)"), ElementsAre(R"(x\)"));
}

TEST(ExpandBracesTest, TextInsideGroupIsUnescapedOncePerLevel) {
  EXPECT_THAT(Expand(R"({a\\\\,b})"), ElementsAre(R"(a\)", "b"));
  EXPECT_THAT(Expand(R"({x\\})"), ElementsAre("{x}"));
}

TEST(ExpandBracesTest, GroupWithoutCommaOrRangeIsLiteral) {
  EXPECT_THAT(Expand("{x}"), ElementsAre("{x}"));
  EXPECT_THAT(Expand("a{}b"), ElementsAre("a{}b"));
  EXPECT_THAT(Expand("{1..}"), ElementsAre("{1..}"));
  EXPECT_THAT(Expand("{1..2..}"), ElementsAre("{1..2..}"));
  EXPECT_THAT(Expand("{a..1}"), ElementsAre("{a..1}"));
  EXPECT_THAT(Expand("{aa..b}"), ElementsAre("{aa..b}"));
}

TEST(ExpandBracesTest, LiteralGroupStillExpandsNestedGroups) {
  EXPECT_THAT(Expand("{a{1,2}}"), ElementsAre("{a1}", "{a2}"));
}

TEST(ExpandBracesTest, UnclosedBraceIsInvalidArgumentWithPosition) {
  ExpectInvalid("a{b", "'{' at position 1 is never closed");
  ExpectInvalid("{1{2,3}", "'{' at position 0 is never closed");
}

TEST(ExpandBracesTest, EscapedClosingBraceLeavesGroupOpen) {
  ExpectInvalid(R"(x{a\})", "'{' at position 1 is never closed");
}

// The reference lets a stray '}' pair with a later '{' ("ab}{" is literal
// text there); a stray '}' is always an error here.
TEST(ExpandBracesTest, StrayClosingBraceIsInvalidArgumentWithPosition) {
  ExpectInvalid("a}b", "'}' at position 1 has no matching '{'");
  ExpectInvalid("{a}}", "'}' at position 3 has no matching '{'");
  ExpectInvalid("ab}{", "'}' at position 2 has no matching '{'");
}

TEST(ExpandBracesTest, DeepNestingIsInvalidArgument) {
  const std::string deep = std::string(101, '{') + std::string(101, '}');
  ExpectInvalid(deep, "'{' at position 100 nests deeper than 100 levels");
  const std::string ok = std::string(100, '{') + "a,b" + std::string(100, '}');
  EXPECT_THAT(Expand(ok), ElementsAre(std::string(99, '{') + "a" + std::string(99, '}'),
                                      std::string(99, '{') + "b" + std::string(99, '}')));
}

TEST(ExpandBracesTest, RangeEndpointBeyond64BitsIsInvalidArgument) {
  ExpectInvalid("{0..99999999999999999999}", "99999999999999999999 does not fit in 64 bits");
}

TEST(ExpandBracesTest, HugeExpansionIsInvalidArgument) {
  ExpectInvalid("{0..99999999}", "expands to more than 4194304 names");
  ExpectInvalid("{0..9999}{0..9999}", "expands to more than 4194304 names");
}

TEST(ExpandBracesTest, PaddingOfAnyWidthIsKept) {
  // Names as wide as the wider endpoint, the sign first, as Python's
  // "{:0{width}d}" pads them: here 71 and 72 characters.
  const std::string zeros(70, '0');
  EXPECT_THAT(Expand("{" + zeros + "8..10}"),
              ElementsAre(zeros + "8", zeros + "9", std::string(69, '0') + "10"));
  EXPECT_THAT(Expand("{-" + zeros + "1..1}"),
              ElementsAre("-" + zeros + "1", std::string(72, '0'), std::string(71, '0') + "1"));
}

TEST(ExpandBracesTest, ExpansionToTooManyBytesIsRefusedBeforeItIsMade) {
  // 2^20 names padded to 300 characters: 300 MiB.
  ExpectInvalid("{" + std::string(299, '0') + "0..1048575}",
                "expands to more than 134217728 bytes of names");
  // 2^20 names are allowed, but not 2^20 copies of a 1 KiB literal (1 GiB).
  const std::string blob(1024, 'x');
  ExpectInvalid("{0..1048575}" + blob, "expands to more than 134217728 bytes of names");
  ExpectInvalid(blob + "{0..1048575}", "expands to more than 134217728 bytes of names");
  ExpectInvalid("{" + blob + "a," + blob + "b}{0..262143}",
                "expands to more than 134217728 bytes of names");
  EXPECT_EQ(Expand("{0..262143}" + std::string(100, 'x')).size(), 262144u);
}

// --- "::" lists ------------------------------------------------------------

TEST(ExpandUrlsTest, SplitsOnDoubleColonThenExpandsEachPart) {
  absl::StatusOr<Names> urls = ExpandUrls("a/train-{000..002}.tar::b/extra.tar::c{1,2}");
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre("a/train-000.tar", "a/train-001.tar", "a/train-002.tar",
                                 "b/extra.tar", "c1", "c2"));
}

TEST(ExpandUrlsTest, TheLimitsBoundTheWholeList) {
  // Each part is within the limit on bytes; together they are not.
  const std::string part = "{0..65535}" + std::string(1024, 'x');  // 64 MiB and a little
  absl::StatusOr<Names> urls = ExpandUrls(part + "::" + part);
  EXPECT_EQ(urls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(urls.status().message()),
              HasSubstr("expands to more than 134217728 bytes of names"));
}

TEST(ExpandUrlsTest, OtherLimitsBoundTheSameWay) {
  const ExpansionLimits small{.names = 8, .bytes = 20};
  absl::StatusOr<Names> urls = ExpandUrls("a{0..7}", small);
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_EQ(urls->size(), 8u);
  EXPECT_THAT(std::string(ExpandUrls("a{0..8}", small).status().message()),
              HasSubstr("expands to more than 8 names"));
  EXPECT_THAT(std::string(ExpandUrls("a{0..4}::b{0..4}", small).status().message()),
              HasSubstr("shard list \"a{0..4}::b{0..4}\": it expands to more than 8 names"));
  EXPECT_THAT(std::string(ExpandUrls("abc{0..7}", small).status().message()),
              HasSubstr("expands to more than 20 bytes of names"));
  EXPECT_THAT(std::string(ExpandUrls("{000000..3}", small).status().message()),
              HasSubstr("expands to more than 20 bytes of names"));
}

TEST(ExpandUrlsTest, SingleColonIsNotASeparator) {
  absl::StatusOr<Names> urls = ExpandUrls("pipe:cat a{1,2}::a:::b");
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre("pipe:cat a1", "pipe:cat a2", "a", ":b"));
}

TEST(ExpandUrlsTest, EmptyPartIsInvalidArgument) {
  for (auto [urls, position] :
       std::map<std::string, int>{{"", 0}, {"a::::b", 3}, {"a::", 3}, {"::a", 0}}) {
    absl::StatusOr<Names> result = ExpandUrls(urls);
    ASSERT_FALSE(result.ok()) << urls;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ToStd(result.status().message()),
                HasSubstr(Cat("\"", urls, "\" has an empty URL at position ", position)));
  }
}

TEST(ExpandUrlsTest, EmptyExpandedUrlIsInvalidArgument) {
  absl::StatusOr<Names> urls = ExpandUrls("a.tar::{,x}");
  ASSERT_FALSE(urls.ok());
  EXPECT_EQ(urls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ToStd(urls.status().message()), HasSubstr("\"{,x}\" yields an empty URL"));
}

TEST(ExpandUrlsTest, EmptyAlternativeWithPrefixIsFine) {
  absl::StatusOr<Names> urls = ExpandUrls("x{,.gz}");
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre("x", "x.gz"));
}

TEST(ExpandUrlsTest, BadPatternInOnePartNamesThatPart) {
  absl::StatusOr<Names> urls = ExpandUrls("ok.tar::bad{1.tar");
  ASSERT_FALSE(urls.ok());
  EXPECT_EQ(urls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ToStd(urls.status().message()),
              HasSubstr("\"bad{1.tar\": unbalanced braces: '{' at position 3 is never closed"));
}

// --- Splitting -------------------------------------------------------------

TEST(SplitTest, SplitByNodeIsStridedSlice) {
  Names shards = Numbered(10);
  EXPECT_THAT(SplitByNode(shards, Ctx(0, 3, 0, 1)), ElementsAre("0", "3", "6", "9"));
  EXPECT_THAT(SplitByNode(shards, Ctx(1, 3, 0, 1)), ElementsAre("1", "4", "7"));
  EXPECT_THAT(SplitByNode(shards, Ctx(2, 3, 0, 1)), ElementsAre("2", "5", "8"));
}

TEST(SplitTest, SplitByNodeIgnoresWorker) {
  EXPECT_THAT(SplitByNode(Numbered(4), Ctx(1, 2, 1, 4)), ElementsAre("1", "3"));
}

TEST(SplitTest, SplitByWorkerIsStridedSlice) {
  Names shards = Numbered(7);
  EXPECT_THAT(SplitByWorker(shards, Ctx(0, 1, 0, 2)), ElementsAre("0", "2", "4", "6"));
  EXPECT_THAT(SplitByWorker(shards, Ctx(5, 9, 1, 2)), ElementsAre("1", "3", "5"));
}

TEST(SplitTest, SingleRankKeepsEverything) {
  EXPECT_THAT(SplitByNode(Numbered(3), Ctx(0, 1, 0, 1)), ElementsAre("0", "1", "2"));
}

TEST(SplitTest, MoreRanksThanShardsLeavesSomeEmpty) {
  Names shards = Numbered(2);
  EXPECT_THAT(SplitByNode(shards, Ctx(1, 4, 0, 1)), ElementsAre("1"));
  EXPECT_THAT(SplitByNode(shards, Ctx(3, 4, 0, 1)), ElementsAre());
  EXPECT_THAT(SplitByWorker(shards, Ctx(0, 1, 2, 3)), ElementsAre());
}

// --- Permutation -----------------------------------------------------------

TEST(PermuteShardsTest, SameSeedAndEpochGiveSamePermutation) {
  const Names expected = {"15", "5",  "3", "0",  "7",  "11", "2", "13", "17", "4",
                          "6",  "10", "1", "19", "16", "9",  "8", "12", "18", "14"};
  EXPECT_THAT(PermuteShards(Numbered(20), 7, 0, 0), ElementsAreArray(expected));
  EXPECT_THAT(PermuteShards(Numbered(20), 7, 0, 0), ElementsAreArray(expected));
}

TEST(PermuteShardsTest, NewEpochGivesNewPermutation) {
  EXPECT_THAT(PermuteShards(Numbered(20), 7, 1, 0),
              ElementsAre("13", "9", "10", "17", "0", "8", "2", "11", "7", "1", "16", "4", "3",
                          "18", "12", "6", "5", "14", "15", "19"));
}

TEST(PermuteShardsTest, NewPassGivesNewPermutation) {
  EXPECT_THAT(PermuteShards(Numbered(20), 7, 0, 1),
              ElementsAre("19", "10", "0", "2", "17", "3", "11", "4", "6", "16", "9", "18", "13",
                          "8", "5", "12", "15", "7", "1", "14"));
}

TEST(PermuteShardsTest, NewSeedGivesNewPermutation) {
  EXPECT_NE(PermuteShards(Numbered(20), 8, 0, 0), PermuteShards(Numbered(20), 7, 0, 0));
}

TEST(PermuteShardsTest, EmptyAndSingleListsAreUnchanged) {
  EXPECT_THAT(PermuteShards({}, 7, 0, 0), ElementsAre());
  EXPECT_THAT(PermuteShards({"a"}, 7, 3, 1), ElementsAre("a"));
}

// --- ShardsForWorker -------------------------------------------------------

TEST(ShardsForWorkerTest, WithoutShuffleSplitsNodeThenWorker) {
  // Rank 1 of 3 gets 1 4 7 10 13 16 19; worker 1 of 2 keeps every other one.
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(20), {}, Ctx(1, 3, 1, 2));
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre("4", "10", "16"));
}

TEST(ShardsForWorkerTest, ShuffleSplitsThePermutation) {
  ShardListOptions options;
  options.shuffle = true;
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(20), options, Ctx(1, 3, 1, 2, 1));
  ASSERT_TRUE(shards.ok()) << shards.status();
  // Epoch 1's permutation (above), taken [1::3] then [1::2].
  EXPECT_THAT(*shards, ElementsAre("0", "16", "5"));
}

TEST(ShardsForWorkerTest, EveryShardOnceAcrossRanksAndWorkersEachEpoch) {
  const Names all = Numbered(20, "s");
  ShardListOptions options;
  options.shuffle = true;
  std::set<Names> first_worker_lists;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    std::multiset<std::string> seen;
    for (int rank = 0; rank < 3; ++rank) {
      for (int worker = 0; worker < 2; ++worker) {
        absl::StatusOr<Names> shards =
            ShardsForWorker(all, options, Ctx(rank, 3, worker, 2, epoch));
        ASSERT_TRUE(shards.ok()) << shards.status();
        seen.insert(shards->begin(), shards->end());
        if (rank == 0 && worker == 0) first_worker_lists.insert(*shards);
      }
    }
    EXPECT_EQ(seen, std::multiset<std::string>(all.begin(), all.end())) << "epoch " << epoch;
  }
  EXPECT_EQ(first_worker_lists.size(), 5u);
}

TEST(ShardsForWorkerTest, CannotFeedNamesCountsOfBothLevels) {
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(8), {}, Ctx(1, 4, 3, 4));
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ToStd(shards.status().message()),
              HasSubstr("8 shards cannot feed 4 ranks x 4 workers: rank 1 worker 3 has none"));
}

TEST(ShardsForWorkerTest, CannotFeedWithOnlyNodeSplit) {
  ShardListOptions options;
  options.workersplitter = nullptr;
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(2), options, Ctx(3, 4, 1, 2));
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ToStd(shards.status().message()),
              HasSubstr("2 shards cannot feed 4 ranks: rank 3 has none"));
}

TEST(ShardsForWorkerTest, CannotFeedWithOnlyWorkerSplit) {
  ShardListOptions options;
  options.nodesplitter = nullptr;
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(1), options, Ctx(3, 4, 1, 2));
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ToStd(shards.status().message()),
              HasSubstr("1 shard cannot feed 2 workers: worker 1 has none"));
}

TEST(ShardsForWorkerTest, EmptyListWithoutSplitters) {
  ShardListOptions options;
  options.nodesplitter = nullptr;
  options.workersplitter = nullptr;
  absl::StatusOr<Names> shards = ShardsForWorker({}, options, Ctx(0, 1, 0, 1));
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ToStd(shards.status().message()), HasSubstr("0 shards: rank 0 worker 0 has none"));
}

TEST(ShardsForWorkerTest, NullSplittersKeepTheWholeList) {
  ShardListOptions options;
  options.nodesplitter = nullptr;
  options.workersplitter = nullptr;
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(3), options, Ctx(2, 3, 1, 2));
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre("0", "1", "2"));
}

TEST(ShardsForWorkerTest, CustomSplitterIsUsed) {
  ShardListOptions options;
  options.nodesplitter = [](Names shards, const WorkerContext& ctx) {
    return Names{shards[shards.size() - 1 - ctx.rank]};
  };
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(5), options, Ctx(1, 2, 0, 1));
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre("3"));
}

TEST(ShardsForWorkerTest, AllowEmptyGivesEmptyList) {
  ShardListOptions options;
  options.allow_empty = true;
  absl::StatusOr<Names> shards = ShardsForWorker(Numbered(8), options, Ctx(1, 4, 3, 4));
  ASSERT_TRUE(shards.ok()) << shards.status();
  EXPECT_THAT(*shards, ElementsAre());
}

// --- Streams ---------------------------------------------------------------

TEST(ShardsForWorkerTest, ContextThatIsNoPlacementIsInvalidArgument) {
  for (const WorkerContext& ctx :
       {Ctx(0, 1, 0, 0), Ctx(0, 0, 0, 1), Ctx(2, 2, 0, 1), Ctx(0, 1, 3, 3), Ctx(-1, 2, 0, 1)}) {
    absl::StatusOr<std::vector<std::string>> list = ShardsForWorker(Numbered(4), {}, ctx);
    EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(list.status().message()), HasSubstr("is not a placement"));
  }
  EXPECT_THAT(SplitByWorker(Numbered(4), Ctx(0, 1, 0, 0)), ElementsAre());
}

TEST(ShardStreamTest, YieldsWorkerListThenEndsStickily) {
  std::unique_ptr<UrlStream> stream = ShardStream(Numbered(6), {}, Ctx(0, 2, 1, 2));
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre("2"));
  absl::StatusOr<std::optional<ShardSlice>> after = stream->Next();
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
}

TEST(ShardStreamTest, AllowEmptyGivesEmptyStream) {
  ShardListOptions options;
  options.allow_empty = true;
  std::unique_ptr<UrlStream> stream = ShardStream(Numbered(8), options, Ctx(1, 4, 3, 4));
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre());
}

TEST(ShardStreamTest, CannotFeedErrorIsSticky) {
  std::unique_ptr<UrlStream> stream = ShardStream(Numbered(8), {}, Ctx(1, 4, 3, 4));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::optional<ShardSlice>> url = stream->Next();
    ASSERT_FALSE(url.ok());
    EXPECT_EQ(url.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(ToStd(url.status().message()),
                HasSubstr("8 shards cannot feed 4 ranks x 4 workers"));
  }
}

TEST(ResampledShardStreamTest, CountLimitsDrawsThenEndsStickily) {
  std::unique_ptr<UrlStream> stream = ResampledShardStream(Numbered(3), 5, Ctx(0, 1, 0, 1));
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_EQ(urls->size(), 5u);
  for (const std::string& url : *urls) EXPECT_THAT(url, ::testing::AnyOf("0", "1", "2"));
  absl::StatusOr<std::optional<ShardSlice>> after = stream->Next();
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value());
}

TEST(ResampledShardStreamTest, ZeroCountIsEmpty) {
  std::unique_ptr<UrlStream> stream = ResampledShardStream(Numbered(3), 0, Ctx(0, 1, 0, 1));
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  ASSERT_TRUE(urls.ok()) << urls.status();
  EXPECT_THAT(*urls, ElementsAre());
}

TEST(ResampledShardStreamTest, EndlessDrawsWithReplacementFromWholeList) {
  std::unique_ptr<UrlStream> stream =
      ResampledShardStream(Numbered(4), std::nullopt, Ctx(0, 1, 0, 1));
  std::map<std::string, int> counts;
  for (int i = 0; i < 4000; ++i) {
    absl::StatusOr<std::optional<ShardSlice>> url = stream->Next();
    ASSERT_TRUE(url.ok() && url->has_value()) << i;
    ++counts[(*url)->url];
  }
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [url, n] : counts) EXPECT_GT(n, 800) << url;
}

Names Draw(int count, const WorkerContext& ctx) {
  std::unique_ptr<UrlStream> stream = ResampledShardStream(Numbered(50), count, ctx);
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  EXPECT_TRUE(urls.ok()) << urls.status();
  return urls.ok() ? *urls : Names{};
}

TEST(ResampledShardStreamTest, SameContextGivesSameDraws) {
  EXPECT_EQ(Draw(30, Ctx(1, 2, 1, 2, 3)), Draw(30, Ctx(1, 2, 1, 2, 3)));
}

TEST(ResampledShardStreamTest, WorkersRanksEpochsAndSeedsDrawDifferently) {
  const Names base = Draw(30, Ctx(0, 2, 0, 2, 0, 7));
  EXPECT_NE(Draw(30, Ctx(0, 2, 1, 2, 0, 7)), base);
  EXPECT_NE(Draw(30, Ctx(1, 2, 0, 2, 0, 7)), base);
  EXPECT_NE(Draw(30, Ctx(0, 2, 0, 2, 1, 7)), base);
  EXPECT_NE(Draw(30, Ctx(0, 2, 0, 2, 0, 8)), base);
  WorkerContext next_pass = Ctx(0, 2, 0, 2, 0, 7);
  next_pass.pass = 1;
  EXPECT_NE(Draw(30, next_pass), base);
}

// Weights 0, 1, 3 and 4 (of 8): shard 0 is never drawn, the others in
// proportion (16,000 draws: within 3% of their share, 12 standard deviations
// of a binomial at most); the draws repeat for a context.
TEST(ResampledShardStreamTest, WeightsDrawShardsInProportion) {
  const std::vector<double> weights = {0, 1, 3, 4};
  std::unique_ptr<UrlStream> stream =
      ResampledShardStream(Numbered(4), 16000, Ctx(0, 1, 0, 1), weights);
  absl::StatusOr<Names> urls = DrainUrls(*stream);
  ASSERT_TRUE(urls.ok()) << urls.status();
  std::map<std::string, int> counts;
  for (const std::string& url : *urls) ++counts[url];
  const Names names = Numbered(4);
  EXPECT_EQ(counts.count(names[0]), 0u);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_NEAR(counts[names[i]] / 16000.0, weights[i] / 8, 0.03) << names[i];
  }
  std::unique_ptr<UrlStream> again =
      ResampledShardStream(Numbered(4), 16000, Ctx(0, 1, 0, 1), weights);
  EXPECT_EQ(DrainUrls(*again).value(), *urls);
}

TEST(ResampledShardStreamTest, ShardDrawsAreTheResampledStreamsDraws) {
  for (const std::vector<double>& weights : {std::vector<double>{}, std::vector<double>{1, 0, 2}}) {
    std::unique_ptr<UrlStream> stream =
        ResampledShardStream(Numbered(3), 25, Ctx(1, 2, 0, 2, 4, 9), weights);
    ShardDraws draws(Numbered(3), Ctx(1, 2, 0, 2, 4, 9), weights);
    Names drawn;
    for (int i = 0; i < 25; ++i) drawn.push_back(draws.Next());
    EXPECT_EQ(drawn, DrainUrls(*stream).value());
  }
}

TEST(ResampledShardStreamTest, ShardWeightsAreCheckedNamingTheProblem) {
  EXPECT_TRUE(CheckShardWeights({0, 2.5}, 2).ok());
  EXPECT_EQ(CheckShardWeights({1, 2}, 3),
            absl::InvalidArgumentError("shard weights: 2 weights for 3 shards"));
  EXPECT_EQ(CheckShardWeights({1, -1}, 2),
            absl::InvalidArgumentError("shard weights: weight 1 is -1 (finite, >= 0 needed)"));
  EXPECT_EQ(CheckShardWeights({std::nan(""), 1}, 2),
            absl::InvalidArgumentError("shard weights: weight 0 is nan (finite, >= 0 needed)"));
  EXPECT_EQ(CheckShardWeights({0, 0}, 2),
            absl::InvalidArgumentError(
                "shard weights: their sum is 0 (some weight must be > 0, the sum finite)"));
  EXPECT_EQ(CheckShardWeights({1.7e308, 1.7e308}, 2),
            absl::InvalidArgumentError(
                "shard weights: their sum is inf (some weight must be > 0, the sum finite)"));
}

TEST(ResampledShardStreamTest, EmptyListIsFailedPrecondition) {
  std::unique_ptr<UrlStream> stream = ResampledShardStream({}, std::nullopt, Ctx(0, 1, 0, 1));
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::optional<ShardSlice>> url = stream->Next();
    ASSERT_FALSE(url.ok());
    EXPECT_EQ(url.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(ToStd(url.status().message()), HasSubstr("empty shard list"));
  }
}

}  // namespace
}  // namespace wds
