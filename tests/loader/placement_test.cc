// Tests for wds/loader/placement.h: rank, world size, local rank and rendezvous from
// explicit options, torchrun's and SLURM's variables, and SLURM node lists.
#include "wds/loader/placement.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/launcher_env.h"
#include "loader/slurm_nodelist.h"

namespace wds {
namespace {

using ::testing::HasSubstr;

// LauncherEnv clears every variable placement reads and restores them after
// the test.
class LauncherEnv {
 public:
  LauncherEnv() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  ~LauncherEnv() {
    for (const auto& [name, value] : saved_) {
      if (value.has_value()) {
        setenv(name, value->c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }
  LauncherEnv(const LauncherEnv&) = delete;
  LauncherEnv& operator=(const LauncherEnv&) = delete;

  void Set(const char* name, const char* value) { setenv(name, value, 1); }

 private:
  static constexpr const char* kNames[] = {"RANK",           "WORLD_SIZE",    "LOCAL_RANK",
                                           "MASTER_ADDR",    "MASTER_PORT",   "SLURM_PROCID",
                                           "SLURM_NTASKS",   "SLURM_LOCALID", "SLURM_JOB_NODELIST",
                                           "SLURM_NODELIST", "SLURM_JOB_ID"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

std::string MessageOf(const absl::Status& status) { return std::string(status.message()); }

TEST(ResolvePlacementTest, NoLauncherIsRankZeroOfOne) {
  LauncherEnv env;
  absl::StatusOr<Placement> p = ResolvePlacement({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 0);
  EXPECT_EQ(p->world_size, 1);
  EXPECT_EQ(p->launcher, Launcher::kNone);
}

TEST(ResolvePlacementTest, TorchrunVariablesGiveRankAndWorldSize) {
  LauncherEnv env;
  env.Set("RANK", "3");
  env.Set("WORLD_SIZE", "4");
  absl::StatusOr<Placement> p = ResolvePlacement({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->world_size, 4);
  EXPECT_EQ(p->launcher, Launcher::kTorchrun);
}

TEST(ResolvePlacementTest, SlurmVariablesGiveRankAndWorldSize) {
  LauncherEnv env;
  env.Set("SLURM_PROCID", "1");
  env.Set("SLURM_NTASKS", "3");
  absl::StatusOr<Placement> p = ResolvePlacement({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 3);
  EXPECT_EQ(p->launcher, Launcher::kSlurm);
}

TEST(ResolvePlacementTest, TorchrunWinsOverSlurm) {
  LauncherEnv env;
  env.Set("RANK", "5");
  env.Set("WORLD_SIZE", "8");
  env.Set("SLURM_PROCID", "0");
  env.Set("SLURM_NTASKS", "2");
  absl::StatusOr<Placement> p = ResolvePlacement({});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 5);
  EXPECT_EQ(p->world_size, 8);
  EXPECT_EQ(p->launcher, Launcher::kTorchrun);
}

TEST(ResolvePlacementTest, ExplicitOptionsWinOverMalformedEnvironment) {
  LauncherEnv env;
  env.Set("RANK", "junk");
  env.Set("WORLD_SIZE", "junk");
  PlacementOptions options;
  options.rank = 1;
  options.world_size = 2;
  absl::StatusOr<Placement> p = ResolvePlacement(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->launcher, Launcher::kNone);
}

TEST(ResolvePlacementTest, ExplicitRankTakesWorldSizeFromEnvironment) {
  LauncherEnv env;
  env.Set("SLURM_PROCID", "0");
  env.Set("SLURM_NTASKS", "6");
  PlacementOptions options;
  options.rank = 4;
  absl::StatusOr<Placement> p = ResolvePlacement(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rank, 4);
  EXPECT_EQ(p->world_size, 6);
  EXPECT_EQ(p->launcher, Launcher::kSlurm);
}

TEST(ResolvePlacementTest, HalfAPairIsErrorNamingBothVariables) {
  LauncherEnv env;
  env.Set("SLURM_PROCID", "1");
  absl::StatusOr<Placement> p = ResolvePlacement({});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(p.status()), HasSubstr("SLURM_NTASKS is not set although SLURM_PROCID is"));
}

TEST(ResolvePlacementTest, MalformedValueIsErrorQuotingIt) {
  for (const char* bad : {"2x", "", " 2", "2.0", "+2", "99999999999"}) {
    LauncherEnv env;
    env.Set("RANK", "0");
    env.Set("WORLD_SIZE", bad);
    absl::StatusOr<Placement> p = ResolvePlacement({});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(MessageOf(p.status()), HasSubstr("environment variable WORLD_SIZE=\"" +
                                                 std::string(bad) + "\" is not an integer"));
  }
}

TEST(ResolvePlacementTest, RankOutOfRangeNamesBothSources) {
  LauncherEnv env;
  env.Set("SLURM_PROCID", "2");
  env.Set("SLURM_NTASKS", "2");
  absl::StatusOr<Placement> p = ResolvePlacement({});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      MessageOf(p.status()),
      HasSubstr("rank 2 from SLURM_PROCID is not in [0, 2) (world size from SLURM_NTASKS)"));
}

TEST(ResolvePlacementTest, OptionsNameAppearsInMessages) {
  LauncherEnv env;
  PlacementOptions options;
  options.world_size = 0;
  absl::StatusOr<Placement> p = ResolvePlacement(options, "LoaderOptions");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(p.status()),
              HasSubstr("world size 0 from LoaderOptions.world_size must be >= 1"));
}

TEST(ResolveLocalRankTest, DefaultsToZero) {
  LauncherEnv env;
  EXPECT_EQ(ResolveLocalRank(std::nullopt).value(), 0);
}

TEST(ResolveLocalRankTest, LocalRankWinsOverSlurmLocalId) {
  LauncherEnv env;
  env.Set("LOCAL_RANK", "3");
  env.Set("SLURM_LOCALID", "1");
  EXPECT_EQ(ResolveLocalRank(std::nullopt).value(), 3);
}

TEST(ResolveLocalRankTest, SlurmLocalIdWhenNoLocalRank) {
  LauncherEnv env;
  env.Set("SLURM_LOCALID", "1");
  EXPECT_EQ(ResolveLocalRank(std::nullopt).value(), 1);
}

TEST(ResolveLocalRankTest, ExplicitOptionWins) {
  LauncherEnv env;
  env.Set("LOCAL_RANK", "junk");
  EXPECT_EQ(ResolveLocalRank(2).value(), 2);
}

TEST(ResolveLocalRankTest, NegativeIsErrorNamingItsSource) {
  LauncherEnv env;
  env.Set("SLURM_LOCALID", "-1");
  absl::StatusOr<int> local = ResolveLocalRank(std::nullopt);
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(local.status()),
              HasSubstr("local rank -1 from SLURM_LOCALID must be >= 0"));
}

TEST(ResolveLocalRankTest, MalformedIsErrorQuotingIt) {
  LauncherEnv env;
  env.Set("LOCAL_RANK", "one");
  absl::StatusOr<int> local = ResolveLocalRank(std::nullopt);
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(local.status()),
              HasSubstr("environment variable LOCAL_RANK=\"one\" is not an integer"));
}

TEST(ResolveRendezvousTest, TorchrunMasterAddrAndPort) {
  LauncherEnv env;
  env.Set("MASTER_ADDR", "10.1.2.3");
  env.Set("MASTER_PORT", "29400");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, "10.1.2.3");
  EXPECT_EQ(r->port, 29400);
}

TEST(ResolveRendezvousTest, SlurmFirstNodeAndPortFromJobId) {
  LauncherEnv env;
  env.Set("SLURM_JOB_NODELIST", "node[003-005,007],gpu1");
  env.Set("SLURM_NODELIST", "other");
  env.Set("SLURM_JOB_ID", "123456");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, "node003");
  EXPECT_EQ(r->port, kDefaultSlurmPortBase + 3456);
}

TEST(ResolveRendezvousTest, SlurmNodeListWhenNoJobNodeList) {
  LauncherEnv env;
  env.Set("SLURM_NODELIST", "gpu[12-13]");
  env.Set("MASTER_PORT", "1234");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, "gpu12");
  EXPECT_EQ(r->port, 1234);
}

TEST(ResolveRendezvousTest, MasterVariablesWinOverSlurm) {
  LauncherEnv env;
  env.Set("MASTER_ADDR", "head");
  env.Set("MASTER_PORT", "4000");
  env.Set("SLURM_JOB_NODELIST", "node1");
  env.Set("SLURM_JOB_ID", "77");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, "head");
  EXPECT_EQ(r->port, 4000);
}

