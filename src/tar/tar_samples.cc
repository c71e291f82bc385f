// WebDataset grouping: member names -> (key, field), consecutive members with
// one key -> one Sample.
#include <utility>

#include "wds/internal/strings.h"
#include "wds/tar_reader.h"

namespace wds {
namespace {

constexpr std::string_view kStageName = "tar";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// PreviousPrefixEnd is the largest position below `end` that starts a path
// segment (0, or just after a '/').
size_t PreviousPrefixEnd(std::string_view name, size_t end) {
  if (end < 2) return 0;
  const size_t slash = name.rfind('/', end - 2);
  return slash == std::string_view::npos ? 0 : slash + 1;
}

void AppendLowerAscii(std::string_view in, std::string& out) {
  out.clear();
  for (char c : in) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c);
}

class TarSampleStream : public SampleStream {
 public:
  TarSampleStream(std::unique_ptr<UrlStream> urls, Opener opener, Handler handler,
                  WorkerContext ctx)
      : urls_(std::move(urls)),
        opener_(std::move(opener)),
        handler_(handler),
        ctx_(std::move(ctx)) {}

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
    if (done_.has_value()) CloseShard();
    return result;
  }

 private:
  // What Advance does after the handler saw an error.
  enum class Flow { kReturn, kGoOn };

  SampleResult Advance();
  absl::Status OpenShard(const std::string& url);
  void CloseShard();
  std::optional<Sample> TakeSampleCompletedBy(const std::string& failed_member);
  absl::Status AddMember(TarMember member, std::optional<Sample>& completed);
  void StartSample(std::string_view key, Buffer data);
  Flow Handle(const absl::Status& error, SampleResult& result);

  std::unique_ptr<UrlStream> urls_;
  Opener opener_;
  Handler handler_;
  WorkerContext ctx_;
  std::optional<absl::Status> done_;
  // pending_error_ is a shard's read error held back while the sample that
  // was complete before it is returned.
  std::optional<absl::Status> pending_error_;

  std::unique_ptr<TarReader> reader_;
  std::string url_;
  // The sample being assembled: `key_` is its key while has_sample_ or
  // dropping_ (the members of a sample dropped for an error are skipped).
  Sample sample_;
  std::string key_;
  std::string field_;
  bool has_sample_ = false;
  bool dropping_ = false;
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
  if (pending_error_.has_value()) {
    absl::Status error = *std::move(pending_error_);
    pending_error_.reset();
    if (Handle(error, result) == Flow::kReturn) return result;
  }
  while (true) {
    if (reader_ == nullptr) {
      absl::StatusOr<std::optional<std::string>> url = urls_->Next();
      if (!url.ok()) return url.status();  // the shard list's own error: not per item
      if (!url->has_value()) return std::nullopt;
      absl::Status opened = OpenShard(**url);
      if (!opened.ok() && Handle(opened, result) == Flow::kReturn) return result;
      continue;
    }
    absl::StatusOr<std::optional<TarMember>> member = reader_->Next();
    if (!member.ok()) {
      std::optional<Sample> completed = TakeSampleCompletedBy(reader_->failed_member());
      CloseShard();
      if (completed.has_value()) {
        pending_error_ = member.status();
        return completed;
      }
      if (Handle(member.status(), result) == Flow::kReturn) return result;
      continue;
    }
    if (!member->has_value()) {
      const bool had_sample = has_sample_;
      Sample last = std::move(sample_);
      CloseShard();
      if (had_sample) return last;
      continue;
    }
    std::optional<Sample> completed;
    absl::Status added = AddMember(std::move(**member), completed);
    if (!added.ok() && Handle(added, result) == Flow::kReturn) return result;
    if (completed.has_value()) return completed;
  }
}

absl::Status TarSampleStream::OpenShard(const std::string& url) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = opener_(url);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<std::unique_ptr<TarReader>> reader = TarReader::Open(std::move(*stream));
  if (!reader.ok()) return reader.status();
  reader_ = std::move(*reader);
  url_ = url;
  return absl::OkStatus();
}

