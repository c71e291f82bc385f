// Tests for wds/torch/distributed.h. Multi-rank tests fork one process per
// rank (Gloo on loopback, a free port per test); each child reports a line of
// text through a file and the parent checks them. Children run every LibTorch
// call, so the parent stays single-threaded and safe to fork.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loader/launcher_env.h"
#include "util/test_util.h"
#include "wds/torch/distributed.h"
#include "wds/torch/equalize.h"

namespace wds {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

constexpr const char* kLauncherVariables[] = {
    "RANK",         "WORLD_SIZE",        "LOCAL_RANK",    "MASTER_ADDR",        "MASTER_PORT",
    "SLURM_PROCID", "SLURM_NTASKS",      "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
    "SLURM_JOB_ID", "GLOO_SOCKET_IFNAME"};

// ExceptionText names the exception's kind, so that the parent can check it.
std::string ExceptionText() {
  try {
    throw;
  } catch (const DistributedError& e) {
    return std::string("DistributedError: ") + e.what_without_backtrace();
  } catch (const c10::ValueError& e) {
    return std::string("ValueError: ") + e.what_without_backtrace();
  } catch (const c10::Error& e) {
    return std::string("c10::Error: ") + e.what_without_backtrace();
  } catch (const std::exception& e) {
    return std::string("std::exception: ") + e.what();
  }
}

[[noreturn]] void RunChild(const std::string& report, int rank,
                           const std::function<std::string(int)>& body) {
  for (const char* name : kLauncherVariables) unsetenv(name);
  std::string text;
  try {
    text = body(rank);
  } catch (...) {
    text = ExceptionText();
  }
  std::ofstream(report) << text;
  std::fflush(nullptr);
  _exit(0);
}

int ThreadCount() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator("/proc/self/task")) {
    ++count;
  }
  return count;
}

// RunRanks forks `world` children that each run body(rank) with no launcher
// variables set, and returns what each returned (or the exception it threw,
// as "<Kind>: <message>"). A child still running after `limit` is killed and
// reported as "KILLED".
std::vector<std::string> RunRanks(int world, const std::function<std::string(int)>& body,
                                  std::chrono::seconds limit = std::chrono::seconds(40)) {
  EXPECT_EQ(ThreadCount(), 1) << "the test process must be single-threaded to fork";
  testing::TempDir dir;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const std::string report = dir.path() + "/rank" + std::to_string(rank);
    const pid_t pid = fork();
    if (pid == 0) RunChild(report, rank, body);
    pids.push_back(pid);
  }
  std::vector<std::string> texts(world);
  const Clock::time_point deadline = Clock::now() + limit;
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    while (waitpid(pids[rank], &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], &status, 0);
        texts[rank] = "KILLED";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (texts[rank] == "KILLED") continue;
    std::ifstream in(dir.path() + "/rank" + std::to_string(rank));
    std::stringstream text;
    text << in.rdbuf();
    texts[rank] = WIFEXITED(status) ? text.str() : "DIED with status " + std::to_string(status);
  }
  return texts;
}

// FreePort returns a loopback port nobody listens on, in [low, high].
int FreePort(int low = 1024, int high = 65535) {
  const int span = high - low + 1;
  for (int attempt = 0; attempt < span; ++attempt) {
    const int port =
        low + static_cast<int>((int64_t{getpid()} * 7919 + int64_t{attempt} * 104729) % span);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  ADD_FAILURE() << "no free port in [" << low << ", " << high << "]";
  return 0;
}

void SetTorchrunEnv(int rank, int world, int port) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

// OnCpu keeps ranks on the CPU with Gloo, also where LibTorch sees GPUs.
DistributedOptions OnCpu(std::chrono::milliseconds timeout = std::chrono::minutes(30)) {
  DistributedOptions options;
  options.device = torch::Device(torch::kCPU);
  options.timeout = timeout;
  return options;
}

// Net is small and smooth (tanh, no batch statistics), so that averaged
// micro-batch gradients equal the big batch's up to rounding. Its buffer
// `scale` tests buffer broadcast.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
    scale = register_buffer("scale", torch::rand({6}) + 0.5);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2->forward(torch::tanh(fc1->forward(x * scale)));
  }
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Net);

