#include "wds/torch/distributed.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/serialize/input-archive.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>
#include <utility>
#include <vector>

#include "loader/launcher_env.h"
#include "torch/distributed_impl.h"
#include "torch/torch_errors.h"
#include "wds/internal/base/strings.h"

#if defined(WDS_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace wds {
namespace {

#if defined(WDS_WITH_NCCL)
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

int64_t MillisecondsSince(DistClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(DistClock::now() - start).count();
}

bool SaysTimedOut(std::string_view message) {
  const std::string lower = AsciiLower(message);
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  if (!result.ok()) ThrowValueError(std::string(ToStd(result.status().message())));
  return *std::move(result);
}

void MakeCurrent(const torch::Device& device) {
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

// UseDevice checks an explicitly chosen device and makes a GPU current.
torch::Device UseDevice(const torch::Device& device) {
  if (device.is_cuda()) {
    if (!torch::cuda::is_available()) {
      ThrowValueError(
          Cat("DistributedOptions.device is ", device.str(), " but LibTorch sees no CUDA device"));
    }
    MakeCurrent(device.has_index() ? device : torch::Device(torch::kCUDA, 0));
  }
  return device;
}

DistributedBackend ChooseBackend(DistributedBackend requested, const torch::Device& device) {
  switch (requested) {
    case DistributedBackend::kGloo:
      return DistributedBackend::kGloo;
    case DistributedBackend::kNccl:
      if (!kHaveNccl) {
        ThrowValueError(
            "DistributedBackend::kNccl: wds::torch was built without NCCL (it needs a LibTorch "
            "with CUDA and NCCL's header nccl.h)");
      }
      if (!device.is_cuda()) {
        ThrowValueError(Cat("DistributedBackend::kNccl needs a CUDA device, not ", device.str()));
      }
      return DistributedBackend::kNccl;
    case DistributedBackend::kAuto:
      break;
  }
  return kHaveNccl && device.is_cuda() ? DistributedBackend::kNccl : DistributedBackend::kGloo;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || StartsWith(host, "127.");
}

std::shared_ptr<::gloo::transport::Device> MakeGlooDevice(std::string interface,
                                                          const std::string& master) {
  if (interface.empty()) {
    if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env != nullptr) interface = env;
  }
  if (!interface.empty()) return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  if (IsLoopback(master)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// AsGroup returns `backend` as the ProcessGroup that callers hold. LibTorch 1
// has one class for both; from LibTorch 2 the backends (Gloo, NCCL) derive
// from c10d::Backend and a ProcessGroup dispatches each collective to the
// backend of its tensors' device type.
template <typename B>
c10::intrusive_ptr<c10d::ProcessGroup> AsGroup(c10::intrusive_ptr<B> backend,
                                               const DistributedContext::Impl& impl,
                                               std::initializer_list<c10::DeviceType> devices) {
#if TORCH_VERSION_MAJOR >= 2
  constexpr auto kType = std::is_same_v<B, c10d::ProcessGroupGloo>
                             ? c10d::ProcessGroup::BackendType::GLOO
                             : c10d::ProcessGroup::BackendType::NCCL;
  auto group = c10::make_intrusive<c10d::ProcessGroup>(impl.store, impl.placement.rank,
                                                       impl.placement.world_size);
  const c10::intrusive_ptr<c10d::Backend> as_backend = std::move(backend);
  for (c10::DeviceType device : devices) group->setBackend(device, kType, as_backend);
  group->setDefaultBackend(kType);
  return group;
#else
  (void)impl;
  (void)devices;
  return backend;
#endif
}

c10::intrusive_ptr<c10d::ProcessGroup> MakeGroup(const DistributedContext::Impl& impl,
                                                 DistributedBackend backend,
                                                 const DistributedOptions& options,
                                                 const Rendezvous& rendezvous) {
  const int rank = impl.placement.rank;
  const int world = impl.placement.world_size;
#if defined(WDS_WITH_NCCL)
  if (backend == DistributedBackend::kNccl) {
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = impl.timeout;
    return AsGroup(c10::make_intrusive<c10d::ProcessGroupNCCL>(impl.store, rank, world, nccl_options),
                   impl, {c10::DeviceType::CUDA});
  }
#endif
  (void)backend;
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(impl.timeout);
  gloo_options->devices.push_back(MakeGlooDevice(options.gloo_interface, rendezvous.addr));
  // Gloo reduces CUDA tensors too (through host memory), as on LibTorch 1.
  return AsGroup(c10::make_intrusive<c10d::ProcessGroupGloo>(impl.store, rank, world, gloo_options),
                 impl, {c10::DeviceType::CPU, c10::DeviceType::CUDA});
}

// OpenStore starts rank 0's store, or connects to it before `start` + the
// timeout. The client is retried here because LibTorch 1.13's gives up at the
// first refused connection when less than its 1 s retry interval is left, and
// rank 0 may simply not be listening yet.
c10::intrusive_ptr<c10d::Store> OpenStore(const DistributedContext::Impl& impl,
                                          const Rendezvous& rendezvous,
                                          DistClock::time_point start) {
  constexpr auto kRetryDelay = std::chrono::milliseconds(100);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(rendezvous.port);
  // Under torchrun the elastic agent already serves a store at the master
  // address and says so; rank 0 then joins it as a client like everyone else.
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_serves = agent_store != nullptr && std::string_view(agent_store) == "True";
  store_options.isServer = impl.placement.rank == 0 && !agent_serves;
  store_options.numWorkers = impl.placement.world_size;
  const DistClock::time_point deadline = start + impl.timeout;
  while (true) {
    store_options.timeout = std::max(
        std::chrono::milliseconds(1),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - DistClock::now()));
    try {
      c10::intrusive_ptr<c10d::Store> store =
          c10::make_intrusive<c10d::TCPStore>(rendezvous.addr, store_options);
      store->setTimeout(impl.timeout);
      // Our keys stay apart from the agent's own in its shared store.
      if (agent_serves) store = c10::make_intrusive<c10d::PrefixStore>("wds", store);
      return store;
    } catch (const std::exception&) {
      if (store_options.isServer || DistClock::now() + kRetryDelay >= deadline) throw;
    }
    std::this_thread::sleep_for(kRetryDelay);
  }
}

// Connect meets the other ranks at rank 0's store and creates the group.
void Connect(DistributedContext::Impl& impl, const DistributedOptions& options) {
  const Rendezvous rendezvous = ValueOrThrow(ResolveRendezvous(options.placement));
  const DistributedBackend backend = ChooseBackend(options.backend, impl.device);
  const DistClock::time_point start = DistClock::now();
  const std::string operation = Cat("rendezvous at ", rendezvous.addr, ":", rendezvous.port);
  try {
    impl.store = OpenStore(impl, rendezvous, start);
    impl.group = MakeGroup(impl, backend, options, rendezvous);
  } catch (const std::exception& e) {
    impl.Fail(operation, CauseOf(e), start);
  }
  impl.backend = backend == DistributedBackend::kNccl ? "nccl" : "gloo";
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      break;
  }
  return c10d::ReduceOp::SUM;
}

const char* OpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

template <typename T>
constexpr torch::Dtype kDtypeOf = std::is_same_v<T, double> ? torch::kFloat64 : torch::kInt64;

// ReduceValues all-reduces `values` in place under the name `operation`.
template <typename T>
void ReduceValues(const DistributedContext::Impl& impl, std::vector<T>& values, ReduceOp op,
                  std::string_view operation) {
  if (impl.group == nullptr || values.empty()) return;
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<torch::Tensor> tensors{
      torch::from_blob(values.data(), {n}, kDtypeOf<T>)
          .to(impl.collective_device(), kDtypeOf<T>, /*non_blocking=*/false, /*copy=*/true)};
  c10d::AllreduceOptions options;
  options.reduceOp = ToC10d(op);
  const DistClock::time_point start = DistClock::now();
  impl.Wait(impl.Launch(operation, start, [&] { return impl.group->allreduce(tensors, options); }),
            operation, start);
  const torch::Tensor result = tensors[0].to(torch::kCPU).contiguous();
  std::memcpy(values.data(), result.data_ptr<T>(), values.size() * sizeof(T));
}

std::string StepsKey(int64_t epoch, int rank) { return Cat("wds/steps/", epoch, "/", rank); }
std::string EpochEndKey(int rank) { return Cat("wds/epoch_end/", rank); }

void SetText(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

// ReadText returns the value of `key` if it is there, without waiting.
std::optional<std::string> ReadText(c10d::Store& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  const std::vector<uint8_t> bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

// StepCountsOf reads every rank's published count for `epoch`; nullopt for a
// rank that has not published one (or when the store cannot be read).
std::vector<std::optional<int64_t>> StepCountsOf(c10d::Store& store, int64_t epoch, int world) {
  std::vector<std::optional<int64_t>> counts(world);
  for (int r = 0; r < world; ++r) {
    try {
      if (std::optional<std::string> text = ReadText(store, StepsKey(epoch, r))) {
        counts[r] = std::stoll(*text);
      }
    } catch (const std::exception&) {
      counts[r] = std::nullopt;
    }
  }
  return counts;
}

std::string DescribeCounts(const std::vector<std::optional<int64_t>>& counts,
                           std::chrono::milliseconds timeout) {
  std::string out;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (!out.empty()) out += ", ";
    out += counts[r].has_value()
               ? Cat("rank ", r, ": ", *counts[r], " steps")
               : Cat("rank ", r, ": did not report a step count (waited up to ", timeout.count(),
                     " ms: still in a step's collective, or gone)");
  }
  return out;
}

// BroadcastGroup broadcasts tensors of one dtype and device through one flat
// buffer and copies root's values back into them.
void BroadcastGroup(const DistributedContext::Impl& impl, const std::vector<torch::Tensor>& group,
                    int root) {
  std::vector<torch::Tensor> pieces;
  for (const torch::Tensor& t : group) pieces.push_back(t.reshape({-1}));
  std::vector<torch::Tensor> flat{torch::cat(pieces).to(impl.collective_device())};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  const std::string operation = Cat("Broadcast from rank ", root, " (", flat[0].numel(), " ",
                                    c10::toString(flat[0].scalar_type()), " values)");
  const DistClock::time_point start = DistClock::now();
  impl.Wait(impl.Launch(operation, start, [&] { return impl.group->broadcast(flat, options); }),
            operation, start);
  int64_t offset = 0;
  for (const torch::Tensor& t : group) {
    t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

std::string CauseOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

void ThrowDistributedError(std::string message) {
  throw DistributedError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, std::move(message));
}

torch::Device DistributedContext::Impl::collective_device() const {
  return backend == "nccl" ? device : torch::Device(torch::kCPU);
}

c10::intrusive_ptr<c10d::Work> DistributedContext::Impl::Launch(
    std::string_view operation, DistClock::time_point start,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& launch) const {
  try {
    return launch();
  } catch (const std::exception& e) {
    Fail(operation, CauseOf(e), start);
  }
}

void DistributedContext::Impl::Wait(const c10::intrusive_ptr<c10d::Work>& work,
                                    std::string_view operation, DistClock::time_point start) const {
  try {
    work->wait(2 * timeout);
  } catch (const std::exception& e) {
    Fail(operation, CauseOf(e), start);
  }
}

void DistributedContext::Impl::Fail(std::string_view operation, std::string_view cause,
                                    DistClock::time_point start) const {
  const int64_t waited = MillisecondsSince(start);
  // Backends may give up before the full timeout (TCPStore's client does, by
  // its retry interval) but say so in their message.
  const char* outcome = waited >= timeout.count() || SaysTimedOut(cause) ? "timed out" : "failed";
  std::string message =
      Cat(operation, " ", outcome, " on rank ", placement.rank, " of ", placement.world_size,
          " after ", waited, " ms (timeout ", timeout.count(), " ms): ", cause);
  const std::string peers = PeerReport();
  if (!peers.empty()) message += Cat(". ", peers);
  ThrowDistributedError(std::move(message));
}

std::string DistributedContext::Impl::PeerReport() const {
  if (store == nullptr) return "";
  std::string reports;
  try {
    for (int r = 0; r < placement.world_size; ++r) {
      if (r == placement.rank) continue;
      if (std::optional<std::string> text = ReadText(*store, EpochEndKey(r))) {
        reports += Cat(reports.empty() ? "" : "; ", "rank ", r, " finished ", *text);
      }
    }
  } catch (const std::exception& e) {
    return Cat("The other ranks' step counts are unknown (the store failed: ", CauseOf(e), ")");
  }
  if (reports.empty()) return "No other rank has reported the end of an epoch (CheckStepCounts)";
  return Cat("Other ranks reported: ", reports);
}

DistributedContext::DistributedContext(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistributedContext::DistributedContext(DistributedContext&&) noexcept = default;
DistributedContext& DistributedContext::operator=(DistributedContext&&) noexcept = default;
DistributedContext::~DistributedContext() = default;

DistributedContext DistributedContext::FromEnvironment(const DistributedOptions& options) {
  auto impl = std::make_shared<Impl>();
  impl->placement =
      ValueOrThrow(ResolvePlacement(options.placement, "DistributedOptions.placement"));
  impl->local_rank = ValueOrThrow(
      ResolveLocalRank(options.placement.local_rank, "DistributedOptions.placement.local_rank"));
  if (options.timeout.count() <= 0) {
    ThrowValueError(
        Cat("DistributedOptions.timeout must be > 0 ms, got ", options.timeout.count()));
  }
  impl->timeout = options.timeout;
  impl->device =
      options.device.has_value() ? UseDevice(*options.device) : SelectLocalDevice(impl->local_rank);
  if (impl->placement.world_size > 1) Connect(*impl, options);
  return DistributedContext(std::move(impl));
}

int DistributedContext::rank() const { return impl_->placement.rank; }
int DistributedContext::world_size() const { return impl_->placement.world_size; }
int DistributedContext::local_rank() const { return impl_->local_rank; }
Launcher DistributedContext::launcher() const { return impl_->placement.launcher; }
const torch::Device& DistributedContext::device() const { return impl_->device; }
const std::string& DistributedContext::backend() const { return impl_->backend; }
std::chrono::milliseconds DistributedContext::timeout() const { return impl_->timeout; }
c10d::ProcessGroup* DistributedContext::process_group() const { return impl_->group.get(); }

void DistributedContext::Broadcast(const std::vector<torch::Tensor>& tensors, int root) const {
  if (root < 0 || root >= world_size()) {
    ThrowValueError(Cat("Broadcast root ", root, " is not in [0, ", world_size(), ")"));
  }
  if (impl_->group == nullptr) return;
  torch::NoGradGuard no_grad;
  // One broadcast per (dtype, device): tensors of one group share a flat buffer.
  std::vector<std::vector<torch::Tensor>> groups;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined()) continue;
    auto same = [&](const std::vector<torch::Tensor>& g) {
      return g[0].scalar_type() == t.scalar_type() && g[0].device() == t.device();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) it = groups.insert(groups.end(), std::vector<torch::Tensor>{});
    it->push_back(t);
  }
  for (const std::vector<torch::Tensor>& group : groups) BroadcastGroup(*impl_, group, root);
}

std::vector<double> DistributedContext::AllReduce(std::vector<double> values, ReduceOp op) const {
  ReduceValues(*impl_, values, op,
               Cat("AllReduce (", OpName(op), " of ", values.size(), " doubles)"));
  if (op == ReduceOp::kMean && impl_->group != nullptr) {
    for (double& v : values) v /= world_size();
  }
  return values;
}

std::vector<int64_t> DistributedContext::AllReduce(std::vector<int64_t> values, ReduceOp op) const {
  if (op == ReduceOp::kMean) {
    ThrowValueError("AllReduce: ReduceOp::kMean of int64 values would truncate; reduce doubles");
  }
  ReduceValues(*impl_, values, op,
               Cat("AllReduce (", OpName(op), " of ", values.size(), " int64 values)"));
  return values;
}

double DistributedContext::AllReduce(double value, ReduceOp op) const {
  return AllReduce(std::vector<double>{value}, op)[0];
}

int64_t DistributedContext::AllReduce(int64_t value, ReduceOp op) const {
  return AllReduce(std::vector<int64_t>{value}, op)[0];
}

std::vector<int64_t> DistributedContext::AllGather(int64_t value) const {
  if (impl_->group == nullptr) return {value};
  const auto options =
      torch::TensorOptions().dtype(torch::kInt64).device(impl_->collective_device());
  std::vector<torch::Tensor> input{torch::full({1}, value, options)};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int r = 0; r < world_size(); ++r) output[0].push_back(torch::empty({1}, options));
  const std::string operation = "AllGather (of one int64 value per rank)";
  const DistClock::time_point start = DistClock::now();
  impl_->Wait(
      impl_->Launch(operation, start, [&] { return impl_->group->allgather(output, input); }),
      operation, start);
  std::vector<int64_t> values;
  for (const torch::Tensor& t : output[0]) values.push_back(t.to(torch::kCPU).item<int64_t>());
  return values;
}

int64_t DistributedContext::AgreeOnMin(int64_t local) const {
  std::vector<int64_t> values{local};
  ReduceValues(*impl_, values, ReduceOp::kMin, "AgreeOnMin (all-reduce min of the step counts)");
  return values[0];
}

bool DistributedContext::AllStillHaveData(bool mine) const {
  std::vector<int64_t> flag{mine ? 1 : 0};
  ReduceValues(*impl_, flag, ReduceOp::kMin, "AllStillHaveData (all-reduce min of a flag)");
  return flag[0] == 1;
}

void DistributedContext::CheckStepCounts(int64_t epoch, int64_t steps) const {
  if (impl_->store == nullptr) return;
  const Impl& impl = *impl_;
  const int world = world_size();
  const DistClock::time_point start = DistClock::now();
  const std::string operation = Cat("CheckStepCounts (epoch ", epoch, ", ", steps, " steps)");
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(StepsKey(epoch, r));
  try {
    SetText(*impl.store, keys[rank()], std::to_string(steps));
    SetText(*impl.store, EpochEndKey(rank()), Cat("epoch ", epoch, " after ", steps, " steps"));
  } catch (const std::exception& e) {
    impl.Fail(operation, CauseOf(e), start);
  }
  bool all_reported = true;
  try {
    impl.store->wait(keys, impl.timeout);
  } catch (const std::exception&) {
    all_reported = false;
  }
  std::vector<std::optional<int64_t>> counts = StepCountsOf(*impl.store, epoch, world);
  counts[rank()] = steps;
  bool agree = all_reported;
  for (const std::optional<int64_t>& count : counts) agree = agree && count == steps;
  if (agree) return;
  ThrowDistributedError(
      Cat("CheckStepCounts: the ranks did not run the same number of steps in "
          "epoch ",
          epoch, " (seen from rank ", rank(), " of ", world, " after ", MillisecondsSince(start),
          " ms): ", DescribeCounts(counts, impl.timeout)));
}

void DistributedContext::Barrier() const {
  if (impl_->group == nullptr) return;
  const DistClock::time_point start = DistClock::now();
  impl_->Wait(impl_->Launch("Barrier", start, [&] { return impl_->group->barrier(); }), "Barrier",
              start);
}

torch::Device SelectLocalDevice(int local_rank) {
  if (local_rank < 0) ThrowValueError(Cat("local rank ", local_rank, " must be >= 0"));
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  const int count = static_cast<int>(torch::cuda::device_count());
  if (local_rank >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    ThrowValueError(Cat("local rank ", local_rank, " has no GPU of its own: ", count,
                        " visible (CUDA_VISIBLE_DEVICES=", visible ? visible : "<unset>",
                        "); to share GPUs, set DistributedOptions.device with the Gloo backend"));
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  MakeCurrent(device);
  return device;
}

void BroadcastParameters(const DistributedContext& context, torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (torch::Tensor& buffer : module.buffers()) tensors.push_back(buffer);
  context.Broadcast(tensors, 0);
}

void LoadModule(torch::nn::Module& module, const std::string& path, const torch::Device& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(path, torch::Device(torch::kCPU));
  module.load(archive);
  module.to(device);
}

}  // namespace wds