void TarSampleStream::CloseShard() {
  reader_.reset();
  sample_ = Sample();
  has_sample_ = false;
  dropping_ = false;
}

// A read error in a member of another key proves the sample in progress
// complete: it is returned before the error. Otherwise (an error in one of its
// own members, or between members) it is dropped with the rest of the shard.
std::optional<Sample> TarSampleStream::TakeSampleCompletedBy(const std::string& failed_member) {
  if (!has_sample_ || failed_member.empty()) return std::nullopt;
  const std::optional<KeyField> split = SplitMemberName(failed_member);
  if (split.has_value() && split->key == key_) return std::nullopt;
  has_sample_ = false;
  return std::move(sample_);
}

absl::Status TarSampleStream::AddMember(TarMember member, std::optional<Sample>& completed) {
  if (IsMetadataName(member.name)) return absl::OkStatus();
  const std::optional<KeyField> split = SplitMemberName(member.name);
  if (!split.has_value()) return absl::OkStatus();
  const bool same_key = (has_sample_ || dropping_) && split->key == key_;
  if (!same_key) {
    if (has_sample_) completed = std::move(sample_);
    AppendLowerAscii(split->field, field_);
    StartSample(split->key, std::move(member.data));
    return absl::OkStatus();
  }
  if (dropping_) return absl::OkStatus();
  AppendLowerAscii(split->field, field_);
  if (sample_.Has(field_)) {
    absl::Status error = absl::InvalidArgumentError(
        Cat(url_, ": duplicate field '", field_, "' in sample ", key_, " (member ", member.name,
            " at offset ", member.offset, ")"));
    sample_ = Sample();
    has_sample_ = false;
    dropping_ = true;
    return error;
  }
  sample_.Append(field_, std::move(member.data));
  return absl::OkStatus();
}

void TarSampleStream::StartSample(std::string_view key, Buffer data) {
  key_.assign(key.data(), key.size());
  sample_ = Sample();
  sample_.Append(std::string(kKeyField), key_);
  sample_.Append(std::string(kUrlField), url_);
  sample_.Append(field_, std::move(data));
  has_sample_ = true;
  dropping_ = false;
}

}  // namespace

std::optional<KeyField> SplitMemberName(std::string_view name) {
  // Mirrors the reference's ^((?:.*/|)[^.]+)[.]([^/]*)$ with its backtracking:
  // key = a prefix that is empty or ends in '/' (and, as Python's '.' does
  // not match a newline, holds none) followed by a non-empty dot-free run;
  // the split dot must come after the last '/'. Longer prefixes are tried
  // first, as the greedy '.*' does, so "dir/.hidden" gives ("dir/", "hidden").
  const size_t last_slash = name.rfind('/');
  const size_t newline = name.find('\n');
  size_t start = last_slash == std::string_view::npos ? 0 : last_slash + 1;
  while (true) {
    if (newline == std::string_view::npos || newline >= start) {
      const size_t dot = name.find('.', start);
      if (dot == std::string_view::npos) return std::nullopt;
      if (last_slash != std::string_view::npos && dot < last_slash) return std::nullopt;
      if (dot > start) return KeyField{name.substr(0, dot), name.substr(dot + 1)};
    }
    if (start == 0) return std::nullopt;
    start = PreviousPrefixEnd(name, start);
  }
}

bool IsMetadataName(std::string_view name) {
  // The reference skips a top-level "__x__" and anything matching
  // __[^/]*__($|/) at the start ('$' also matching before a final newline).
  if (!StartsWith(name, "__")) return false;
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) {
    return EndsWith(name, "__") || (name.size() >= 5 && EndsWith(name, "__\n"));
  }
  return slash >= 4 && name.substr(slash - 2, 2) == "__";
}

std::unique_ptr<SampleStream> TarSamples(std::unique_ptr<UrlStream> urls, Opener opener,
                                         Handler handler, const WorkerContext& ctx) {
  return std::make_unique<TarSampleStream>(std::move(urls), std::move(opener), handler, ctx);
}

}  // namespace wds
