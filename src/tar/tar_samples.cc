// TarSamples: the shards of one worker as a stream of Samples.
#include "tar/tar_samples.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "io/open_ahead.h"
#include "wds/internal/base/resume_channel.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/remote.h"

namespace wds {
namespace {

// ThenStream yields `first`'s slices, then `then`'s.
class ThenStream : public UrlStream {
 public:
  ThenStream(std::unique_ptr<UrlStream> first, std::unique_ptr<UrlStream> then)
      : first_(std::move(first)), then_(std::move(then)) {}
  absl::StatusOr<std::optional<ShardSlice>> Next() override {
    if (first_ != nullptr) {
      absl::StatusOr<std::optional<ShardSlice>> slice = first_->Next();
      if (!slice.ok() || slice->has_value()) return slice;
      first_.reset();
    }
    return then_->Next();
  }

 private:
  std::unique_ptr<UrlStream> first_;
  std::unique_ptr<UrlStream> then_;
};

constexpr std::string_view kStageName = "tar";

class TarSampleStream : public SampleStream {
 public:
  TarSampleStream(std::unique_ptr<UrlStream> urls, Opener opener, Handler handler,
                  WorkerContext ctx, int64_t max_member_size, std::shared_ptr<ShardCatalog> catalog,
                  MemberNameHook member_name, bool drawn, int open_ahead)
      : drawn_(drawn),
        open_ahead_(open_ahead),
        max_member_size_(max_member_size),
        catalog_(std::move(catalog)),
        member_name_(std::move(member_name)),
        urls_(std::move(urls)),
        opener_(std::move(opener)),
        handler_(handler),
        ctx_(std::move(ctx)),
        pool_(WiringOf(ctx_).read_pool != nullptr
                  ? WiringOf(ctx_).read_pool
                  : std::make_shared<BufferPool>(AlignedHostAllocator(),
                                                 BufferPoolOptions{.classes_per_doubling = 1024})) {
    if (WiringOf(ctx_).resume == nullptr) return;
    ResumeChannel& resume = *WiringOf(ctx_).resume;
    if (resume.counted_pass != ctx_.pass) {
      resume.counted_pass = ctx_.pass;
      resume.sources = 0;
      resume.shuffles = 0;
    }
    ++resume.sources;
    resume.position.shuffle_out = -1;
    resume.position.pass = ctx_.pass;
    resume.position.source_out = 0;
    resume.position.pass_samples = -1;
    if (resume.restore.has_value() && resume.restore->pass == ctx_.pass) PlanRestore(resume);
  }

  ~TarSampleStream() override { DropAhead(); }

  SampleResult Next() override {
    if (done_.has_value()) {
      if (done_->ok()) return std::nullopt;
      return *done_;
    }
    if (restoring_) {
      restoring_ = false;
      if (absl::Status s = Restore(); !s.ok()) {
        done_ = s;
        return s;
      }
    }
    if (!replay_.empty()) {
      Sample sample = std::move(replay_.front());
      replay_.pop_front();
      return sample;
    }
    SampleResult result = Advance();
    if (result.ok() && result->has_value() && WiringOf(ctx_).resume != nullptr) {
      ++WiringOf(ctx_).resume->position.source_out;
    }
    if (!result.ok()) {
      done_ = result.status();
    } else if (!result->has_value()) {
      done_ = absl::OkStatus();
    }
    // A stream that ended releases its shard at once (a pipe: command is
    // stopped), and the shards opened ahead, rather than when it is destroyed.
    if (done_.has_value()) {
      reader_.reset();
      DropAhead();
    }
    return result;
  }

 private:
  // What Advance does after the handler saw an error.
  enum class Flow { kReturn, kGoOn };

  // Ahead is what urls_ gave before its turn: a slice (with its open under
  // way when it is opened ahead), the end, or the list's error.
  struct Ahead {
    absl::StatusOr<std::optional<ShardSlice>> slice;
    std::unique_ptr<AheadOpen> open;
  };