TEST(ResolveRendezvousTest, ExplicitOptionsWin) {
  LauncherEnv env;
  env.Set("MASTER_ADDR", "head");
  env.Set("MASTER_PORT", "junk");
  PlacementOptions options;
  options.master_addr = "127.0.0.1";
  options.master_port = 5000;
  absl::StatusOr<Rendezvous> r = ResolveRendezvous(options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->addr, "127.0.0.1");
  EXPECT_EQ(r->port, 5000);
}

TEST(ResolveRendezvousTest, NoAddressIsErrorNamingMasterAddr) {
  LauncherEnv env;
  env.Set("MASTER_PORT", "4000");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(r.status()), HasSubstr("MASTER_ADDR is not set"));
}

TEST(ResolveRendezvousTest, NoPortIsTorchrunsDefault) {
  LauncherEnv env;
  env.Set("MASTER_ADDR", "head");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->port, 29500);
}

TEST(ResolveRendezvousTest, PortOutOfRangeIsErrorQuotingIt) {
  for (const char* bad : {"0", "65536", "-1"}) {
    LauncherEnv env;
    env.Set("MASTER_ADDR", "head");
    env.Set("MASTER_PORT", bad);
    absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(MessageOf(r.status()),
                HasSubstr("environment variable MASTER_PORT=\"" + std::string(bad) +
                          "\" is not a port in [1, 65535]"));
  }
}

