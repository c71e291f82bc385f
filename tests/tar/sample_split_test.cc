// Sample-granular splitting: the slice arithmetic, tar reading from a member
// offset, and the pipeline giving every rank and worker an equal, disjoint
// share of the samples.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/index_lookup.h"
#include "util/test_util.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/loader/equalize.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_index.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::Compression;
using testing::MakeTar;
using testing::TarEntry;
using testing::TarFormat;
using testing::TempDir;

// The example: 7 shards of 5 to 610 samples, one of them empty.
const std::vector<std::string> kShards = {"s0", "s1", "s2", "s3", "s4", "s5", "s6"};
const std::vector<int64_t> kCounts = {5, 610, 12, 0, 300, 58, 400};  // 1385

std::vector<ShardSlice> Slices(const std::vector<std::string>& shards,
                               const std::vector<int64_t>& counts, int rank, int world, int worker,
                               int workers, ShardListOptions options = {}, int64_t epoch = 0) {
  WorkerContext ctx{.rank = rank,
                    .world_size = world,
                    .worker = worker,
                    .num_workers = workers,
                    .epoch = epoch,
                    .seed = 7};
  return SlicesForWorker(shards, counts, options, ctx).value();
}

int64_t SamplesIn(const std::vector<ShardSlice>& slices) {
  int64_t n = 0;
  for (const ShardSlice& s : slices) n += s.end - s.begin;
  return n;
}

TEST(SlicesForWorkerTest, TwoRanksSplitInsideAShard) {
  const std::vector<std::string> shards = {"a", "b", "c"};
  const std::vector<int64_t> counts = {3, 5, 2};
  EXPECT_THAT(Slices(shards, counts, 0, 2, 0, 1),
              ElementsAre(ShardSlice{"a", 0, 3}, ShardSlice{"b", 0, 2}));
  EXPECT_THAT(Slices(shards, counts, 1, 2, 0, 1),
              ElementsAre(ShardSlice{"b", 2, 5}, ShardSlice{"c", 0, 2}));
}

TEST(SlicesForWorkerTest, WorkersSplitTheirRanksShare) {
  const std::vector<std::string> shards = {"a", "b", "c"};
  const std::vector<int64_t> counts = {3, 5, 2};
  // Rank 1 holds samples [5, 10): b[2, 5) and c[0, 2).
  EXPECT_THAT(Slices(shards, counts, 1, 2, 0, 2), ElementsAre(ShardSlice{"b", 2, 4}));
  EXPECT_THAT(Slices(shards, counts, 1, 2, 1, 2),
              ElementsAre(ShardSlice{"b", 4, 5}, ShardSlice{"c", 0, 2}));
}

TEST(SlicesForWorkerTest, EveryPlacementIsDisjointCompleteAndEqual) {
  const int64_t total = 1385;
  for (bool shuffle : {false, true}) {
    for (int64_t epoch : {0, 1}) {
      for (int world = 1; world <= 4; ++world) {
        for (int workers = 1; workers <= 3; ++workers) {
          SCOPED_TRACE(absl::StrCat("shuffle ", int{shuffle}, " epoch ", epoch, " ranks ", world,
                                    " workers ", workers));
          std::map<std::pair<std::string, int64_t>, int> seen;
          for (int rank = 0; rank < world; ++rank) {
            int64_t rank_samples = 0;
            std::vector<int64_t> worker_samples;
            for (int w = 0; w < workers; ++w) {
              std::vector<ShardSlice> slices =
                  Slices(kShards, kCounts, rank, world, w, workers, {.shuffle = shuffle}, epoch);
              for (const ShardSlice& s : slices) {
                const size_t i = std::find(kShards.begin(), kShards.end(), s.url) - kShards.begin();
                ASSERT_LT(i, kShards.size());
                ASSERT_LE(0, s.begin);
                ASSERT_LT(s.begin, s.end);  // never an empty slice (s3 holds nothing)
                ASSERT_LE(s.end, kCounts[i]);
                for (int64_t k = s.begin; k < s.end; ++k) ++seen[{s.url, k}];
              }
              worker_samples.push_back(SamplesIn(slices));
              rank_samples += worker_samples.back();
            }
            EXPECT_GE(rank_samples, total / world);
            EXPECT_LE(rank_samples, (total + world - 1) / world);
            const auto [low, high] =
                std::minmax_element(worker_samples.begin(), worker_samples.end());
            EXPECT_LE(*high - *low, 1);
          }
          EXPECT_EQ(static_cast<int64_t>(seen.size()), total);
          for (const auto& [sample, times] : seen) ASSERT_EQ(times, 1) << sample.first;
        }
      }
    }
  }
}