Net MakeNet(uint64_t seed) {
  torch::manual_seed(seed);
  return Net();
}

torch::Tensor Flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& t : tensors) pieces.push_back(t.detach().reshape({-1}));
  return torch::cat(pieces);
}

// Fingerprint hashes the exact bits of `tensors`.
std::string Fingerprint(const std::vector<torch::Tensor>& tensors) {
  const torch::Tensor flat = Flat(tensors).contiguous();
  const auto* bytes = static_cast<const uint8_t*>(flat.data_ptr());
  uint64_t hash = 1469598103934665603ull;
  for (int64_t i = 0; i < flat.numel() * static_cast<int64_t>(flat.element_size()); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return std::to_string(hash);
}

double MaxDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  return (Flat(a) - Flat(b)).abs().max().item<double>();
}

std::string Message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    return ExceptionText();
  }
  return "no exception";
}

TEST(DistributedContextTest, NoLauncherIsOneProcessWithoutGroup) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    DistributedContext dist = DistributedContext::FromEnvironment();
    std::ostringstream s;
    s << dist.rank() << " " << dist.world_size() << " " << dist.local_rank() << " "
      << dist.backend() << " " << (dist.device().is_cuda() == torch::cuda::is_available()) << " "
      << (dist.process_group() == nullptr) << " " << (dist.launcher() == Launcher::kNone) << " "
      << dist.timeout().count() << " " << dist.AllReduce(2.5, ReduceOp::kMean) << " "
      << dist.AgreeOnMin(int64_t{4}) << " " << dist.AllStillHaveData(false) << " "
      << dist.AllGather(9).size();
    dist.CheckStepCounts(0, 3);
    dist.Barrier();
    return s.str();
  });
  EXPECT_THAT(out, ElementsAre("0 1 0 none 1 1 1 1800000 2.5 4 0 1"));
}

TEST(DistributedContextTest, MalformedEnvironmentIsValueErrorNamingTheVariable) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2x", 1);
    return Message([] { DistributedContext::FromEnvironment(); });
  });
  EXPECT_THAT(out, ElementsAre("ValueError: environment variable WORLD_SIZE=\"2x\" is not an "
                               "integer"));
}

TEST(DistributedContextTest, MissingMasterAddrIsValueError) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_PORT", "29500", 1);
    return Message([] { DistributedContext::FromEnvironment(); });
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0], AllOf(StartsWith("ValueError: "), HasSubstr("MASTER_ADDR is not set")));
}

TEST(DistributedContextTest, BadOptionsAreValueErrors) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(1, [port](int) {
    SetTorchrunEnv(0, 2, port);
    DistributedOptions nccl = OnCpu();
    nccl.backend = DistributedBackend::kNccl;
    return Message([] { DistributedContext::FromEnvironment(OnCpu({})); }) + " | " +
           Message([&] { DistributedContext::FromEnvironment(nccl); });
  });
  // Without NCCL compiled in, kNccl is refused as such; with it, for the CPU.
  EXPECT_THAT(out, ElementsAre(AnyOf("ValueError: DistributedOptions.timeout must be > 0 ms, got "
                                     "0 | ValueError: DistributedBackend::kNccl: wds::torch was "
                                     "built without NCCL (it needs a LibTorch with CUDA and "
                                     "NCCL's header nccl.h)",
                                     "ValueError: DistributedOptions.timeout must be > 0 ms, got "
                                     "0 | ValueError: DistributedBackend::kNccl needs a CUDA "
                                     "device, not cpu")));
}

TEST(DistributedContextTest, RendezvousWithoutMasterTimesOut) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(1, [port](int) {
    SetTorchrunEnv(1, 2, port);
    const Clock::time_point start = Clock::now();
    std::string text =
        Message([] { DistributedContext::FromEnvironment(OnCpu(std::chrono::seconds(1))); });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return text + (seconds < 10 ? " | bounded" : " | slow");
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0], AllOf(StartsWith("DistributedError: rendezvous at 127.0.0.1:" +
                                       std::to_string(port) + " timed out on rank 1 of 2"),
                            HasSubstr("(timeout 1000 ms)"), HasSubstr("| bounded")));
}

