// ShardCounts: shard sample counts read once per cache, from the dataset
// index, a sidecar or the shard itself.
#include "wds/tar/shard_counts.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/shard_catalog.h"
#include "util/test_util.h"
#include "wds/io/remote.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeTar;
using testing::TempDir;

// CountingOpener serves in-memory shards of `samples` one-member samples and
// counts the opens.
struct CountingOpener {
  std::shared_ptr<std::atomic<int>> opens = std::make_shared<std::atomic<int>>(0);

  Opener opener(int samples) const {
    std::vector<testing::TarEntry> entries;
    for (int i = 0; i < samples; ++i) entries.push_back({"s" + std::to_string(i) + ".cls", "1"});
    const std::string tar = MakeTar(entries);
    return
        [tar, opens = opens](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
          ++*opens;
          return MemoryStream(std::string(url), tar);
        };
  }
};

TEST(ShardCountsTest, AShardIsCountedOnceAndKnownAfterwards) {
  ShardCounts cache;
  const std::vector<std::string> urls = {"mem://a.tar", "mem://b.tar"};
  absl::StatusOr<std::shared_ptr<ListCounts>> list = cache.For(urls, "");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_FALSE((*list)->known());
  EXPECT_TRUE((*list)->Known()->shards.empty());
  CountingOpener counting;
  const Opener opener = counting.opener(3);
  absl::StatusOr<std::vector<int64_t>> counts = (*list)->Counts(urls, opener);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts, ElementsAre(3, 3));
  EXPECT_EQ(*(*list)->Count("mem://a.tar", opener), 3);
  EXPECT_EQ(*counting.opens, 2);
  std::shared_ptr<const DatasetIndex> known = (*list)->Known();
  EXPECT_EQ(known->total_samples(), 6);
  EXPECT_EQ((*list)->Known(), known);  // the same object until a count is added
}

TEST(ShardCountsTest, OneEntryPerListAndIndexForTheCachesLife) {
  ShardCounts cache;
  std::shared_ptr<ListCounts> first = *cache.For({"mem://a.tar"}, "");
  EXPECT_EQ(*cache.For({"mem://a.tar"}, ""), first);
  EXPECT_NE(*cache.For({"mem://a.tar", "mem://b.tar"}, ""), first);
  // A list's counts do not depend on its order (a list shuffled per epoch).
  EXPECT_EQ(*cache.For({"mem://b.tar", "mem://a.tar"}, ""),
            *cache.For({"mem://a.tar", "mem://b.tar"}, ""));
  CountingOpener counting;
  ASSERT_TRUE(first->Count("mem://a.tar", counting.opener(2)).ok());
  EXPECT_EQ(*(*cache.For({"mem://a.tar"}, ""))->Count("mem://a.tar", counting.opener(2)), 2);
  EXPECT_EQ(*counting.opens, 1);
  ShardCounts other;  // another owner reads again
  EXPECT_EQ(*(*other.For({"mem://a.tar"}, ""))->Count("mem://a.tar", counting.opener(2)), 2);
  EXPECT_EQ(*counting.opens, 2);
}

TEST(ShardCountsTest, TheDatasetIndexGivesCountsWithoutReading) {
  TempDir dir;
  DatasetIndex index;
  index.shards.push_back({"mem://a.tar", 7, 0});
  const std::string path = dir.path() + "/dataset.json";
  ASSERT_TRUE(index.Save(path).ok());
  ShardCounts cache;
  std::shared_ptr<ListCounts> list = *cache.For({"mem://a.tar"}, path);
  EXPECT_TRUE(list->known());
  EXPECT_EQ(list->Known(), list->index());
  CountingOpener counting;
  EXPECT_EQ(*list->Count("mem://a.tar", counting.opener(1)), 7);
  EXPECT_EQ(*counting.opens, 0);
  EXPECT_FALSE((*cache.For({"mem://a.tar", "mem://b.tar"}, path))->known());
}