  SampleResult Advance();
  // NextSlice is the next of urls_' answers, taken ahead or not.
  Ahead NextSlice();
  // OpenAhead takes answers from urls_ until open_ahead_ of them wait, and
  // starts opening the slices among them that are remote shards read from
  // their start.
  void OpenAhead();
  // IsInFlight: `url` is the shard being read or one opened ahead.
  bool IsInFlight(const std::string& url) const;
  // DropAhead stops the opens under way (all told first: each stops within
  // kInterruptCheckInterval) and forgets what was taken ahead.
  void DropAhead();
  // OpenShard opens `slice` for reading, its stream from `ahead` when it
  // was opened ahead.
  absl::Status OpenShard(ShardSlice slice, AheadOpen* ahead = nullptr);
  // NextInSlice is the reader's next sample within the slice, nullopt at
  // the slice's end.
  absl::StatusOr<std::optional<GroupedSample>> NextInSlice();
  absl::StatusOr<Sample> ToSample(GroupedSample grouped);
  void PlanRestore(ResumeChannel& resume);
  absl::Status Restore();
  absl::Status ReadRun(ShardSlice run, std::vector<Sample>& out);
  Flow Handle(const absl::Status& error, SampleResult& result);
  // NameMember asks member_name_ for `name`, handing its error to the handler.
  absl::StatusOr<std::optional<std::string>> NameMember(std::string_view name);