TEST(DistributedContextTest, TorchrunEnvironmentMeetsOverGloo) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    std::ostringstream s;
    s << dist.rank() << "/" << dist.world_size() << " local " << dist.local_rank() << " "
      << dist.backend() << " " << (dist.launcher() == Launcher::kTorchrun) << " "
      << (dist.process_group() != nullptr);
    for (int64_t v : dist.AllGather(10 * rank + 1)) s << " " << v;
    return s.str();
  });
  EXPECT_THAT(out, ElementsAre("0/2 local 0 gloo 1 1 1 11", "1/2 local 1 gloo 1 1 1 11"));
}

TEST(DistributedContextTest, TorchrunAgentStoreIsJoinedAsAClientByEveryRank) {
  // torchrun's elastic agent serves the store itself and sets
  // TORCHELASTIC_USE_AGENT_STORE=True; here "rank" 2 plays the agent.
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(3, [port](int rank) -> std::string {
    if (rank == 2) {
      c10d::TCPStoreOptions options;
      options.port = static_cast<uint16_t>(port);
      options.isServer = true;
      options.waitWorkers = false;
      c10d::TCPStore agent("127.0.0.1", options);
      // Serves until both ranks say they are done (not for a fixed time, which a loaded
      // machine may overrun).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (agent.add("test_ranks_done", 0) < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return "agent";
    }
    SetTorchrunEnv(rank, 2, port);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu(std::chrono::seconds(4)));
    std::ostringstream s;
    s << dist.rank();
    for (int64_t v : dist.AllGather(10 * rank + 1)) s << " " << v;
    c10d::TCPStoreOptions client;
    client.port = static_cast<uint16_t>(port);
    client.isServer = false;
    c10d::TCPStore("127.0.0.1", client).add("test_ranks_done", 1);
    return s.str();
  });
  EXPECT_THAT(out, ElementsAre("0 1 11", "1 1 11", "agent"));
}

TEST(DistributedContextTest, SlurmEnvironmentMeetsAtFirstNodeWithJobIdPort) {
  const int port = FreePort(kDefaultSlurmPortBase, kDefaultSlurmPortBase + 9999);
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", std::to_string(rank).c_str(), 1);
    setenv("SLURM_JOB_NODELIST", "localhost,node[02-03]", 1);
    setenv("SLURM_JOB_ID", std::to_string(90000 + port - kDefaultSlurmPortBase).c_str(), 1);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    std::ostringstream s;
    s << dist.rank() << "/" << dist.world_size() << " local " << dist.local_rank() << " "
      << (dist.launcher() == Launcher::kSlurm) << " sum "
      << dist.AllReduce(int64_t{rank + 1}, ReduceOp::kSum);
    return s.str();
  });
  EXPECT_THAT(out, ElementsAre("0/2 local 0 1 sum 3", "1/2 local 1 1 sum 3"));
}

TEST(DistributedContextTest, MetricsAndStepAgreementOverThreeRanks) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(3, [port](int rank) {
    SetTorchrunEnv(rank, 3, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    const std::vector<double> d{rank + 0.5, static_cast<double>(-rank)};
    const std::vector<int64_t> i{rank, 10 * rank};
    std::ostringstream s;
    s << "min " << dist.AgreeOnMin(std::vector<int64_t>{12, 7, 9}[rank]);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax}) {
      for (double v : dist.AllReduce(d, op)) s << " " << v;
      s << " |";
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int64_t v : dist.AllReduce(i, op)) s << " " << v;
      s << " |";
    }
    for (int64_t v : dist.AllGather(100 + rank)) s << " " << v;
    s << " | " << Message([&] { dist.AllReduce(i, ReduceOp::kMean); });
    return s.str();
  });
  const std::string expected =
      "min 7 4.5 -3 | 1.5 -1 | 0.5 -2 | 2.5 0 | 3 30 | 0 0 | 2 20 | 100 101 102 | ValueError: "
      "AllReduce: ReduceOp::kMean of int64 values would truncate; reduce doubles";
  EXPECT_THAT(out, ElementsAre(expected, expected, expected));
}

