// GradientSync: DistributedDataParallel's gradient averaging for C++.
//
// Overlap uses the hook DDP itself uses: a post hook on each parameter's
// gradient accumulator (AccumulateGrad), which runs once the gradient of this
// backward pass has been added into param.grad(). A tensor hook
// (Tensor::register_hook) would not do: it sees the incoming gradient before
// accumulation, not the sum that micro-batches built up.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "torch/distributed_impl.h"
#include "torch/torch_errors.h"
#include "wds/internal/base/strings.h"
#include "wds/torch/distributed.h"

namespace wds {

class GradientSync::State : public std::enable_shared_from_this<State> {
 public:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    size_t bucket = 0;
    bool ready = false;  // its gradient was accumulated in this synchronised step
  };

  State(std::shared_ptr<const DistributedContext::Impl> context, std::vector<Param> params,
        int64_t bucket_bytes);
  ~State();

  // InstallHooks makes each gradient accumulator call MarkReady.
  void InstallHooks();
  void MarkReady(size_t index);
  void Synchronize();

  void set_sync(bool sync) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_ = sync;
  }
  bool sync() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sync_;
  }
  int64_t steps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_;
  }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> members;   // indices into params_
    std::vector<int64_t> offsets;  // each member's first element in `flat`
    int64_t numel = 0;
    int64_t bytes = 0;
    torch::Tensor flat;
    size_t pending = 0;  // members not ready yet in this step
    c10::intrusive_ptr<c10d::Work> work;
    DistClock::time_point launched;
  };

  void BuildBuckets(int64_t bucket_bytes);
  bool StartsNewBucket(const torch::Tensor& t, int64_t bytes, int64_t bucket_bytes) const;
  std::string BucketName(size_t index) const;
  // Launch copies bucket `index`'s gradients into its flat buffer, divides by
  // the world size and starts the all-reduce. REQUIRES: mu_ held.
  void Launch(size_t index);
  void WaitAndCopyBack(size_t index);
  void ResetStep();

  const std::shared_ptr<const DistributedContext::Impl> context_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  mutable std::mutex mu_;  // backward may run the hooks on an autograd device thread
  size_t next_launch_ = 0;
  bool sync_ = true;
  int64_t steps_ = 0;
};

namespace {

class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<GradientSync::State> state, size_t index)
      : state_(std::move(state)), index_(index) {}

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    if (std::shared_ptr<GradientSync::State> state = state_.lock()) state->MarkReady(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GradientSync::State> state_;
  size_t index_;
};

}  // namespace

GradientSync::State::State(std::shared_ptr<const DistributedContext::Impl> context,
                           std::vector<Param> params, int64_t bucket_bytes)
    : context_(std::move(context)), params_(std::move(params)) {
  if (context_->group != nullptr) BuildBuckets(bucket_bytes);
}

GradientSync::State::~State() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

bool GradientSync::State::StartsNewBucket(const torch::Tensor& t, int64_t bytes,
                                          int64_t bucket_bytes) const {
  if (buckets_.empty()) return true;
  const Bucket& last = buckets_.back();
  const torch::Tensor& first = params_[last.members.front()].tensor;
  return last.bytes + bytes > bucket_bytes || first.scalar_type() != t.scalar_type() ||
         first.device() != t.device();
}

// Buckets take the parameters in reverse order, the order in which backward
// produces their gradients, so that early buckets can start early.
void GradientSync::State::BuildBuckets(int64_t bucket_bytes) {
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& t = params_[k].tensor;
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    if (StartsNewBucket(t, bytes, bucket_bytes)) buckets_.emplace_back();
    Bucket& bucket = buckets_.back();
    bucket.members.push_back(k);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += t.numel();
    bucket.bytes += bytes;
    params_[k].bucket = buckets_.size() - 1;
  }
  for (Bucket& bucket : buckets_) {
    const torch::Tensor& first = params_[bucket.members.front()].tensor;
    bucket.flat = torch::empty(
        {bucket.numel}, torch::TensorOptions().dtype(first.scalar_type()).device(first.device()));
  }
  ResetStep();
}

void GradientSync::State::InstallHooks() {
  for (size_t k = 0; k < params_.size(); ++k) {
    // The variable holds its accumulator weakly: keep it, or the hook goes
    // with it.
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params_[k].tensor);
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<ReadyHook>(weak_from_this(), k)));
    accumulators_.push_back(std::move(accumulator));
  }
}

