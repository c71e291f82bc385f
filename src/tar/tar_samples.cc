// TarSamples: the shards of one worker as a stream of Samples.
#include "tar/tar_samples.h"

#include <string>
#include <utility>

#include "wds/internal/status_macros.h"
#include "wds/internal/strings.h"
#include "wds/internal/tar_grouping.h"

namespace wds {
namespace {

constexpr std::string_view kStageName = "tar";

class TarSampleStream : public SampleStream {
 public:
  TarSampleStream(std::unique_ptr<UrlStream> urls, Opener opener, Handler handler,
                  WorkerContext ctx, int64_t max_member_size, std::shared_ptr<ShardCatalog> catalog)
      : max_member_size_(max_member_size),
        catalog_(std::move(catalog)),
        urls_(std::move(urls)),
        opener_(std::move(opener)),
        handler_(handler),
        ctx_(std::move(ctx)),
        pool_(ctx_.read_pool != nullptr
                  ? ctx_.read_pool
                  : std::make_shared<BufferPool>(
                        AlignedHostAllocator(), BufferPoolOptions{.classes_per_doubling = 1024})) {}

  SampleResult Next() override {
    if (done_.has_value()) {
      if (done_->ok()) return std::nullopt;
      return *done_;
    }
    SampleResult result = Advance();
    if (!result.ok()) {
      done_ = result.status();
    } else if (!result->has_value()) {
      done_ = absl::OkStatus();
    }
    // A stream that ended releases its shard at once (a pipe: command is
    // stopped) rather than when it is destroyed.
    if (done_.has_value()) reader_.reset();
    return result;
  }

 private:
  // What Advance does after the handler saw an error.
  enum class Flow { kReturn, kGoOn };

  SampleResult Advance();
  absl::Status OpenShard(ShardSlice slice);
  // NextInSlice is the reader's next sample within the slice, nullopt at
  // the slice's end.
  absl::StatusOr<std::optional<GroupedSample>> NextInSlice();
  absl::StatusOr<Sample> ToSample(GroupedSample grouped);
  Flow Handle(const absl::Status& error, SampleResult& result);

  const int64_t max_member_size_;
  const std::shared_ptr<ShardCatalog> catalog_;
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
};

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
      absl::StatusOr<std::optional<ShardSlice>> slice = urls_->Next();
      if (!slice.ok()) return slice.status();  // the shard list's own error: not per item
      if (!slice->has_value()) return std::nullopt;
      absl::Status opened = OpenShard(**std::move(slice));
      if (!opened.ok() && Handle(opened, result) == Flow::kReturn) return result;
      continue;
    }
    absl::StatusOr<std::optional<GroupedSample>> grouped = NextInSlice();
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

absl::Status TarSampleStream::OpenShard(ShardSlice slice) {
  const std::string& url = slice.url;
  ShardSampleReaderOptions options;
  if (slice.begin > 0) {
    if (catalog_ == nullptr) {
      return absl::InternalError(Cat(url, ": a slice from sample ", slice.begin,
                                     " needs a shard catalog"));
    }
    WDS_ASSIGN_OR_RETURN(options.tar.start_offset, catalog_->StartOffset(url, slice.begin));
  }
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = opener_(url);
  if (!stream.ok()) return stream.status();
  options.tar.pool = pool_;
  options.tar.max_member_size = max_member_size_;
  absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
      ShardSampleReader::Open(*std::move(stream), std::move(options));
  if (!reader.ok()) return reader.status();
  reader_ = *std::move(reader);
  url_ = url;
  next_ = slice.begin;
  slice_ = std::move(slice);
  return absl::OkStatus();
}

absl::StatusOr<Sample> TarSampleStream::ToSample(GroupedSample grouped) {
  Sample sample;
  sample.Reserve(2 + grouped.members.size());
  sample.Append(std::string(kKeyField), std::move(grouped.key));
  sample.Append(std::string(kUrlField), url_);
  for (SampleMember& m : grouped.members) {
    AsciiLowerInto(m.field, field_);
    if (sample.Has(field_)) {
      return absl::InvalidArgumentError(Cat(url_, ": duplicate field '", field_, "' in sample ",
                                            sample.key(), " (member ", m.member.name, " at offset ",
                                            m.member.offset, ")"));
    }
    sample.Append(field_, std::move(m.member.data));
  }
  return sample;
}

}  // namespace

std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx,
                                         int64_t max_member_size,
                                         std::shared_ptr<ShardCatalog> catalog) {
  return std::make_unique<TarSampleStream>(std::move(urls), std::move(opener), handler, ctx,
                                           max_member_size, std::move(catalog));
}

}  // namespace wds