TEST(ShardCountsTest, ARemoteIndexIsReadThroughTheIndexOpenerOnce) {
  DatasetIndex index;
  index.shards.push_back({"a.tar", 7, 0});
  index.shards.push_back({"https://elsewhere/b.tar", 5, 0});
  const std::string json = index.ToJson();
  auto fetches = std::make_shared<std::atomic<int>>(0);
  const Opener serving =
      [json, fetches](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    ++*fetches;
    return MemoryStream(std::string(url), json);
  };
  const std::vector<std::string> urls = {"https://host/ds/a.tar", "https://elsewhere/b.tar"};
  ShardCounts cache;
  std::shared_ptr<ListCounts> list = *cache.For(urls, "https://host/ds/index.json", serving);
  EXPECT_TRUE(list->known());
  EXPECT_EQ(*cache.For(urls, "https://host/ds/index.json", serving), list);
  EXPECT_EQ(*fetches, 1);
  CountingOpener counting;
  EXPECT_THAT(*list->Counts(urls, counting.opener(1)), ElementsAre(7, 5));
  EXPECT_EQ(*counting.opens, 0);
  // The index's digest of a list: its listed URLs and counts, in any order.
  const uint64_t digest = list->IndexDigest(urls);
  EXPECT_NE(digest, 0u);
  EXPECT_EQ(list->IndexDigest({urls[1], urls[0], "https://host/ds/unlisted.tar"}), digest);
  EXPECT_NE(list->IndexDigest({urls[0]}), digest);
  EXPECT_EQ((*cache.For(urls, ""))->IndexDigest(urls), 0u);  // no index
  // The same index under another URL lists other shards.
  EXPECT_FALSE((*cache.For(urls, "https://host/other/index.json", serving))->known());
  EXPECT_EQ(*fetches, 2);
}

TEST(ShardCountsTest, FindUnlistedCountsTheShardsAnIndexDoesNotList) {
  DatasetIndex index;
  index.shards.push_back({"s3://b/a.tar", 7, 0});
  index.shards.push_back({"s3://b/c.tar", 1, 0});
  UnlistedShards none = FindUnlisted({"s3://b/c.tar", "s3://b/a.tar"}, index);
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.first, "");
  UnlistedShards some =
      FindUnlisted({"s3://b/a.tar", "https://b.s3.amazonaws.com/c.tar", "s3://b/d.tar"}, index);
  EXPECT_EQ(some.count, 2u);
  EXPECT_EQ(some.first, "https://b.s3.amazonaws.com/c.tar");
}

TEST(ShardCountsTest, AnUnreadableIndexOrShardIsAnErrorNamingIt) {
  TempDir dir;
  ShardCounts cache;
  const std::string missing = dir.path() + "/missing.json";
  absl::StatusOr<std::shared_ptr<ListCounts>> list = cache.For({"mem://a.tar"}, missing);
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(list.status().message(), HasSubstr(missing));
  const std::string shard = dir.Write("cut.tar", MakeTar({{"a.cls", "1"}}).substr(0, 700));
  std::shared_ptr<ListCounts> cut = *cache.For({shard}, "");
  absl::StatusOr<int64_t> count = cut->Count(shard, MakeOpener());
  ASSERT_FALSE(count.ok());
  EXPECT_THAT(count.status().message(), HasSubstr(shard));
}

TEST(ShardCountsTest, ASidecarIsTrustedAsItIs) {
  TempDir dir;
  const std::string shard = dir.Write("a.tar", MakeTar({{"a.cls", "1"}, {"b.cls", "2"}}));
  ShardIndex index;
  index.samples.resize(5);  // not the shard's 2: proves that the sidecar is what is read
  for (size_t i = 0; i < index.samples.size(); ++i) {
    index.samples[i].members.push_back({"cls", static_cast<int64_t>(512 * (2 * i + 1)), 1, ""});
  }
  ASSERT_TRUE(index.Save(IndexPath(shard)).ok());
  EXPECT_EQ(*ReadShardCount(shard, MakeOpener()), 5);
  ShardCounts cache;
  EXPECT_TRUE((*cache.For({shard}, ""))->known());
}