TEST(SlicesForWorkerTest, SameSeedRepeatsAndEpochsDiffer) {
  ShardListOptions shuffled{.shuffle = true};
  EXPECT_EQ(Slices(kShards, kCounts, 1, 3, 0, 1, shuffled, 0),
            Slices(kShards, kCounts, 1, 3, 0, 1, shuffled, 0));
  EXPECT_NE(Slices(kShards, kCounts, 1, 3, 0, 1, shuffled, 0),
            Slices(kShards, kCounts, 1, 3, 0, 1, shuffled, 1));
}

TEST(SlicesForWorkerTest, OneShardFeedsEveryRankAndWorker) {
  for (int rank = 0; rank < 2; ++rank) {
    for (int w = 0; w < 3; ++w) {
      std::vector<ShardSlice> slices = Slices({"only"}, {12}, rank, 2, w, 3);
      ASSERT_EQ(slices.size(), 1u);
      EXPECT_EQ(slices[0].end - slices[0].begin, 2);
      EXPECT_EQ(slices[0].begin, rank * 6 + w * 2);
    }
  }
}

TEST(SlicesForWorkerTest, FewerSamplesThanWorkersIsFailedPrecondition) {
  WorkerContext ctx{.rank = 0, .world_size = 2, .worker = 0, .num_workers = 2};
  absl::StatusOr<std::vector<ShardSlice>> slices =
      SlicesForWorker({"a", "b", "c"}, {1, 1, 1}, {}, ctx);
  EXPECT_EQ(slices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(slices.status().message()),
            "3 samples in 3 shards cannot feed 2 ranks x 2 workers: rank 0 worker 0 has none "
            "(allow_empty permits this)");
  absl::StatusOr<std::vector<ShardSlice>> allowed =
      SlicesForWorker({"a", "b", "c"}, {1, 1, 1}, {.allow_empty = true}, ctx);
  ASSERT_TRUE(allowed.ok());
  EXPECT_TRUE(allowed->empty());
}

TEST(SlicesForWorkerTest, NullSplittersLeaveThatLevelWhole) {
  const std::vector<std::string> shards = {"a", "b"};
  const std::vector<int64_t> counts = {3, 5};
  ShardListOptions no_node{.nodesplitter = nullptr};
  EXPECT_THAT(Slices(shards, counts, 1, 2, 0, 1, no_node),
              ElementsAre(ShardSlice{"a", 0, 3}, ShardSlice{"b", 0, 5}));
  ShardListOptions no_worker{.workersplitter = nullptr};
  EXPECT_THAT(Slices(shards, counts, 1, 2, 1, 2, no_worker), ElementsAre(ShardSlice{"b", 1, 5}));
}