TEST(DistributedContextTest, AllStillHaveDataEndsEveryRankAfterTheSameStep) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(3, [port](int rank) {
    SetTorchrunEnv(rank, 3, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    const int64_t batches = std::vector<int64_t>{5, 3, 4}[rank];
    int64_t steps = 0;
    while (dist.AllStillHaveData(steps < batches)) ++steps;
    dist.CheckStepCounts(/*epoch=*/0, steps);
    return "steps " + std::to_string(steps);
  });
  EXPECT_THAT(out, ElementsAre("steps 3", "steps 3", "steps 3"));
}

TEST(DistributedContextTest, CheckStepCountsNamesEveryRankAndItsCount) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu(std::chrono::seconds(10)));
    dist.CheckStepCounts(/*epoch=*/0, 4);  // agreeing epochs pass
    return Message([&] { dist.CheckStepCounts(/*epoch=*/1, rank == 0 ? 5 : 7); });
  });
  ASSERT_EQ(out.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(out[rank],
                AllOf(StartsWith("DistributedError: CheckStepCounts: the ranks did not run the "
                                 "same number of steps in epoch 1 (seen from rank " +
                                 std::to_string(rank) + " of 2"),
                      HasSubstr("rank 0: 5 steps, rank 1: 7 steps")));
  }
}

// PlanOf is rank `rank`'s plan (of 3, 1 worker, batches of 2) of `urls`
// with `counts` samples each.
RankEpochPlan PlanOf(int rank, const std::vector<std::string>& urls,
                     const std::vector<int64_t>& counts, SplitGranularity split,
                     ShardSplitter nodes = SplitByNode) {
  ShardSampleCounts known;
  for (size_t i = 0; i < urls.size(); ++i) known.Set(urls[i], counts[i]);
  WorkerContext ctx{.rank = rank, .world_size = 3, .num_workers = 1, .epoch = 0, .seed = 5};
  absl::StatusOr<RankEpochPlan> plan =
      PlanRankEpoch(urls, {.nodesplitter = nodes, .split = split}, ctx,
                    {.batch_size = 2, .partial = false}, known);
  if (!plan.ok()) throw std::runtime_error(std::string(plan.status().message()));
  return *std::move(plan);
}

TEST(DistributedContextTest, AgreeOnStepsRefusesRanksThatSeeOtherListsOrCounts) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(3, [port](int rank) {
    SetTorchrunEnv(rank, 3, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu(std::chrono::seconds(10)));
    const std::vector<std::string> urls = {"a.tar", "b.tar", "c.tar", "d.tar"};
    std::ostringstream s;
    // Alike: the steps are agreed.
    absl::StatusOr<EqualizedSteps> alike = AgreeOnSteps(
        dist, PlanOf(rank, urls, {6, 5, 7, 6}, SplitGranularity::kSamples), EqualizePolicy::kDrop);
    s << (alike.ok() ? "steps " + std::to_string(alike->steps) : alike.status().ToString());
    // Rank 2 reads a stale index: one count differs.
    const std::vector<int64_t> stale =
        rank == 2 ? std::vector<int64_t>{6, 5, 9, 6} : std::vector<int64_t>{6, 5, 7, 6};
    absl::StatusOr<EqualizedSteps> counts = AgreeOnSteps(
        dist, PlanOf(rank, urls, stale, SplitGranularity::kSamples), EqualizePolicy::kDrop);
    s << " | " << counts.status().ToString();
    // Rank 0 lists one shard fewer (whole shards: only the URLs count).
    std::vector<std::string> listed = urls;
    if (rank == 0) listed.pop_back();
    absl::StatusOr<EqualizedSteps> list = AgreeOnSteps(
        dist, PlanOf(rank, listed, {6, 5, 7, 6}, SplitGranularity::kShards), EqualizePolicy::kWrap);
    s << " | " << list.status().ToString();
    // Without a node split each rank reads its own list: they may differ.
    std::vector<std::string> own = {urls[rank]};
    absl::StatusOr<EqualizedSteps> mine =
        AgreeOnSteps(dist, PlanOf(rank, own, {4 + 2 * rank}, SplitGranularity::kShards, nullptr),
                     EqualizePolicy::kDrop);
    s << " | " << (mine.ok() ? "steps " + std::to_string(mine->steps) : mine.status().ToString());
    // Padded: the largest rank's batches (2, 3 and 4 of them).
    absl::StatusOr<EqualizedSteps> padded =
        AgreeOnSteps(dist, PlanOf(rank, own, {4 + 2 * rank}, SplitGranularity::kShards, nullptr),
                     EqualizePolicy::kPad);
    s << " | "
      << (padded.ok() ? "pad " + std::to_string(padded->steps) : padded.status().ToString());
    return s.str();
  });
  const std::string advice =
      "), so their shares would overlap or leave samples out: give every rank the same list and "
      "the same dataset index (a stale copy of the index, or a directory listed while shards are "
      "written, differ)";
  const std::string expected =
      "steps 4 | FAILED_PRECONDITION: the ranks do not see the same shard list and counts (ranks "
      "[0, 1] 4 shards, 24 samples; ranks [2] 4 shards, 26 samples" +
      advice +
      " | FAILED_PRECONDITION: the ranks do not see the same shard list and counts (ranks [0] 3 "
      "shards; ranks [1, 2] 4 shards" +
      advice + " | steps 2 | pad 4";
  EXPECT_THAT(out, ElementsAre(expected, expected, expected));
}