TEST(ResolveRendezvousTest, MalformedNodeListIsErrorNamingTheVariable) {
  LauncherEnv env;
  env.Set("SLURM_JOB_NODELIST", "node[1-");
  env.Set("SLURM_JOB_ID", "1");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(r.status()),
              HasSubstr("environment variable SLURM_JOB_NODELIST: node list \"node[1-\""));
}

TEST(ResolveRendezvousTest, MalformedJobIdIsErrorQuotingIt) {
  LauncherEnv env;
  env.Set("MASTER_ADDR", "head");
  env.Set("SLURM_JOB_ID", "12a");
  absl::StatusOr<Rendezvous> r = ResolveRendezvous({});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(MessageOf(r.status()),
              HasSubstr("environment variable SLURM_JOB_ID=\"12a\" is not an integer"));
}

TEST(FirstHostOfNodeListTest, ExpandsTheFirstHost) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"node[003-005,007],gpu1", "node003"},
      {"gpu1,node[1-2]", "gpu1"},
      {"rack[2-3]-n[08-09]", "rack2-n08"},
      {"single", "single"},
      {"n[7]", "n7"},
      {"n[10,2-3]", "n10"},
      {"a.b-c[0-1].d", "a.b-c0.d"},
  };
  for (const auto& [list, host] : cases) {
    absl::StatusOr<std::string> first = FirstHostOfNodeList(list);
    ASSERT_TRUE(first.ok()) << list << ": " << first.status();
    EXPECT_EQ(*first, host) << list;
  }
}

TEST(FirstHostOfNodeListTest, MalformedListIsErrorQuotingIt) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "starts with an empty host name"},
      {",a", "starts with an empty host name"},
      {"n[1-", "has an unclosed '['"},
      {"n]1[", "has an unbalanced ']'"},
      {"n[[1]]", "has an unbalanced '['"},
      {"n[]", "has a bad range \"\" in []"},
      {"n[5-3]", "has a bad range \"5-3\" in [5-3]"},
      {"n[a-b]", "has a bad range \"a-b\""},
      {"n[1,,2]", "has a bad range \"\" in [1,,2]"},
      {"n[1-2-3]", "has a bad range \"1-2-3\""},
      {"ok,n[1-", "has an unclosed '['"},
  };
  for (const auto& [list, problem] : cases) {
    absl::StatusOr<std::string> first = FirstHostOfNodeList(list);
    EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument) << list;
    EXPECT_THAT(MessageOf(first.status()), HasSubstr("node list \"" + list + "\" " + problem));
  }
}

}  // namespace
}  // namespace wds