TEST(SlicesForWorkerTest, BadCountsAndPlacementsAreInvalidArgument) {
  WorkerContext ctx{.rank = 0, .world_size = 1, .worker = 0, .num_workers = 1};
  absl::StatusOr<std::vector<ShardSlice>> short_counts = SlicesForWorker({"a", "b"}, {1}, {}, ctx);
  EXPECT_EQ(short_counts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(short_counts.status().message()),
            "shard list: 1 sample counts for 2 shards");
  absl::StatusOr<std::vector<ShardSlice>> negative = SlicesForWorker({"a"}, {-1}, {}, ctx);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("a has a negative sample count"));
  ctx.rank = 1;
  EXPECT_EQ(SlicesForWorker({"a"}, {1}, {}, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The example planned for equalized epochs: 3 ranks, batch 32, drop.
// Shard-granular, rank 1 holds 310 samples and rank 2 only 470; sample-granular
// every rank holds 461 or 462 and runs the same 14 full batches.
TEST(SampleSplitPlanTest, EqualStepsOnEveryRank) {
  ShardSampleCounts counts;
  for (size_t i = 0; i < kShards.size(); ++i) counts.Set(kShards[i], kCounts[i]);
  for (int rank = 0; rank < 3; ++rank) {
    WorkerContext ctx{.rank = rank, .world_size = 3, .num_workers = 2};
    RankEpochPlan plan = PlanRankEpoch(kShards, {.split = SplitGranularity::kSamples}, ctx,
                                       {.batch_size = 32, .partial = false}, counts)
                             .value();
    EXPECT_EQ(plan.samples(), rank == 0 ? 461 : 462);
    ASSERT_EQ(plan.workers.size(), 2u);
    EXPECT_EQ(plan.workers[0].samples, rank == 0 ? 230 : 231);
    EXPECT_EQ(plan.LocalSteps(EqualizePolicy::kDrop), 14);
  }
}

// A tar of `samples` samples "k<i>" with members .txt and .cls; sample 2's
// key is long enough to need a pax or GNU long-name header, and a directory
// entry sits between samples 3 and 4.
std::string SampleTar(int samples, TarFormat format, Compression compression) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < samples; ++i) {
    const std::string key = i == 2 ? "dir/" + std::string(150, 'x') : "k" + std::to_string(i);
    entries.push_back({key + ".txt", std::string(100 + 300 * i, 'a' + i)});
    entries.push_back({key + ".cls", std::to_string(i)});
    if (i == 3) entries.push_back({"somedir", "", 'd'});
  }
  return MakeTar(entries, format, compression);
}

std::vector<std::string> MemberNames(std::unique_ptr<ByteStream> stream, int64_t start,
                                     std::vector<int64_t>* data_offsets) {
  std::unique_ptr<TarReader> reader =
      TarReader::Open(std::move(stream), {.start_offset = start}).value();
  std::vector<std::string> names;
  while (true) {
    absl::StatusOr<std::optional<TarMember>> m = reader->Next();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok() || !m->has_value()) break;
    names.push_back((*m)->name);
    data_offsets->push_back((*m)->data_offset);
  }
  return names;
}

TEST(TarStartOffsetTest, StartsAtEverySampleOfPlainGzipAndZstdTars) {
  TempDir dir;
  for (Compression compression : {Compression::kNone, Compression::kGzip, Compression::kZstd}) {
    for (TarFormat format : {TarFormat::kPax, TarFormat::kGnu, TarFormat::kUstar}) {
      if (format == TarFormat::kUstar) continue;  // ustar cannot hold the long name
      const std::string tar = SampleTar(6, format, compression);
      const std::string path = dir.Write("t.tar", tar);
      ShardIndex index = ScanStream(MemoryStream("mem://t", tar)).value();
      ASSERT_EQ(index.samples.size(), 6u);
      const std::vector<int64_t> starts = SampleStartOffsets(index);
      for (size_t k = 0; k < starts.size(); ++k) {
        SCOPED_TRACE(absl::StrCat("compression ", static_cast<int>(compression), " format ",
                                  static_cast<int>(format), " sample ", k));
        std::vector<std::string> expected;
        std::vector<int64_t> expected_offsets;
        for (size_t j = k; j < index.samples.size(); ++j) {
          for (const IndexMember& m : index.samples[j].members) {
            expected.push_back(m.name);
            expected_offsets.push_back(m.offset);
          }
        }
        // From memory (read to the offset) and from a file (seeked there).
        std::vector<int64_t> offsets;
        EXPECT_EQ(MemberNames(MemoryStream("mem://t", tar), starts[k], &offsets), expected);
        EXPECT_EQ(offsets, expected_offsets);  // offsets still count from the tar's start
        offsets.clear();
        EXPECT_EQ(MemberNames(OpenUrl(path).value(), starts[k], &offsets), expected);
        EXPECT_EQ(offsets, expected_offsets);
      }
    }
  }
}

