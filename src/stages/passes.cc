#include "stages/passes.h"

#include <utility>

#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"

namespace wds {
namespace {

class PassesStreamImpl : public SampleStream {
 public:
  PassesStreamImpl(StreamFactory upstream, WorkerContext ctx, std::optional<int64_t> passes,
                   bool empty_pass_is_error)
      : upstream_(std::move(upstream)),
        ctx_(std::move(ctx)),
        passes_left_(passes),
        empty_pass_is_error_(empty_pass_is_error) {}

  SampleResult Next() override {
    while (true) {
      if (!current_) {
        if (passes_left_.has_value() && *passes_left_ <= 0) return std::nullopt;
        if (passes_left_.has_value()) --*passes_left_;
        current_ = upstream_(ctx_);
        items_in_pass_ = 0;
        // A pass restored at a checkpoint (ResumeChannel) had items before
        // it; the passes after it start fresh.
        ResumeChannel* resume = WiringOf(ctx_).resume.get();
        if (resume != nullptr && resume->restore.has_value()) {
          if (resume->restore->source_out > 0) items_in_pass_ = 1;
          resume->restore.reset();
        }
      }
      SampleResult item = current_->Next();
      if (!item.ok() || item->has_value()) {
        if (item.ok()) ++items_in_pass_;
        return item;  // errors stay sticky: current_ keeps returning them
      }
      if (items_in_pass_ == 0) {
        if (!empty_pass_is_error_) return std::nullopt;
        return absl::FailedPreconditionError(
            Cat("pass ", ctx_.pass, " of rank ", ctx_.rank, " worker ", ctx_.worker,
                " yielded no items, so its stream cannot be continued"));
      }
      current_.reset();
      ++ctx_.pass;
    }
  }

 private:
  StreamFactory upstream_;
  WorkerContext ctx_;
  std::optional<int64_t> passes_left_;
  bool empty_pass_is_error_;
  std::unique_ptr<SampleStream> current_;
  int64_t items_in_pass_ = 0;
};

class LimitStreamImpl : public SampleStream {
 public:
  LimitStreamImpl(std::unique_ptr<SampleStream> upstream, int64_t n)
      : upstream_(std::move(upstream)), left_(n) {}

  SampleResult Next() override {
    if (left_ <= 0) return std::nullopt;
    SampleResult item = upstream_->Next();
    if (item.ok() && item->has_value()) --left_;
    return item;
  }

 private:
  std::unique_ptr<SampleStream> upstream_;
  int64_t left_;
};

}  // namespace

std::unique_ptr<SampleStream> PassesStream(StreamFactory upstream, WorkerContext ctx,
                                           std::optional<int64_t> passes,
                                           bool empty_pass_is_error) {
  return std::make_unique<PassesStreamImpl>(std::move(upstream), std::move(ctx), passes,
                                            empty_pass_is_error);
}

std::unique_ptr<SampleStream> LimitStream(std::unique_ptr<SampleStream> upstream, int64_t n) {
  return std::make_unique<LimitStreamImpl>(std::move(upstream), n);
}

}  // namespace wds