TEST(DistributedContextTest, SilentPeerTimesOutNamingTheOperation) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist =
        DistributedContext::FromEnvironment(OnCpu(std::chrono::milliseconds(1500)));
    dist.AllStillHaveData(true);
    if (rank == 1) {
      // Alive, but in no collective, for long enough that rank 0's timeout
      // comes first even on a loaded machine.
      std::this_thread::sleep_for(std::chrono::seconds(6));
      return std::string("slept");
    }
    const Clock::time_point start = Clock::now();
    std::string text = Message([&] { dist.AllStillHaveData(true); });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return text + (seconds >= 1.4 && seconds < 5.5 ? " | after the timeout" : " | too early/late");
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0], AllOf(StartsWith("DistributedError: AllStillHaveData (all-reduce min of a "
                                       "flag) timed out on rank 0 of 2 after "),
                            HasSubstr("(timeout 1500 ms)"),
                            HasSubstr("No other rank has reported the end of an epoch"),
                            HasSubstr("| after the timeout")));
  EXPECT_EQ(out[1], "slept");
}

TEST(DistributedContextTest, PeerThatExitsIsAnErrorNotAHang) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu(std::chrono::seconds(20)));
    dist.Barrier();
    if (rank == 1) return std::string("left");
    return Message([&] { dist.AgreeOnMin(int64_t{3}); });
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0], StartsWith("DistributedError: AgreeOnMin (all-reduce min of the step "
                                 "counts) failed on rank 0 of 2 after "));
  EXPECT_EQ(out[1], "left");
}

TEST(GradientSyncTest, BroadcastThenOneStepLeavesIdenticalParameters) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    const int port = FreePort();
    std::vector<std::string> out = RunRanks(world, [port, world](int rank) {
      SetTorchrunEnv(rank, world, port);
      DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
      Net net = MakeNet(100 + rank);
      const std::string before = Fingerprint(net->parameters());
      GradientSync grads(dist, *net, {.bucket_bytes = 64});
      const std::string broadcast = Fingerprint(net->parameters()) + Fingerprint(net->buffers());
      torch::optim::SGD optimizer(net->parameters(), 0.1);
      torch::manual_seed(rank);
      const torch::Tensor x = torch::randn({4, 6});
      const torch::Tensor y = torch::randn({4, 3});
      optimizer.zero_grad();
      torch::mse_loss(net->forward(x), y).backward();
      grads.Synchronize();
      optimizer.step();
      return before + " " + broadcast + " " + Fingerprint(net->parameters()) + " buckets " +
             std::to_string(grads.num_buckets()) + " steps " + std::to_string(grads.steps());
    });
    ASSERT_EQ(static_cast<int>(out.size()), world);
    std::vector<std::string> befores;
    std::vector<std::string> rests;
    for (const std::string& line : out) {
      befores.push_back(line.substr(0, line.find(' ')));
      rests.push_back(line.substr(line.find(' ') + 1));
    }
    for (int r = 1; r < world; ++r) {
      EXPECT_NE(befores[r], befores[0]) << "initial weights should differ before the broadcast";
      EXPECT_EQ(rests[r], rests[0]) << out[r];
    }
    EXPECT_THAT(rests[0], HasSubstr(" buckets 4 steps 1"));
  }
}