TEST(ShardCountsTest, ConcurrentCountsAgree) {
  ShardCounts cache;
  std::vector<std::string> urls;
  for (int i = 0; i < 8; ++i) urls.push_back("mem://" + std::to_string(i) + ".tar");
  std::shared_ptr<ListCounts> list = *cache.For(urls, "");
  CountingOpener counting;
  const Opener opener = counting.opener(4);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      absl::StatusOr<std::vector<int64_t>> counts = list->Counts(urls, opener);
      if (!counts.ok() || *counts != std::vector<int64_t>(8, 4)) ++wrong;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(list->Known()->total_samples(), 32);
}

// RemoteShards answers "http://shards.test/<i>.tar" (remote URLs to the
// library) from memory, without sidecars: each count is a sidecar request
// and a read of the shard. A shard's open waits until `concurrent` opens are
// under way at once (or 20 s pass, so that a serial reader fails instead of
// hanging); `fail` names shards whose open fails.
struct RemoteShards {
  int concurrent = 1;
  std::set<int> fail;
  std::shared_ptr<std::atomic<int>> opens = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::condition_variable> cv = std::make_shared<std::condition_variable>();
  std::shared_ptr<int> inside = std::make_shared<int>(0);
  std::shared_ptr<int> most = std::make_shared<int>(0);
  std::shared_ptr<bool> released = std::make_shared<bool>(false);  // once full, no more waits

  static std::string Url(int i) { return "http://shards.test/" + std::to_string(i) + ".tar"; }
  static std::vector<std::string> Urls(int n) {
    std::vector<std::string> urls;
    for (int i = 0; i < n; ++i) urls.push_back(Url(i));
    return urls;
  }

  Opener opener() const {
    return [s = *this](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
      if (!IsRemoteUrl(url)) return MakeOpener()(url);  // a local file
      if (url.size() > 4 && url.substr(url.size() - 4) == ".idx") {
        return absl::NotFoundError(std::string(url));
      }
      ++*s.opens;
      const int i = std::stoi(std::string(url.substr(19)));
      {
        std::unique_lock<std::mutex> lock(*s.mu);
        *s.most = std::max(*s.most, ++*s.inside);
        s.cv->notify_all();
        s.cv->wait_for(lock, std::chrono::seconds(20),
                       [&] { return *s.most >= s.concurrent || *s.released; });
        *s.released = true;  // a serial reader fails after one wait, not one per shard
        --*s.inside;
      }
      if (s.fail.count(i) != 0) return absl::NotFoundError(std::string(url) + ": no such key");
      std::vector<testing::TarEntry> entries;
      for (int j = 0; j <= i; ++j) entries.push_back({"s" + std::to_string(j) + ".cls", "1"});
      return MemoryStream(std::string(url), MakeTar(entries));
    };
  }
};

TEST(ShardCountsTest, RemoteShardsAreCountedSixteenAtATime) {
  ASSERT_EQ(kCountThreads, 16);
  const std::vector<std::string> urls = RemoteShards::Urls(40);
  ShardCounts cache;
  std::shared_ptr<ListCounts> list = *cache.For(urls, "");
  RemoteShards remote;
  remote.concurrent = 16;
  absl::StatusOr<std::vector<int64_t>> counts = list->Counts(urls, remote.opener());
  ASSERT_TRUE(counts.ok()) << counts.status();
  for (int i = 0; i < 40; ++i) EXPECT_EQ((*counts)[i], i + 1);
  EXPECT_EQ(*remote.most, 16);
  EXPECT_EQ(*remote.opens, 40);
  ASSERT_TRUE(list->Counts(urls, remote.opener()).ok());
  EXPECT_EQ(*remote.opens, 40);  // counted once
  EXPECT_EQ(list->Known()->total_samples(), 40 * 41 / 2);
}

