// The Batched stage: gathers samples by count or budget and collates them,
// offering its upstream decoders the batch's slots.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "batch/batch_slots.h"
#include "batch/collate.h"
#include "wds/batch/batch.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"

namespace wds {
namespace {

// --------------------------------------------------------------- budgets

// Budget tracks what the batch being gathered would cost once collated.
class Budget {
 public:
  explicit Budget(const BatchOptions& options) : options_(options) {}

  bool enabled() const {
    return options_.max_elements.has_value() || options_.max_bytes.has_value();
  }

  // Exceeded is whether adding `sample` would take the batch over a budget.
  bool Exceeded(const Sample& sample) const {
    const Cost cost = With(sample).Total(count_ + 1);
    return (options_.max_elements && cost.elements > *options_.max_elements) ||
           (options_.max_bytes && cost.bytes > *options_.max_bytes);
  }

  void Add(const Sample& sample) {
    state_ = With(sample);
    ++count_;
  }

  void Reset() {
    state_ = {};
    count_ = 0;
  }

 private:
  struct Cost {
    int64_t elements = 0;
    int64_t bytes = 0;
  };
  // ArrayField is the largest shape seen so far of one array field.
  struct ArrayField {
    std::string name;
    std::vector<int64_t> shape;
    size_t item;
  };
  struct State {
    std::vector<ArrayField> arrays;
    int64_t other_bytes = 0;  // numbers, texts and bytes: they add up per sample

    Cost Total(int64_t count) const {
      Cost cost;
      for (const ArrayField& f : arrays) {
        int64_t n = count;
        for (int64_t d : f.shape) n *= d;
        cost.elements += n;
        cost.bytes += n * static_cast<int64_t>(f.item);
      }
      cost.bytes += other_bytes;
      return cost;
    }
  };

  State With(const Sample& sample) const {
    State next = state_;
    for (const Sample::Field& field : sample) {
      const Value& v = field.second;
      if (const Array* a = std::get_if<Array>(&v)) {
        Grow(next.arrays, field.first, *a);
      } else if (const std::string* s = std::get_if<std::string>(&v)) {
        next.other_bytes += static_cast<int64_t>(s->size());
      } else if (const Buffer* b = std::get_if<Buffer>(&v)) {
        next.other_bytes += static_cast<int64_t>(b->size());
      } else {
        next.other_bytes += 8;
      }
    }
    return next;
  }

  static void Grow(std::vector<ArrayField>& arrays, const std::string& name, const Array& a) {
    for (ArrayField& f : arrays) {
      if (f.name != name) continue;
      if (f.shape.size() == a.shape.size()) {
        for (size_t k = 0; k < a.shape.size(); ++k) f.shape[k] = std::max(f.shape[k], a.shape[k]);
      }
      return;
    }
    arrays.push_back({name, a.shape, DTypeSize(a.dtype)});
  }

  const BatchOptions& options_;
  State state_;
  int64_t count_ = 0;
};

// ---------------------------------------------------------------- stage

class BatchStream final : public SampleStream {
 public:
  // The upstream is opened here, with a context that offers its decoders
  // this stream's slots.
  BatchStream(const StreamFactory& upstream, const WorkerContext& ctx, size_t batch_size,
              std::shared_ptr<const BatchOptions> options)
      : ctx_(ctx),
        batch_size_(batch_size),
        options_(std::move(options)),
        pool_(WiringOf(ctx).pool != nullptr ? WiringOf(ctx).pool : std::make_shared<BufferPool>()),
        budget_(*options_) {
    // A batch of unknown size (budgets) has no slots; padded arrays are
    // copied into place anyway.
    if (batch_size_ > 0 && !budget_.enabled() && !options_->pad) {
      slots_ = std::make_shared<BatchSlots>(batch_size_, pool_);
    }
    WorkerContext upstream_ctx = ctx;
    Rewire(upstream_ctx).output_slots = slots_;
    upstream_ = upstream(upstream_ctx);
  }

  SampleResult Next() override {
    if (!error_.ok()) return error_;
    while (!done_) {
      if (slots_ != nullptr) slots_->Reset();
      absl::StatusOr<bool> complete = Gather();
      if (!complete.ok()) return complete.status();
      std::vector<Sample> samples = std::exchange(batch_, {});
      budget_.Reset();
      if (samples.empty() || (!*complete && !options_->partial)) break;
      absl::StatusOr<Batch> batch = Collate(samples, *options_, *pool_, slots_.get());
      if (batch.ok()) return std::optional<Sample>(*std::move(batch));
      switch (ctx_.Handle(options_->handler, kBatchedStage, batch.status())) {
        case ErrorAction::kRaise:
          error_ = batch.status();
          return error_;
        case ErrorAction::kContinue:
          break;
        case ErrorAction::kStop:
          done_ = true;
          break;
      }
    }
    done_ = true;
    return std::nullopt;
  }

 private:
  // Gather fills batch_ and returns whether the batch is complete (closed by
  // the count or a budget rather than by the end of the stream). Upstream
  // errors are returned as they are.
  absl::StatusOr<bool> Gather() {
    while (true) {
      if (!pending_.has_value()) {
        if (upstream_done_) return false;
        if (slots_ != nullptr) slots_->set_index(batch_.size());
        SampleResult item = upstream_->Next();
        if (!item.ok()) return item.status();
        if (!item->has_value()) {
          upstream_done_ = true;
          return false;
        }
        pending_ = std::move(**item);
      }
      if (budget_.enabled()) {
        if (!batch_.empty() && budget_.Exceeded(*pending_)) return true;
        budget_.Add(*pending_);
      }
      batch_.push_back(*std::move(pending_));
      pending_.reset();
      if (batch_size_ > 0 && batch_.size() >= batch_size_) return true;
    }
  }

  std::unique_ptr<SampleStream> upstream_;
  WorkerContext ctx_;
  const size_t batch_size_;
  std::shared_ptr<const BatchOptions> options_;
  std::shared_ptr<BufferPool> pool_;
  Budget budget_;
  std::shared_ptr<BatchSlots> slots_;  // null when batches are not decoded in place
  std::vector<Sample> batch_;
  // pending_ is a sample that did not fit the previous batch's budget.
  std::optional<Sample> pending_;
  bool upstream_done_ = false;
  bool done_ = false;
  absl::Status error_;
};

absl::Status ValidateBatchOptions(size_t batch_size, const BatchOptions& options) {
  if (options.max_elements.has_value() && *options.max_elements < 1) {
    return absl::InvalidArgumentError(
        Cat("batched: max_elements must be >= 1, got ", *options.max_elements));
  }
  if (options.max_bytes.has_value() && *options.max_bytes < 1) {
    return absl::InvalidArgumentError(
        Cat("batched: max_bytes must be >= 1, got ", *options.max_bytes));
  }
  if (batch_size == 0 && !options.max_elements.has_value() && !options.max_bytes.has_value()) {
    return absl::InvalidArgumentError(
        "batched: batch_size must be >= 1 unless max_elements or max_bytes is set");
  }
  return absl::OkStatus();
}

}  // namespace

StageFactory BatchedStage(size_t batch_size, BatchOptions options) {
  if (absl::Status error = ValidateBatchOptions(batch_size, options); !error.ok()) {
    return FailingStage(std::move(error));
  }
  auto shared = std::make_shared<const BatchOptions>(std::move(options));
  return [batch_size, shared](const StreamFactory& upstream, const WorkerContext& ctx) {
    return std::make_unique<BatchStream>(upstream, ctx, batch_size, shared);
  };
}

}  // namespace wds