// TrainAccumulated runs `steps` optimizer steps of k micro-batches per rank
// with a GradientSync and returns the parameters' distance to one process
// training on all ranks' data as one batch, and to a rank training alone.
std::string TrainAccumulated(const DistributedContext& dist, GradientSyncOptions options) {
  constexpr int kMicro = 3;
  constexpr int kBatch = 4;
  constexpr int kSteps = 2;
  const int world = dist.world_size();
  Net net = MakeNet(100 + dist.rank());
  Net reference = MakeNet(100);  // rank 0's initial weights, which the broadcast spreads
  Net alone = MakeNet(100);
  GradientSync grads(dist, *net, options);
  torch::optim::SGD opt(net->parameters(), 0.5);
  torch::optim::SGD opt_reference(reference->parameters(), 0.5);
  torch::optim::SGD opt_alone(alone->parameters(), 0.5);
  for (int step = 0; step < kSteps; ++step) {
    torch::manual_seed(7 + step);  // the same global batch on every rank
    const torch::Tensor x = torch::randn({world * kMicro * kBatch, 6});
    const torch::Tensor y = torch::randn({world * kMicro * kBatch, 3});
    opt.zero_grad();
    opt_alone.zero_grad();
    for (int micro = 0; micro < kMicro; ++micro) {
      const int64_t first = (dist.rank() * kMicro + micro) * kBatch;
      const torch::Tensor xm = x.narrow(0, first, kBatch);
      const torch::Tensor ym = y.narrow(0, first, kBatch);
      grads.set_sync(micro == kMicro - 1);
      (torch::mse_loss(net->forward(xm), ym) / kMicro).backward();
      (torch::mse_loss(alone->forward(xm), ym) / kMicro).backward();
    }
    grads.Synchronize();
    opt.step();
    opt_alone.step();
    opt_reference.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    opt_reference.step();
  }
  const double synced = MaxDiff(net->parameters(), reference->parameters());
  const double local = MaxDiff(alone->parameters(), reference->parameters());
  return std::string(synced < 1e-6 ? "matches" : "differs: " + std::to_string(synced)) +
         (local > 1e-3 ? " (alone differs)" : " (alone matches too: test is blind)") + " steps " +
         std::to_string(grads.steps());
}

TEST(GradientSyncTest, AccumulationMatchesOneLargeBatch) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    return TrainAccumulated(dist, {.bucket_bytes = 64, .overlap = true}) + " | " +
           TrainAccumulated(dist, {.bucket_bytes = 25 << 20, .overlap = false});
  });
  const std::string expected = "matches (alone differs) steps 2 | matches (alone differs) steps 2";
  EXPECT_THAT(out, ElementsAre(expected, expected));
}

TEST(GradientSyncTest, NoSyncScopeDefersCommunication) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    Net net = MakeNet(1);
    GradientSync grads(dist, *net);
    torch::manual_seed(rank);
    {
      GradientSync::NoSync scope(grads);
      torch::mse_loss(net->forward(torch::randn({2, 6})), torch::zeros({2, 3})).backward();
      torch::mse_loss(net->forward(torch::randn({2, 6})), torch::zeros({2, 3})).backward();
    }
    const bool restored = grads.sync();
    grads.Synchronize();
    return std::string(restored ? "sync restored " : "sync lost ") +
           Fingerprint({net->fc1->weight.grad()});
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0], StartsWith("sync restored "));
  EXPECT_EQ(out[0], out[1]);
}

TEST(GradientSyncTest, SecondSynchronisedBackwardIsAnError) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    Net net = MakeNet(1);
    GradientSync grads(dist, *net);
    auto backward = [&] {
      torch::mse_loss(net->forward(torch::ones({2, 6})), torch::zeros({2, 3})).backward();
    };
    backward();
    return Message(backward);
  });
  ASSERT_EQ(out.size(), 2u);
  for (const std::string& text : out) {
    EXPECT_THAT(text, AllOf(StartsWith("c10::Error: GradientSync: the gradient of fc"),
                            HasSubstr(" was accumulated twice in one synchronised step")));
  }
}