void GradientSync::State::MarkReady(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) return;
  Param& param = params_[index];
  TORCH_CHECK(!param.ready, "GradientSync: the gradient of ", param.name,
              " was accumulated twice in one synchronised step; call Synchronize() after each "
              "synchronised backward, and set_sync(false) for the backward passes before the last");
  param.ready = true;
  --buckets_[param.bucket].pending;
  // Buckets start in index order on every rank: collectives pair by order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Launch(next_launch_++);
  }
}

std::string GradientSync::State::BucketName(size_t index) const {
  return Cat("GradientSync all-reduce of gradient bucket ", index, " of ", buckets_.size(), " (",
             buckets_[index].bytes, " bytes) in step ", steps_ + 1,
             " (counted from the GradientSync's creation)");
}

void GradientSync::State::Launch(size_t index) {
  Bucket& bucket = buckets_[index];
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j < bucket.members.size(); ++j) {
    const Param& param = params_[bucket.members[j]];
    torch::Tensor slot = bucket.flat.narrow(0, bucket.offsets[j], param.tensor.numel());
    const torch::Tensor& grad = param.tensor.grad();
    if (!grad.defined()) {
      slot.zero_();
      continue;
    }
    if (grad.is_sparse()) {
      ThrowValueError(Cat("GradientSync: the gradient of ", param.name,
                          " is sparse; only dense gradients can be averaged"));
    }
    if (grad.device() != bucket.flat.device()) {
      ThrowValueError(Cat("GradientSync: the gradient of ", param.name, " is on ",
                          grad.device().str(), ", not ", bucket.flat.device().str(),
                          "; move the module before creating its GradientSync"));
    }
    slot.copy_(grad.reshape({-1}));
  }
  bucket.flat.div_(context_->placement.world_size);
  bucket.launched = DistClock::now();
  std::vector<torch::Tensor> tensors{bucket.flat};
  bucket.work = context_->Launch(BucketName(index), bucket.launched,
                                 [&] { return context_->group->allreduce(tensors); });
}

void GradientSync::State::WaitAndCopyBack(size_t index) {
  Bucket& bucket = buckets_[index];
  context_->Wait(bucket.work, BucketName(index), bucket.launched);
  bucket.work.reset();
  torch::NoGradGuard no_grad;
  for (size_t j = 0; j < bucket.members.size(); ++j) {
    Param& param = params_[bucket.members[j]];
    torch::Tensor average =
        bucket.flat.narrow(0, bucket.offsets[j], param.tensor.numel()).view(param.tensor.sizes());
    torch::Tensor& grad = param.tensor.mutable_grad();
    if (grad.defined()) {
      grad.copy_(average);
    } else {
      grad = average.clone();
    }
  }
}

void GradientSync::State::Synchronize() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    while (next_launch_ < buckets_.size()) Launch(next_launch_++);
    for (size_t i = 0; i < buckets_.size(); ++i) WaitAndCopyBack(i);
  } catch (...) {
    ResetStep();
    throw;
  }
  ResetStep();
  ++steps_;
}

void GradientSync::State::ResetStep() {
  for (Param& param : params_) param.ready = false;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.work.reset();
  }
  next_launch_ = 0;
}

GradientSync::GradientSync(const DistributedContext& context, torch::nn::Module& module,
                           GradientSyncOptions options) {
  if (options.bucket_bytes < 1) {
    ThrowValueError(
        Cat("GradientSyncOptions.bucket_bytes must be >= 1, got ", options.bucket_bytes));
  }
  BroadcastParameters(context, module);
  std::vector<State::Param> params;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (item.value().requires_grad()) params.push_back({item.key(), item.value()});
  }
  state_ = std::make_shared<State>(context.impl_, std::move(params), options.bucket_bytes);
  if (options.overlap && context.impl_->group != nullptr) state_->InstallHooks();
}

GradientSync::~GradientSync() = default;

void GradientSync::set_sync(bool sync) { state_->set_sync(sync); }
bool GradientSync::sync() const { return state_->sync(); }
void GradientSync::Synchronize() { state_->Synchronize(); }
int64_t GradientSync::steps() const { return state_->steps(); }
int GradientSync::num_buckets() const { return state_->num_buckets(); }

}  // namespace wds