// Past the reader's first read (1 MiB), a file is seeked, not read.
TEST(TarStartOffsetTest, SeeksFarIntoALargeFile) {
  TempDir dir;
  std::vector<TarEntry> entries;
  for (int i = 0; i < 12; ++i) {
    entries.push_back({"k" + std::to_string(i) + ".bin", std::string(300000 + i, 'a' + i)});
  }
  const std::string tar = MakeTar(entries);
  const std::string path = dir.Write("big.tar", tar);
  ShardIndex index = ScanShard(path).value();
  const std::vector<int64_t> starts = SampleStartOffsets(index);
  ASSERT_GT(starts[10], int64_t{2} << 20);
  std::unique_ptr<TarReader> reader =
      TarReader::Open(OpenUrl(path).value(), {.start_offset = starts[10]}).value();
  for (int i : {10, 11}) {
    absl::StatusOr<std::optional<TarMember>> m = reader->Next();
    ASSERT_TRUE(m.ok() && m->has_value()) << m.status();
    EXPECT_EQ((*m)->name, "k" + std::to_string(i) + ".bin");
    EXPECT_EQ((*m)->data_offset, index.samples[i].members[0].offset);
    EXPECT_EQ((*m)->data.size(), 300000u + i);
    EXPECT_EQ(static_cast<char>((*m)->data.data()[299999]), 'a' + i);
  }
  absl::StatusOr<std::optional<TarMember>> end = reader->Next();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_FALSE(end->has_value());
}

// libarchive checks the number fields of an archive's first header more
// strictly than those of later ones: a uid field with a NUL before its last
// digits ("0000\0000", as in an input tar_fuzz found) reads as 0 in sequence
// but fails the check of a first header. A read started at that header still
// gives what a full read gives from there, in every compression.
TEST(TarStartOffsetTest, AHeaderThatOnlyAFullReadWouldAcceptStillStartsARead) {
  for (Compression compression : {Compression::kNone, Compression::kGzip, Compression::kZstd}) {
    std::string tar = MakeTar({{"a.txt", "A"}, {"b.txt", "B"}, {"b.cls", "1"}});
    ShardIndex index = ScanStream(MemoryStream("mem://t", tar)).value();
    const int64_t start = SampleStartOffsets(index).at(1);
    const size_t header = static_cast<size_t>(start);
    tar.replace(header + 108, 8, std::string("0000") + '\0' + "000");  // the uid field
    // The checksum: the header's bytes summed with its own field as spaces.
    tar.replace(header + 148, 8, std::string(8, ' '));
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[header + i]);
    char checksum[8];
    std::snprintf(checksum, sizeof(checksum), "%06o", sum);
    tar.replace(header + 148, 7, std::string(checksum, 7));  // six digits, NUL, then a space
    std::vector<int64_t> offsets;
    EXPECT_THAT(MemberNames(MemoryStream("mem://t", tar), 0, &offsets),
                ElementsAre("a.txt", "b.txt", "b.cls"));
    tar = testing::Compress(tar, compression);
    offsets.clear();
    EXPECT_THAT(MemberNames(MemoryStream("mem://t", tar), start, &offsets),
                ElementsAre("b.txt", "b.cls"))
        << "compression " << static_cast<int>(compression);
  }
}

TEST(TarStartOffsetTest, AnOffsetPastTheEndIsDataLoss) {
  for (Compression compression : {Compression::kNone, Compression::kGzip, Compression::kZstd}) {
    const std::string tar = SampleTar(2, TarFormat::kPax, compression);
    std::unique_ptr<TarReader> reader =
        TarReader::Open(MemoryStream("mem://t", tar), {.start_offset = 1 << 20}).value();
    absl::StatusOr<std::optional<TarMember>> m = reader->Next();
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("mem://t: truncated: the tar ends"));
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("before start offset 1048576"));
  }
  // A file is seeked: past its end there is nothing to read.
  TempDir dir;
  const std::string path = dir.Write("t.tar", SampleTar(2, TarFormat::kPax, Compression::kNone));
  std::unique_ptr<TarReader> reader =
      TarReader::Open(OpenUrl(path).value(), {.start_offset = 3 << 20}).value();
  absl::StatusOr<std::optional<TarMember>> m = reader->Next();
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(path + ": truncated: the tar ends"));
}

// Shards of the pipeline tests: shard i holds counts[i] samples "s<i>_<j>".
std::vector<std::string> WriteShards(const TempDir& dir, const std::vector<int>& counts,
                                     Compression compression, bool sidecars) {
  std::vector<std::string> urls;
  for (size_t i = 0; i < counts.size(); ++i) {
    std::vector<TarEntry> entries;
    for (int j = 0; j < counts[i]; ++j) {
      const std::string key = absl::StrCat("s", i, "_", j);
      entries.push_back({key + ".txt", key + std::string(j * 37 % 700, '.')});
    }
    // An empty shard is an empty tar (two zero blocks).
    const std::string tar = MakeTar(entries, TarFormat::kPax, compression);
    urls.push_back(dir.Write(absl::StrCat("shard-", i, ".tar"), tar));
    if (sidecars) EXPECT_TRUE(ScanShard(urls.back()).value().Save(IndexPath(urls.back())).ok());
  }
  return urls;
}