TEST(ShardCountsTest, TheFailureReportedIsTheFirstInListOrderAndTheRestAreKept) {
  const std::vector<std::string> urls = RemoteShards::Urls(8);
  ShardCounts cache;
  std::shared_ptr<ListCounts> list = *cache.For(urls, "");
  RemoteShards remote;
  remote.concurrent = 8;  // all at once: which fails first in time is not list order
  remote.fail = {2, 6};
  absl::StatusOr<std::vector<int64_t>> counts = list->Counts(urls, remote.opener());
  ASSERT_FALSE(counts.ok());
  EXPECT_EQ(counts.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(counts.status().message(), HasSubstr(RemoteShards::Url(2)));
  EXPECT_EQ(*remote.opens, 8);
  EXPECT_EQ(list->Known()->shards.size(), 6u);  // the others, counted on the way
  // A list of one remote shard is read by the caller alone, as before.
  RemoteShards one;
  EXPECT_EQ(*list->Counts({RemoteShards::Url(9)}, one.opener()), std::vector<int64_t>{10});
  EXPECT_EQ(*one.most, 1);
}

TEST(ShardCountsTest, LocalAndPipeShardsAreReadInListOrderAfterTheRemoteOnes) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing.tar";
  const std::vector<std::string> urls = {RemoteShards::Url(0), missing, RemoteShards::Url(2)};
  ShardCounts cache;
  std::shared_ptr<ListCounts> list = *cache.For(urls, "");
  RemoteShards remote;
  remote.concurrent = 2;
  remote.fail = {2};
  absl::StatusOr<std::vector<int64_t>> counts = list->Counts(urls, remote.opener());
  ASSERT_FALSE(counts.ok());
  EXPECT_THAT(counts.status().message(), HasSubstr(missing));  // first in list order
  EXPECT_EQ(*remote.most, 2);                                  // the remote two at once
}

TEST(ShardCatalogTest, ASampleSplitReadsTheIndexesOfRemoteShardsSixteenAtATime) {
  const std::vector<std::string> urls = RemoteShards::Urls(20);
  RemoteShards remote;
  remote.concurrent = 16;
  ShardCatalog catalog(remote.opener(), nullptr);
  absl::StatusOr<std::vector<int64_t>> counts = catalog.Counts(urls);
  ASSERT_TRUE(counts.ok()) << counts.status();
  for (int i = 0; i < 20; ++i) EXPECT_EQ((*counts)[i], i + 1);
  EXPECT_EQ(*remote.most, 16);
  EXPECT_EQ(*remote.opens, 20);
  // Each member: a pax extended header (two blocks), its header and one data block.
  EXPECT_EQ(*catalog.StartOffset(RemoteShards::Url(5), 3), 3 * 4 * 512);
  EXPECT_EQ(*remote.opens, 20);  // the index read for the count gives the offsets
  RemoteShards failing;
  failing.concurrent = 4;
  failing.fail = {1, 3};
  ShardCatalog other(failing.opener(), nullptr);
  absl::StatusOr<std::vector<int64_t>> failed = other.Counts(RemoteShards::Urls(4));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr(RemoteShards::Url(1)));
  // A local shard before the first remote failure fails first, as in list order.
  TempDir dir;
  const std::string missing = dir.path() + "/missing.tar";
  RemoteShards mixed;
  mixed.concurrent = 2;
  mixed.fail = {2};
  ShardCatalog third(mixed.opener(), nullptr);
  failed = third.Counts({RemoteShards::Url(0), missing, RemoteShards::Url(2)});
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr(missing));
}

TEST(ShardCatalogTest, WorkersCountingAtOnceReadEachRemoteIndexOnce) {
  const std::vector<std::string> urls = RemoteShards::Urls(20);
  RemoteShards remote;
  remote.concurrent = 16;
  ShardCatalog catalog(remote.opener(), nullptr);
  std::vector<std::thread> workers;
  std::atomic<int> wrong{0};
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      absl::StatusOr<std::vector<int64_t>> counts = catalog.Counts(urls);
      if (!counts.ok() || (*counts)[19] != 20) ++wrong;
    });
  }
  for (std::thread& t : workers) t.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(*remote.opens, 20);
}

}  // namespace
}  // namespace wds
