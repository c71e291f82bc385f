#include "wds/shard_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <utility>

#include "wds/internal/status_macros.h"
#include "wds/internal/strings.h"
#include "wds/internal/tar_grouping.h"

namespace wds {
namespace {

constexpr int64_t kBlock = 512;
// The end-of-archive marker TarWriter writes: two zero blocks.
constexpr int64_t kEndOfArchive = 2 * kBlock;
// The largest size a ustar header's 11 octal digits hold.
constexpr int64_t kMaxUstarSize = (int64_t{1} << 33) - 1;
constexpr int kMaxWidth = 32;

int64_t RoundUp(int64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

bool NeedsPax(std::string_view name, int64_t size) {
  if (name.size() >= 100 || size > kMaxUstarSize) return true;
  for (char c : name) {
    if (static_cast<unsigned char>(c) >= 0x80) return true;
  }
  return false;
}

// ValueSize is the length of the text TarWriter writes for `value`; nullopt
// for values it refuses.
std::optional<int64_t> ValueSize(const Value& value) {
  if (const Buffer* b = std::get_if<Buffer>(&value)) return static_cast<int64_t>(b->size());
  if (const std::string* s = std::get_if<std::string>(&value)) {
    return static_cast<int64_t>(s->size());
  }
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    return static_cast<int64_t>(Cat(*i).size());
  }
  if (const double* d = std::get_if<double>(&value)) return static_cast<int64_t>(Cat(*d).size());
  return std::nullopt;
}

absl::Status CheckKey(const Sample& sample, std::string_view pattern) {
  const std::string* key = sample.GetString(kKeyField);
  if (key == nullptr || key->empty()) {
    return absl::InvalidArgumentError(Cat(pattern, ": sample has no __key__"));
  }
  const size_t slash = key->rfind('/');
  const std::string_view base = slash == std::string::npos
                                    ? std::string_view(*key)
                                    : std::string_view(*key).substr(slash + 1);
  if (base.empty() || base.find('.') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        Cat(pattern, ": key '", *key,
            "' cannot be written: its basename is empty or holds a dot, so a reader would split "
            "its member names differently"));
  }
  for (const Sample::Field& f : sample) {
    if (f.first.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(Cat(pattern, ": sample ", *key, ": field '", f.first,
                                            "' holds a '/', which a reader cannot group"));
    }
  }
  return absl::OkStatus();
}

IndexSample ToIndexSample(const std::vector<WrittenMember>& written) {
  IndexSample sample;
  for (const WrittenMember& m : written) {
    const std::optional<MemberName> split = SplitMemberName(m.name);
    // CheckKey guarantees that every name splits at the key.
    sample.members.push_back(
        {std::string(split.has_value() ? split->field : ""), m.data_offset, m.size, m.name});
  }
  return sample;
}

}  // namespace

absl::StatusOr<std::string> FormatShardName(std::string_view pattern, int64_t number) {
  std::string out;
  int conversions = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out.push_back(pattern[i]);
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    size_t j = i + 1;
    const bool zero = j < pattern.size() && pattern[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width <= kMaxWidth) {
      width = width * 10 + (pattern[j++] - '0');
    }
    if (j >= pattern.size() || pattern[j] != 'd' || width > kMaxWidth) {
      return absl::InvalidArgumentError(
          Cat("shard pattern '", pattern, "': only %d, %Nd and %0Nd conversions are supported"));
    }
    char text[64];
    std::snprintf(text, sizeof(text), zero ? "%0*lld" : "%*lld", width,
                  static_cast<long long>(number));
    out.append(text);
    ++conversions;
    i = j;
  }
  if (conversions != 1) {
    return absl::InvalidArgumentError(Cat("shard pattern '", pattern,
                                          "' must hold exactly one integer conversion such as "
                                          "%06d, found ",
                                          conversions));
  }
  return out;
}

int64_t MemberFootprint(std::string_view name, int64_t size) {
  int64_t bytes = kBlock + RoundUp(size);
  if (NeedsPax(name, size)) {
    // A pax extended header: its own header block plus records that hold the
    // name (at most 3 bytes of escaping per byte is more than enough) and a
    // size; the bound need not be tight, only never below the real size.
    bytes += kBlock + RoundUp(3 * static_cast<int64_t>(name.size()) + 256);
  }
  return bytes;
}

int64_t TarFootprint(const Sample& sample) {
  const std::string_view key = sample.key();
  int64_t bytes = 0;
  for (const Sample::Field& f : sample) {
    if (f.first.empty() || f.first[0] == '_') continue;
    const std::optional<int64_t> size = ValueSize(f.second);
    if (!size.has_value()) continue;
    bytes += MemberFootprint(Cat(key, ".", f.first), *size);
  }
  return bytes;
}

