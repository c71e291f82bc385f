// ShuffleStage: the reference package's buffered shuffle.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "wds/random.h"
#include "wds/stages.h"

namespace wds {
namespace {

// ShuffleStream follows the reference algorithm: each step reads one sample,
// and a second one while the buffer is below `bufsize`; once the buffer holds
// `initial` samples every step yields a random one. At the upstream's end the
// buffer drains in random order. An upstream error is returned at once and
// stays sticky; the buffered samples are dropped, as in the reference, where
// the exception ends the generator.
class ShuffleStream final : public SampleStream {
 public:
  ShuffleStream(std::unique_ptr<SampleStream> upstream, size_t bufsize, size_t initial,
                uint64_t seed)
      : upstream_(std::move(upstream)),
        bufsize_(bufsize),
        initial_(std::min(initial, bufsize)),
        rng_(seed) {}

  SampleResult Next() override {
    if (!error_.ok()) return error_;
    while (!upstream_done_) {
      if (absl::Status s = Pull(); !s.ok()) return Fail(std::move(s));
      if (upstream_done_) break;
      if (buffer_.size() < bufsize_) {
        if (absl::Status s = Pull(); !s.ok()) return Fail(std::move(s));
      }
      if (buffer_.size() >= initial_) return Pick();
    }
    if (buffer_.empty()) return std::nullopt;
    return Pick();
  }

 private:
  // Pull appends the next upstream sample to the buffer, or notes the end.
  absl::Status Pull() {
    SampleResult item = upstream_->Next();
    if (!item.ok()) return item.status();
    if (item->has_value()) {
      buffer_.push_back(std::move(**item));
    } else {
      upstream_done_ = true;
    }
    return absl::OkStatus();
  }

  // Pick removes a uniformly chosen sample; the last one fills its slot.
  Sample Pick() {
    const size_t k = rng_.Below(buffer_.size());
    Sample picked = std::move(buffer_[k]);
    if (k + 1 != buffer_.size()) buffer_[k] = std::move(buffer_.back());
    buffer_.pop_back();
    return picked;
  }

  SampleResult Fail(absl::Status error) {
    error_ = std::move(error);
    std::vector<Sample>().swap(buffer_);
    return error_;
  }

  std::unique_ptr<SampleStream> upstream_;
  const size_t bufsize_;
  const size_t initial_;
  Rng rng_;
  std::vector<Sample> buffer_;
  bool upstream_done_ = false;
  absl::Status error_;
};

uint64_t ShuffleSeed(const WorkerContext& ctx) {
  return DeriveSeed(ctx.seed,
                    {kShuffle, static_cast<uint64_t>(ctx.epoch), static_cast<uint64_t>(ctx.pass),
                     static_cast<uint64_t>(ctx.rank), static_cast<uint64_t>(ctx.worker)});
}

}  // namespace

StageFactory ShuffleStage(size_t bufsize, size_t initial) {
  return [bufsize, initial](const StreamFactory& upstream,
                            const WorkerContext& ctx) -> std::unique_ptr<SampleStream> {
    if (bufsize < 2) return upstream(ctx);
    return std::make_unique<ShuffleStream>(upstream(ctx), bufsize, initial, ShuffleSeed(ctx));
  };
}

}  // namespace wds