std::vector<std::string> RankKeys(const std::vector<std::string>& urls, WebDatasetOptions options,
                                  int rank, int world, int workers, int64_t epoch = 0) {
  Pipeline pipeline = WebDataset(urls, std::move(options)).value();
  Loader loader(pipeline, {.workers = workers, .rank = rank, .world_size = world});
  loader.SetEpoch(epoch);
  std::vector<std::string> keys;
  for (const Sample& s : loader) {
    keys.emplace_back(s.key());
    EXPECT_EQ(testing::FieldText(s, "txt").substr(0, s.key().size()), s.key());
  }
  return keys;
}

const std::vector<int> kSmallUneven = {5, 61, 12, 0, 30, 7, 40};  // 155

TEST(SampleSplitPipelineTest, EveryRankAndWorkerReadsEqualDisjointShares) {
  struct Case {
    Compression compression;
    bool sidecars;
  };
  for (Case c : {Case{Compression::kNone, true}, Case{Compression::kNone, false},
                 Case{Compression::kGzip, false}, Case{Compression::kZstd, true}}) {
    TempDir dir;
    const std::vector<std::string> urls = WriteShards(dir, kSmallUneven, c.compression, c.sidecars);
    for (int world = 1; world <= 4; ++world) {
      for (int workers = 1; workers <= 3; ++workers) {
        SCOPED_TRACE(absl::StrCat("compression ", static_cast<int>(c.compression), " sidecars ",
                                  int{c.sidecars}, " ranks ", world, " workers ", workers));
        std::multiset<std::string> all;
        for (int rank = 0; rank < world; ++rank) {
          std::vector<std::string> keys =
              RankKeys(urls, {.split = SplitGranularity::kSamples}, rank, world, workers);
          EXPECT_GE(keys.size(), 155u / world);
          EXPECT_LE(keys.size(), (155u + world - 1) / world);
          all.insert(keys.begin(), keys.end());
        }
        ASSERT_EQ(all.size(), 155u);
        EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 155u);
      }
    }
  }
}

TEST(SampleSplitPipelineTest, TwoShardsFeedUpToFourRanksOfThreeWorkers) {
  // Fewer shards than ranks (and than workers): every rank and worker still
  // reads an equal, disjoint run, cut inside the shards.
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, {9, 4}, Compression::kNone, true);
  for (int world = 1; world <= 4; ++world) {
    for (int workers = 1; workers <= 3; ++workers) {
      SCOPED_TRACE(absl::StrCat("ranks ", world, " workers ", workers));
      std::multiset<std::string> all;
      for (int rank = 0; rank < world; ++rank) {
        std::vector<std::string> keys = RankKeys(urls, {}, rank, world, workers);
        EXPECT_GE(keys.size(), 13u / world);
        EXPECT_LE(keys.size(), (13u + world - 1) / world);
        all.insert(keys.begin(), keys.end());
      }
      EXPECT_EQ(all.size(), 13u);
      EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 13u);
    }
  }
  // Rank 3 of 4 reads samples [9, 13), all of shard 1; its 3 workers read
  // 1, 1 and 2 of them, handed out round-robin.
  EXPECT_EQ(RankKeys(urls, {}, 3, 4, 3),
            (std::vector<std::string>{"s1_0", "s1_1", "s1_2", "s1_3"}));
}

TEST(SampleSplitPipelineTest, ACustomSplitterKeepsWholeShards) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, kSmallUneven, Compression::kNone, true);
  // Rank r of 2 keeps only shard r: a choice of shards that no run of samples
  // can express, so counts known or not, the split stays shard-granular.
  ShardSplitter first_shard = [](std::vector<std::string> shards, const WorkerContext& ctx) {
    return std::vector<std::string>{shards[static_cast<size_t>(ctx.rank)]};
  };
  EXPECT_EQ(RankKeys(urls, {.nodesplitter = first_shard}, 1, 2, 1).size(), 61u);
  absl::StatusOr<Pipeline> samples =
      WebDataset(urls, {.nodesplitter = first_shard, .split = SplitGranularity::kSamples});
  EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(samples.status().message()),
              HasSubstr("a custom nodesplitter or workersplitter cannot apply"));
  // The built-in splitters, given explicitly, keep the sample split.
  EXPECT_EQ(RankKeys(urls, {.nodesplitter = SplitByNode, .workersplitter = SplitByWorker}, 0, 2, 1)
                .size(),
            77u);
}

