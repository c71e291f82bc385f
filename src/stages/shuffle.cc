// ShuffleStage: the reference package's buffered shuffle.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "wds/base/random.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/stages/stages.h"

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
                uint64_t seed, std::shared_ptr<ResumeChannel> resume)
      : upstream_(std::move(upstream)),
        bufsize_(bufsize),
        initial_(std::min(initial, bufsize)),
        rng_(seed),
        resume_(std::move(resume)) {
    if (resume_ == nullptr) return;
    ++resume_->shuffles;
    resume_->position.shuffle_out = 0;
    resume_->shuffle_in = 0;
    resume_->dropped.clear();
    resume_->dropped_samples = 0;
    if (resume_->restore.has_value() && resume_->restore->shuffle_out >= 0) Restore();
  }

  SampleResult Next() override {
    SampleResult item = NextItem();
    if (resume_ != nullptr && item.ok() && item->has_value()) ++resume_->position.shuffle_out;
    return item;
  }

 private:
  SampleResult NextItem() {
    if (!error_.ok()) return error_;
    if (refill_ > 0) {
      // A restored buffer: its samples come first from the source, in order.
      for (size_t i = 0; i < refill_; ++i) {
        if (absl::Status s = Pull(/*replayed=*/true); !s.ok()) return Fail(std::move(s));
      }
      if (buffer_.size() != refill_ || upstream_done_) {
        return Fail(absl::FailedPreconditionError(
            Cat("cannot restore the shuffle buffer: ", refill_, " samples were re-read, ",
                buffer_.size(), " reached it (a stage before the shuffle drops samples)")));
      }
      refill_ = 0;
      upstream_done_ = restored_done_;
    }
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

  // Restore replays the shuffle's first `restore->shuffle_out` steps on the
  // positions of the source's samples instead of the samples (the steps
  // depend only on counts and the random state), skipping the positions in
  // `restore_dropped`, then asks the source to yield the samples the buffer
  // held, and to go on from where it stood.
  void Restore() {
    const StreamCheckpoint& at = *resume_->restore;
    const int64_t total = resume_->pass_samples;
    const std::vector<std::pair<int64_t, int64_t>>& dropped = resume_->restore_dropped;
    size_t run = 0;  // the first run of `dropped` not behind `next`
    if (total < 0) {
      resume_->error = absl::FailedPreconditionError(
          "cannot restore the shuffle stage: its source cannot restart at a position");
      return;
    }
    std::vector<int64_t> buffer;
    int64_t next = 0;
    bool done = false;
    auto pull = [&] {
      for (; run < dropped.size() && dropped[run].first <= next; ++run) {
        next = std::max(next, dropped[run].second);
      }
      if (next < total) {
        buffer.push_back(next++);
      } else {
        done = true;
      }
    };
    auto pick = [&] {
      const size_t k = rng_.Below(buffer.size());
      buffer[k] = buffer.back();
      buffer.pop_back();
    };
    for (int64_t step = 0; step < at.shuffle_out; ++step) {
      bool picked = false;
      while (!done) {
        pull();
        if (done) break;
        if (buffer.size() < bufsize_) pull();
        if (buffer.size() >= initial_) {
          pick();
          picked = true;
          break;
        }
      }
      if (!picked) {
        if (buffer.empty()) {
          resume_->error = absl::FailedPreconditionError(
              Cat("cannot restore the shuffle stage at its sample ", at.shuffle_out, ": the pass ",
                  "holds only ", total, " samples"));
          return;
        }
        pick();
      }
    }
    if (next != at.source_out) {
      resume_->error = absl::FailedPreconditionError(
          Cat("cannot restore the shuffle stage: it took ", next, " samples where the source ",
              "gave ", at.source_out, " (a stage before the shuffle drops samples)"));
      return;
    }
    refill_ = buffer.size();
    restored_done_ = done;
    resume_->replay = std::move(buffer);
    resume_->continue_at = next;
    resume_->dropped = dropped;
    resume_->dropped_samples = 0;
    for (const auto& [first, end] : dropped) resume_->dropped_samples += end - first;
    expected_ = next;
    // The refill pulls count the buffer again: start below the position.
    resume_->shuffle_in = next - resume_->dropped_samples - static_cast<int64_t>(refill_);
    resume_->position.shuffle_out = at.shuffle_out;
  }

  // Pull appends the next upstream sample to the buffer, or notes the end.
  // A sample the restoring source yields again (`replayed`) has no new
  // ordinal.
  absl::Status Pull(bool replayed = false) {
    SampleResult item = upstream_->Next();
    if (!item.ok()) return item.status();
    if (item->has_value()) {
      buffer_.push_back(std::move(**item));
      if (resume_ != nullptr) {
        ++resume_->shuffle_in;
        if (!replayed) NoteDroppedBefore(resume_->position.source_out - 1);
        expected_ = std::max(expected_, resume_->position.source_out);
      }
    } else {
      upstream_done_ = true;
      if (resume_ != nullptr && !replayed) NoteDroppedBefore(resume_->position.source_out);
    }
    return absl::OkStatus();
  }

  // NoteDroppedBefore records the ordinals from `expected_` up to `ordinal`
  // (the sample just taken, or the pass's end) as dropped before the shuffle.
  void NoteDroppedBefore(int64_t ordinal) {
    if (ordinal <= expected_) return;
    std::vector<std::pair<int64_t, int64_t>>& dropped = resume_->dropped;
    if (!dropped.empty() && dropped.back().second == expected_) {
      dropped.back().second = ordinal;
    } else {
      dropped.emplace_back(expected_, ordinal);
    }
    resume_->dropped_samples += ordinal - expected_;
    expected_ = ordinal;
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
  std::shared_ptr<ResumeChannel> resume_;
  // refill_ samples are pulled into the buffer before the first step after
  // a restore; restored_done_ is whether the upstream had ended by then.
  size_t refill_ = 0;
  bool restored_done_ = false;
  // expected_ is the ordinal (position in the pass) of the next sample the
  // source yields (see ResumeChannel::dropped).
  int64_t expected_ = 0;
};

// ShuffleSeed is DeriveSeed(seed, {kShuffle, epoch, pass, rank, worker}); the
// pass an elastic resume hands a worker (ResumeChannel::slices) also mixes in
// its generation, so that it is not the interrupted run's order again.
uint64_t ShuffleSeed(const WorkerContext& ctx) {
  const uint64_t seed =
      DeriveSeed(ctx.seed, {kShuffle, static_cast<uint64_t>(ctx.epoch),
                            static_cast<uint64_t>(ctx.pass), static_cast<uint64_t>(ctx.rank),
                            static_cast<uint64_t>(ctx.worker)});
  const ResumeChannel* resume = WiringOf(ctx).resume.get();
  if (resume == nullptr || !resume->SlicesApply(ctx.epoch, ctx.pass)) return seed;
  return DeriveSeed(seed, {kElasticResume, static_cast<uint64_t>(resume->generation)});
}

}  // namespace

StageFactory ShuffleStage(size_t bufsize, size_t initial) {
  return [bufsize, initial](const StreamFactory& upstream,
                            const WorkerContext& ctx) -> std::unique_ptr<SampleStream> {
    if (bufsize < 2) return upstream(ctx);
    // The upstream is opened first: a restoring source sizes its pass for
    // the shuffle's replay.
    std::unique_ptr<SampleStream> source = upstream(ctx);
    return std::make_unique<ShuffleStream>(std::move(source), bufsize, initial, ShuffleSeed(ctx),
                                           WiringOf(ctx).resume);
  };
}

}  // namespace wds
