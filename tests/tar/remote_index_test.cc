// Index-driven reading of remote shards: sample counts come from one dataset
// index, a shard's sample offsets from its "<url>.idx" sidecar fetched only
// when that shard is read from the middle, and nothing else is downloaded to
// plan a rank's share.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/index_lookup.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"
#include "wds/io/remote.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::wds::testing::FaultServer;
using ::wds::testing::TarEntry;

RemoteOptions Fast() { return testing::FastRemoteOptions(); }

// Shard i holds counts[i] samples "s<i>_<j>" with a text field of varying size.
std::string MakeShard(int i, int count) {
  std::vector<TarEntry> entries;
  for (int j = 0; j < count; ++j) {
    const std::string key = absl::StrCat("s", i, "_", j);
    entries.push_back({key + ".txt", key + std::string(j * 53 % 900, '.')});
  }
  return testing::MakeTar(entries);
}

// Targets lists the request targets the server saw, in order.
std::vector<std::string> Targets(const FaultServer& server) {
  std::vector<std::string> targets;
  for (const testing::FaultRequest& r : server.log()) targets.push_back(r.target);
  return targets;
}

class RemoteIndexTest : public ::testing::Test {
 protected:
  // Serve puts shard i at /shard-i.tar, with its sidecar when `sidecars`.
  void Serve(const std::vector<int>& counts, bool sidecars) {
    for (size_t i = 0; i < counts.size(); ++i) {
      const std::string name = absl::StrCat("shard-", i, ".tar");
      const std::string tar = MakeShard(static_cast<int>(i), counts[i]);
      const std::string local = dir_.Write(name, tar);
      server_.Put("/" + name, tar);
      if (sidecars) server_.Put("/" + name + ".idx", ScanShard(local).value().ToText().value());
      local_.push_back(local);
      urls_.push_back(server_.Url("/" + name));
    }
  }

  testing::TempDir dir_;
  FaultServer server_;
  std::vector<std::string> local_;
  std::vector<std::string> urls_;
};

TEST_F(RemoteIndexTest, ASidecarOnTheServerIsTheIndexInOneRequest) {
  Serve({40}, true);
  absl::StatusOr<ShardIndex> index = IndexOf(urls_[0], MakeOpener(Fast()));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples.size(), 40u);
  EXPECT_EQ(index->ToText().value(), ScanShard(local_[0]).value().ToText().value());
  EXPECT_THAT(Targets(server_), ElementsAre("/shard-0.tar.idx"));
}

TEST_F(RemoteIndexTest, WithoutASidecarTheShardIsScanned) {
  Serve({25}, false);
  absl::StatusOr<ShardIndex> index = IndexOf(urls_[0], MakeOpener(Fast()));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->ToText().value(), ScanShard(local_[0]).value().ToText().value());
  EXPECT_THAT(Targets(server_), ElementsAre("/shard-0.tar.idx", "/shard-0.tar"));
}

TEST_F(RemoteIndexTest, AMalformedSidecarIsAnErrorNamingIt) {
  Serve({3}, false);
  server_.Put("/shard-0.tar.idx", "v1.2 3\nnot an index line\n");
  absl::StatusOr<ShardIndex> index = IndexOf(urls_[0], MakeOpener(Fast()));
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ToStd(index.status().message())), HasSubstr(urls_[0] + ".idx"));
}

TEST_F(RemoteIndexTest, AServerErrorOnTheSidecarIsNotMistakenForNoSidecar) {
  Serve({3}, true);
  server_.SetPlanner([](const testing::FaultRequest& r) {
    testing::FaultPlan plan;
    if (absl::EndsWith(r.target, ".idx")) plan.status = 400;
    return plan;
  });
  absl::StatusOr<ShardIndex> index = IndexOf(urls_[0], MakeOpener(Fast()));
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ToStd(index.status().message())), HasSubstr(urls_[0] + ".idx"));
}

// Counts from one dataset index; rank 1 of 2 reads samples [60, 120) of
// 30 + 50 + 40: shard 1 from its 30th sample (one sidecar request for its
// offsets) and shard 2 whole. Shard 0 is never requested, and no shard is
// scanned.
TEST_F(RemoteIndexTest, ARankFetchesOffsetsOnlyForTheShardItStartsInside) {
  Serve({30, 50, 40}, true);
  auto index = std::make_shared<DatasetIndex>();
  const std::vector<int> counts = {30, 50, 40};
  for (size_t i = 0; i < urls_.size(); ++i) index->shards.push_back({urls_[i], counts[i], 0});
  WebDatasetOptions options;
  options.dataset_index = index;
  options.opener = MakeOpener(Fast());
  Pipeline pipeline = WebDataset(urls_, options).value();
  Loader loader(pipeline, {.workers = 1, .rank = 1, .world_size = 2});
  std::vector<std::string> keys;
  for (const Sample& s : loader) keys.emplace_back(s.key());
  ASSERT_EQ(keys.size(), 60u);
  EXPECT_EQ(keys.front(), "s1_30");
  EXPECT_EQ(keys[19], "s1_49");
  EXPECT_EQ(keys[20], "s2_0");
  EXPECT_EQ(keys.back(), "s2_39");
  const std::vector<std::string> targets = Targets(server_);
  EXPECT_EQ(std::set<std::string>(targets.begin(), targets.end()),
            (std::set<std::string>{"/shard-1.tar.idx", "/shard-1.tar", "/shard-2.tar"}));
  EXPECT_EQ(std::count(targets.begin(), targets.end(), "/shard-1.tar.idx"), 1);
}

}  // namespace
}  // namespace wds