TEST(SampleSplitPipelineTest, DefaultIsSamplesWithSidecarsAndShardsWithout) {
  TempDir with, without;
  const std::vector<std::string> indexed =
      WriteShards(with, kSmallUneven, Compression::kNone, true);
  const std::vector<std::string> plain =
      WriteShards(without, kSmallUneven, Compression::kNone, false);
  // Shard-granular, rank 0 of 2 reads shards 0, 2, 4 and 6: 5 + 12 + 30 + 40.
  EXPECT_EQ(RankKeys(plain, {}, 0, 2, 1).size(), 87u);
  EXPECT_EQ(RankKeys(indexed, {}, 0, 2, 1).size(), 77u);
  EXPECT_EQ(RankKeys(indexed, {.split = SplitGranularity::kShards}, 0, 2, 1).size(), 87u);
  // A dataset index that lists every shard also makes counts known.
  auto index = std::make_shared<DatasetIndex>();
  for (size_t i = 0; i < plain.size(); ++i) index->shards.push_back({plain[i], kSmallUneven[i], 0});
  EXPECT_EQ(RankKeys(plain, {.dataset_index = index}, 1, 2, 1).size(), 78u);
}

TEST(SampleSplitPipelineTest, ShuffledEpochsDifferRepeatAndStayComplete) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, kSmallUneven, Compression::kNone, true);
  WebDatasetOptions options{.seed = 3, .shardshuffle = true};
  std::vector<std::string> epoch0 = RankKeys(urls, options, 1, 3, 2, 0);
  EXPECT_EQ(RankKeys(urls, options, 1, 3, 2, 0), epoch0);
  EXPECT_NE(RankKeys(urls, options, 1, 3, 2, 1), epoch0);
  std::set<std::string> all;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<std::string> keys = RankKeys(urls, options, rank, 3, 2, 1);
    all.insert(keys.begin(), keys.end());
  }
  EXPECT_EQ(all.size(), 155u);
}

absl::Status FirstError(const std::vector<std::string>& urls, int rank, int world) {
  Pipeline pipeline = WebDataset(urls, {}).value();
  Loader loader(pipeline, {.workers = 1, .rank = rank, .world_size = world});
  while (true) {
    absl::StatusOr<std::optional<Sample>> s = loader.Next();
    if (!s.ok()) return s.status();
    if (!s->has_value()) return absl::OkStatus();
  }
}

TEST(SampleSplitPipelineTest, AStaleSidecarIsDataLossNamingTheShard) {
  TempDir dir;
  const std::vector<std::string> urls = WriteShards(dir, {6, 6}, Compression::kNone, true);
  ShardIndex index = ShardIndex::Load(IndexPath(urls[0])).value();
  // Counting 4 samples of 6: the rank whose slice ends with the shard finds more.
  ShardIndex fewer = index;
  fewer.samples.resize(4);
  ASSERT_TRUE(fewer.Save(IndexPath(urls[0])).ok());
  // Rank 1 of 2 reads samples [5, 10): shard-1 [1, 6), and never sees it.
  absl::Status error = FirstError(urls, 1, 2);
  ASSERT_TRUE(error.ok()) << error;
  error = FirstError(urls, 0, 1);
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(error.message()), urls[0] +
                                              ": the shard holds more than the 4 samples its index "
                                              "counts (a stale index?)");
  // Counting 8: the shard ends first.
  ShardIndex more = index;
  more.samples.push_back(index.samples[5]);
  more.samples.push_back(index.samples[5]);
  ASSERT_TRUE(more.Save(IndexPath(urls[0])).ok());
  error = FirstError(urls, 0, 1);
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(error.message()),
            urls[0] +
                ": the shard ends after 6 samples, but its index counts "
                "more: slice [0, 8) cannot be read (a stale index?)");
}

}  // namespace
}  // namespace wds