  // drawn_: the source draws shards (with replacement), perhaps forever.
  const bool drawn_;
  const int open_ahead_;
  std::deque<Ahead> ahead_;
  const int64_t max_member_size_;
  const std::shared_ptr<ShardCatalog> catalog_;
  const MemberNameHook member_name_;
  // hook_action_ is what the handler chose for the hook error that ends
  // the shard (kRaise or kStop): it is not handed over a second time.
  std::optional<ErrorAction> hook_action_;
  absl::Status hook_error_;
  std::unique_ptr<UrlStream> urls_;
  Opener opener_;
  Handler handler_;
  WorkerContext ctx_;
  std::optional<absl::Status> done_;
  // pool_ recycles member buffers: the Loader's, or one of this stream's.
  std::shared_ptr<BufferPool> pool_;
  std::unique_ptr<ShardSampleReader> reader_;
  std::string url_;
  // slice_ is the part of url_ being read; next_ the index of the sample
  // that the reader gives next.
  ShardSlice slice_;
  int64_t next_ = 0;
  std::string field_;  // reused for lower-casing
  // A restore (see ResumeChannel): the pass's slices with their counts, the
  // source's position in the checkpoint, and the samples to yield first.
  bool restoring_ = false;
  absl::Status restore_error_;
  std::vector<ShardSlice> pass_slices_;
  int64_t restore_at_ = 0;
  std::deque<Sample> replay_;
};

// PlanRestore sizes the pass for a shuffle stage's replay: the slices this
// worker reads, each with its sample count.
void TarSampleStream::PlanRestore(ResumeChannel& resume) {
  restoring_ = true;
  restore_at_ = resume.restore->source_out;
  int64_t total = 0;
  bool ended = false;
  while (true) {
    // Drawn shards are planned up to the slice holding the position: the
    // source had not ended there, so neither will the shuffle's replay.
    if (drawn_ && total > restore_at_) break;
    absl::StatusOr<std::optional<ShardSlice>> slice = urls_->Next();
    if (!slice.ok()) {
      restore_error_ = slice.status();
      return;
    }
    if (!slice->has_value()) {
      ended = true;
      break;
    }
    if ((*slice)->end < 0) {
      if (catalog_ == nullptr) {
        restore_error_ = absl::FailedPreconditionError(
            Cat((*slice)->url, ": cannot restart inside a shard without sample counts"));
        return;
      }
      absl::StatusOr<int64_t> count = catalog_->Count((*slice)->url);
      if (!count.ok()) {
        restore_error_ = count.status();
        return;
      }
      (*slice)->end = *count;
    }
    total += (*slice)->end - (*slice)->begin;
    pass_slices_.push_back(**std::move(slice));
  }
  if (!ended) {
    resume.pass_samples = kEndlessPass;  // not known: as if endless
    return;
  }
  resume.pass_samples = total;
  resume.planned_slices = std::make_shared<const std::vector<ShardSlice>>(pass_slices_);
}

// Restore reads the samples a restored shuffle buffer held (sorted, one seek
// per run of consecutive samples, then put in buffer order) and continues
// the pass at the checkpoint's position.
absl::Status TarSampleStream::Restore() {
  WDS_RETURN_IF_ERROR(restore_error_);
  ResumeChannel& resume = *WiringOf(ctx_).resume;
  const int64_t start = resume.continue_at >= 0 ? resume.continue_at : restore_at_;
  std::vector<int64_t> replay = std::move(resume.replay);
  resume.replay.clear();
  resume.continue_at = -1;
  resume.pass_samples = -1;
  // first[i] is the position in the pass of slice i's first sample.
  std::vector<int64_t> first;
  int64_t total = 0;
  for (const ShardSlice& s : pass_slices_) {
    first.push_back(total);
    total += s.end - s.begin;
  }
  if (start > total) {
    return absl::FailedPreconditionError(Cat("cannot restart at sample ", start, " of a pass of ",
                                             total,
                                             " samples (other data than at the checkpoint?)"));
  }
  auto slice_of = [&](int64_t ordinal) {
    return static_cast<size_t>(std::upper_bound(first.begin(), first.end(), ordinal) -
                               first.begin() - 1);
  };
  // Re-read the buffered samples in pass order, in runs.
  std::vector<std::pair<int64_t, size_t>> wanted;  // (ordinal, buffer slot)
  for (size_t slot = 0; slot < replay.size(); ++slot) wanted.emplace_back(replay[slot], slot);
  std::sort(wanted.begin(), wanted.end());
  std::vector<std::optional<Sample>> slots(replay.size());
  for (size_t i = 0; i < wanted.size();) {
    const int64_t ordinal = wanted[i].first;
    const size_t s = slice_of(ordinal);
    size_t j = i + 1;
    while (j < wanted.size() && wanted[j].first == wanted[j - 1].first + 1 &&
           slice_of(wanted[j].first) == s) {
      ++j;
    }
    const int64_t begin = pass_slices_[s].begin + (ordinal - first[s]);
    std::vector<Sample> run;
    WDS_RETURN_IF_ERROR(
        ReadRun({pass_slices_[s].url, begin, begin + static_cast<int64_t>(j - i)}, run));
    for (size_t k = i; k < j; ++k) slots[wanted[k].second] = std::move(run[k - i]);
    i = j;
  }
  for (std::optional<Sample>& sample : slots) replay_.push_back(*std::move(sample));
  // Continue from `start`: the rest of its slice, then the slices after it.
  std::vector<ShardSlice> rest;
  for (size_t i = 0; i < pass_slices_.size(); ++i) {
    const int64_t skip = start - first[i];
    const int64_t size = pass_slices_[i].end - pass_slices_[i].begin;
    if (skip >= size) continue;
    ShardSlice slice = pass_slices_[i];
    if (skip > 0) slice.begin += skip;
    rest.push_back(std::move(slice));
  }
  // Drawn shards go on after the slices planned.
  urls_ = drawn_ ? std::make_unique<ThenStream>(SlicesStream(std::move(rest)), std::move(urls_))
                 : SlicesStream(std::move(rest));
  resume.position.source_out = start;
  pass_slices_.clear();
  return absl::OkStatus();
}

// ReadRun reads the samples of `run` (a part of one shard) into `out`.
absl::Status TarSampleStream::ReadRun(ShardSlice run, std::vector<Sample>& out) {
  const int64_t want = run.end - run.begin;
  WDS_RETURN_IF_ERROR(OpenShard(std::move(run)));
  while (static_cast<int64_t>(out.size()) < want) {
    absl::StatusOr<std::optional<GroupedSample>> grouped = NextInSlice();
    if (!grouped.ok()) {
      reader_.reset();
      return grouped.status();
    }
    if (!grouped->has_value()) break;
    WDS_ASSIGN_OR_RETURN(Sample sample, ToSample(**std::move(grouped)));
    out.push_back(std::move(sample));
  }
  reader_.reset();
  if (static_cast<int64_t>(out.size()) != want) {
    return absl::DataLossError(Cat(url_, ": re-reading ", want, " samples from sample ",
                                   slice_.begin, " gave ", out.size()));
  }
  return absl::OkStatus();
}

TarSampleStream::Flow TarSampleStream::Handle(const absl::Status& error, SampleResult& result) {
  switch (ctx_.Handle(handler_, kStageName, error)) {
    case ErrorAction::kRaise:
      result = error;
      return Flow::kReturn;
    case ErrorAction::kStop:
      result = std::nullopt;
      return Flow::kReturn;
    case ErrorAction::kContinue:
      return Flow::kGoOn;
  }
  return Flow::kGoOn;
}

SampleResult TarSampleStream::Advance() {
  SampleResult result = std::nullopt;
  while (true) {
    if (reader_ == nullptr) {
      Ahead next = NextSlice();
      absl::StatusOr<std::optional<ShardSlice>>& slice = next.slice;
      if (!slice.ok()) return slice.status();  // the shard list's own error: not per item
      if (!slice->has_value()) return std::nullopt;
      absl::Status opened = OpenShard(**std::move(slice), next.open.get());
      if (!opened.ok() && Handle(opened, result) == Flow::kReturn) return result;
      // The next shards' requests, after this one's, overlap its reading.
      OpenAhead();
      continue;
    }
    absl::StatusOr<std::optional<GroupedSample>> grouped = NextInSlice();
    if (hook_action_.has_value() && (*hook_action_ == ErrorAction::kRaise || !grouped.ok())) {
      // As in the reference: raising drops the sample in progress; stopping
      // yields it first and ends only that shard.
      reader_.reset();
      if (*std::exchange(hook_action_, std::nullopt) == ErrorAction::kRaise) return hook_error_;
      continue;
    }
    if (!grouped.ok() || !grouped->has_value()) {
      reader_.reset();
      if (!grouped.ok() && Handle(grouped.status(), result) == Flow::kReturn) return result;
      continue;
    }
    absl::StatusOr<Sample> sample = ToSample(**std::move(grouped));
    if (sample.ok()) return *std::move(sample);
    if (Handle(sample.status(), result) == Flow::kReturn) return result;
  }
}

absl::StatusOr<std::optional<GroupedSample>> TarSampleStream::NextInSlice() {
  const bool bounded = slice_.end >= 0;
  if (bounded && next_ == slice_.end) {
    // A slice that ends inside the shard stops there; one that ends with
    // it reads on, so that the end of the archive is checked.
    if (catalog_ == nullptr) return std::nullopt;
    WDS_ASSIGN_OR_RETURN(int64_t count, catalog_->Count(url_));
    if (slice_.end < count) return std::nullopt;
  }
  absl::StatusOr<std::optional<GroupedSample>> grouped = reader_->Next();
  if (!grouped.ok() || !bounded) return grouped;
  if (!grouped->has_value() && next_ < slice_.end) {
    return absl::DataLossError(Cat(url_, ": the shard ends after ", next_,
                                   " samples, but its index counts more: slice [", slice_.begin,
                                   ", ", slice_.end, ") cannot be read (a stale index?)"));
  }
  if (grouped->has_value() && next_ == slice_.end) {
    return absl::DataLossError(Cat(url_, ": the shard holds more than the ", slice_.end,
                                   " samples its index counts (a stale index?)"));
  }
  if (grouped->has_value()) ++next_;
  return grouped;
}

TarSampleStream::Ahead TarSampleStream::NextSlice() {
  if (ahead_.empty()) return Ahead{urls_->Next(), nullptr};
  Ahead next = std::move(ahead_.front());
  ahead_.pop_front();
  return next;
}

void TarSampleStream::OpenAhead() {
  while (static_cast<int>(ahead_.size()) < open_ahead_) {
    if (!ahead_.empty() && (!ahead_.back().slice.ok() || !ahead_.back().slice->has_value())) {
      return;  // nothing after the end or the list's error
    }
    Ahead next{urls_->Next(), nullptr};
    // Only remote URLs: their reader resumes byte-exactly when a server
    // drops a connection left waiting while the current shard is read; a
    // pipe: command (curl) stalled on a full pipe for that long could fail.
    // A slice from a later sample seeks, which an open from 0 cannot serve.
    // A URL being read, or opened ahead already (a resampled list draws
    // one twice in a row), waits for its turn: with a cache, the first
    // read's copy is complete by then and serves it, where a second open
    // now would stream it again, uncached.
    if (next.slice.ok() && next.slice->has_value() && (*next.slice)->begin == 0 &&
        IsRemoteUrl((*next.slice)->url) && !IsInFlight((*next.slice)->url)) {
      next.open = std::make_unique<AheadOpen>(opener_, (*next.slice)->url);
    }
    ahead_.push_back(std::move(next));
  }
}

bool TarSampleStream::IsInFlight(const std::string& url) const {
  if (reader_ != nullptr && url == url_) return true;
  return std::any_of(ahead_.begin(), ahead_.end(),
                     [&](const Ahead& a) { return a.open != nullptr && a.open->url() == url; });
}

void TarSampleStream::DropAhead() {
  for (Ahead& a : ahead_) {
    if (a.open != nullptr) a.open->Cancel();
  }
  ahead_.clear();
}

absl::Status TarSampleStream::OpenShard(ShardSlice slice, AheadOpen* ahead) {
  const std::string& url = slice.url;
  ShardSampleReaderOptions options;
  if (slice.begin > 0) {
    if (catalog_ == nullptr) {
      return absl::InternalError(
          Cat(url, ": a slice from sample ", slice.begin, " needs a shard catalog"));
    }
    WDS_ASSIGN_OR_RETURN(options.tar.start_offset, catalog_->StartOffset(url, slice.begin));
  }
  absl::StatusOr<std::unique_ptr<ByteStream>> stream =
      ahead != nullptr ? ahead->Take() : opener_(url);
  if (!stream.ok()) return stream.status();
  options.tar.pool = pool_;
  options.tar.max_member_size = max_member_size_;
  if (member_name_) {
    options.member_name = [this](std::string_view name) { return NameMember(name); };
  }
  absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
      ShardSampleReader::Open(*std::move(stream), std::move(options));
  if (!reader.ok()) return reader.status();
  reader_ = *std::move(reader);
  url_ = url;
  next_ = slice.begin;
  slice_ = std::move(slice);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> TarSampleStream::NameMember(std::string_view name) {
  absl::StatusOr<std::optional<std::string>> named = member_name_(name);
  if (named.ok()) return named;
  const ErrorAction action = ctx_.Handle(handler_, kStageName, named.status());
  if (action == ErrorAction::kContinue) return std::nullopt;
  hook_action_ = action;
  hook_error_ = named.status();
  return named.status();
}

absl::StatusOr<Sample> TarSampleStream::ToSample(GroupedSample grouped) {
  Sample sample;
  sample.Reserve(2 + grouped.members.size());
  sample.Append(std::string(kKeyField), std::move(grouped.key));
  sample.Append(std::string(kUrlField), url_);
  for (SampleMember& m : grouped.members) {
    WDS_RETURN_IF_ERROR(AppendMemberField(sample, m.field, std::move(m.member.data), url_,
                                          m.member.name, m.member.offset, field_));
  }
  return sample;
}

}  // namespace

absl::Status AppendMemberField(Sample& sample, std::string_view field, Buffer data,
                               std::string_view url, std::string_view member, int64_t offset,
                               std::string& scratch) {
  AsciiLowerInto(field, scratch);
  if (sample.Has(scratch)) {
    return absl::InvalidArgumentError(Cat(url, ": duplicate field '", scratch, "' in sample ",
                                          sample.key(), " (member ", member, " at offset ", offset,
                                          ")"));
  }
  sample.Append(scratch, std::move(data));
  return absl::OkStatus();
}

std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx,
                                         int64_t max_member_size,
                                         std::shared_ptr<ShardCatalog> catalog,
                                         MemberNameHook member_name, bool drawn, int open_ahead) {
  return std::make_unique<TarSampleStream>(std::move(urls), std::move(opener), handler, ctx,
                                           max_member_size, std::move(catalog),
                                           std::move(member_name), drawn, open_ahead);
}

}  // namespace wds