bool ShardRoller::Add(int64_t footprint) {
  if (count_ > 0 && count_ < maxcount_ && bytes_ + footprint + kEndOfArchive <= maxsize_) {
    ++count_;
    bytes_ += footprint;
    return false;
  }
  count_ = 1;
  bytes_ = footprint;
  return true;
}

absl::StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Create(std::string pattern,
                                                                 ShardWriterOptions options) {
  WDS_RETURN_IF_ERROR(FormatShardName(pattern, options.first_shard).status());
  if (options.maxcount <= 0 || options.maxsize <= 0) {
    return absl::InvalidArgumentError(Cat(pattern, ": maxcount and maxsize must be positive (got ",
                                          options.maxcount, " and ", options.maxsize, ")"));
  }
  return std::unique_ptr<ShardWriter>(new ShardWriter(std::move(pattern), std::move(options)));
}

ShardWriter::ShardWriter(std::string pattern, ShardWriterOptions options)
    : pattern_(std::move(pattern)),
      options_(std::move(options)),
      roller_(options_.maxcount, options_.maxsize),
      next_number_(options_.first_shard) {}

ShardWriter::~ShardWriter() { Abort(); }

void ShardWriter::Abort() {
  tar_.reset();
  if (!temp_path_.empty()) std::remove(temp_path_.c_str());
  temp_path_.clear();
}

absl::Status ShardWriter::Fail(absl::Status status) {
  Abort();
  error_ = status;
  return status;
}

absl::Status ShardWriter::StartShard() {
  absl::StatusOr<std::string> path = FormatShardName(pattern_, next_number_);
  if (!path.ok()) return path.status();
  current_ = ShardInfo();
  current_.path = *std::move(path);
  current_.number = next_number_++;
  index_.samples.clear();
  temp_path_ = TemporaryPath(current_.path);
  absl::StatusOr<std::unique_ptr<TarWriter>> tar = TarWriter::Create(temp_path_, options_.tar);
  if (!tar.ok()) {
    temp_path_.clear();
    return tar.status();
  }
  tar_ = *std::move(tar);
  return absl::OkStatus();
}

absl::Status ShardWriter::FinishShard() {
  WDS_RETURN_IF_ERROR(tar_->Close());
  current_.tar_bytes = tar_->tar_bytes();
  current_.data_bytes = tar_->bytes_written();
  tar_.reset();
  struct stat st;
  if (stat(temp_path_.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, Cat(temp_path_, ": cannot stat the finished shard"));
  }
  current_.file_bytes = st.st_size;
  std::string index_text;
  if (options_.write_index) {
    absl::StatusOr<std::string> text = index_.ToText();
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          Cat(current_.path, ": cannot index: ", ToStd(text.status().message())));
    }
    index_text = *std::move(text);
    // A stale sidecar must never sit beside the new shard.
    std::remove(IndexPath(current_.path).c_str());
  }
  if (std::rename(temp_path_.c_str(), current_.path.c_str()) != 0) {
    return absl::ErrnoToStatus(errno,
                               Cat(current_.path, ": cannot rename ", temp_path_, " into place"));
  }
  temp_path_.clear();
  ++shards_written_;
  if (options_.write_index) {
    WDS_RETURN_IF_ERROR(WriteFileAtomically(IndexPath(current_.path), index_text));
  }
  if (options_.on_close) WDS_RETURN_IF_ERROR(options_.on_close(current_));
  return absl::OkStatus();
}

absl::Status ShardWriter::Write(const Sample& sample) {
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError(Cat(pattern_, ": writer is closed"));
  absl::Status valid = CheckKey(sample, pattern_);
  if (!valid.ok()) return Fail(valid);
  const bool new_shard = roller_.Add(TarFootprint(sample));
  if (new_shard && tar_ != nullptr) {
    absl::Status finished = FinishShard();
    if (!finished.ok()) return Fail(finished);
  }
  if (tar_ == nullptr) {
    absl::Status started = StartShard();
    if (!started.ok()) return Fail(started);
  }
  std::vector<WrittenMember> written;
  absl::Status status = tar_->Write(sample, options_.write_index ? &written : nullptr);
  if (!status.ok()) return Fail(status);
  if (options_.write_index) index_.samples.push_back(ToIndexSample(written));
  ++current_.samples;
  ++samples_written_;
  return absl::OkStatus();
}

absl::Status ShardWriter::Close() {
  if (!error_.ok()) return error_;
  if (closed_) return absl::OkStatus();
  closed_ = true;
  if (tar_ == nullptr) return absl::OkStatus();
  absl::Status finished = FinishShard();
  if (!finished.ok()) return Fail(finished);
  return absl::OkStatus();
}

}  // namespace wds