TEST(GradientSyncTest, UnequalStepCountsAreReportedWithEachRanksCount) {
  const int port = FreePort();
  std::vector<std::string> out = RunRanks(2, [port](int rank) {
    SetTorchrunEnv(rank, 2, port);
    DistributedContext dist =
        DistributedContext::FromEnvironment(OnCpu(std::chrono::milliseconds(1500)));
    Net net = MakeNet(1);
    GradientSync grads(dist, *net);
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    const int batches = rank == 0 ? 4 : 2;  // no equalization: rank 1 runs out first
    return Message([&] {
      int steps = 0;
      for (; steps < batches; ++steps) {
        optimizer.zero_grad();
        torch::mse_loss(net->forward(torch::ones({2, 6})), torch::zeros({2, 3})).backward();
        grads.Synchronize();
        optimizer.step();
      }
      dist.CheckStepCounts(/*epoch=*/0, steps);
    });
  });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0], AllOf(StartsWith("DistributedError: GradientSync all-reduce of gradient "
                                       "bucket 0 of 1 (332 bytes) in step 3"),
                            HasSubstr("timed out on rank 0 of 2"),
                            HasSubstr("Other ranks reported: rank 1 finished epoch 0 after 2 "
                                      "steps")));
  EXPECT_THAT(out[1], AllOf(StartsWith("DistributedError: CheckStepCounts: the ranks did not run "
                                       "the same number of steps in epoch 0"),
                            HasSubstr("rank 0: did not report"), HasSubstr("rank 1: 2 steps")));
}

TEST(GradientSyncTest, SingleProcessLeavesGradientsAlone) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    Net net = MakeNet(1);
    GradientSync grads(dist, *net);
    torch::mse_loss(net->forward(torch::ones({2, 6})), torch::zeros({2, 3})).backward();
    const std::string before = Fingerprint({net->fc1->weight.grad()});
    grads.Synchronize();
    return std::string(before == Fingerprint({net->fc1->weight.grad()}) ? "unchanged" : "changed") +
           " buckets " + std::to_string(grads.num_buckets()) + " steps " +
           std::to_string(grads.steps());
  });
  EXPECT_THAT(out, ElementsAre("unchanged buckets 0 steps 1"));
}

TEST(GradientSyncTest, ZeroBucketBytesIsValueError) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    DistributedContext dist = DistributedContext::FromEnvironment(OnCpu());
    Net net = MakeNet(1);
    return Message([&] { GradientSync grads(dist, *net, {.bucket_bytes = 0}); });
  });
  EXPECT_THAT(out, ElementsAre("ValueError: GradientSyncOptions.bucket_bytes must be >= 1, got 0"));
}

TEST(LoadModuleTest, ReadsACheckpointOntoTheDevice) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/net.pt";
  std::vector<std::string> out = RunRanks(1, [path](int) {
    Net saved = MakeNet(1);
    torch::save(saved, path);
    Net loaded = MakeNet(2);
    const bool differed = Fingerprint(loaded->parameters()) != Fingerprint(saved->parameters());
    LoadModule(*loaded, path, torch::Device(torch::kCPU));
    const bool same = Fingerprint(loaded->parameters()) == Fingerprint(saved->parameters()) &&
                      Fingerprint(loaded->buffers()) == Fingerprint(saved->buffers());
    return std::string(differed && same ? "restored" : "not restored") + " on " +
           loaded->fc1->weight.device().str();
  });
  EXPECT_THAT(out, ElementsAre("restored on cpu"));
}

TEST(SelectLocalDeviceTest, CpuWithoutCudaAndNegativeIsValueError) {
  std::vector<std::string> out = RunRanks(1, [](int) {
    const bool cuda = torch::cuda::is_available();
    const torch::Device device = SelectLocalDevice(0);
    return std::string(cuda == device.is_cuda() ? "consistent" : "inconsistent") + " | " +
           Message([] { SelectLocalDevice(-1); });
  });
  EXPECT_THAT(out, ElementsAre("consistent | ValueError: local rank -1 must be >= 0"));
}

}  // namespace
}  // namespace wds
