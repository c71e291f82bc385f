#include "wds/tar/shard_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/tar/shard_roller.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/remote_upload.h"
#include "wds/tar/shard_index.h"

namespace wds {
namespace {

constexpr int kMaxWidth = 32;

absl::Status CheckKey(const Sample& sample, std::string_view pattern) {
  const std::string* key = sample.GetString(kKeyField);
  if (key == nullptr || key->empty()) {
    return absl::InvalidArgumentError(Cat(pattern, ": sample has no __key__"));
  }
  if (!IsWritableKey(*key)) {
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

// StagingFile creates an empty file in `dir` (empty: $TMPDIR, else /tmp)
// to write a remote shard into, and returns its path.
absl::StatusOr<std::string> StagingFile(const std::string& dir) {
  std::string base = dir;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string path = Cat(base, "/wds-shard-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, Cat(base, ": cannot create a file to stage a shard in"));
  }
  close(fd);
  return path;
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

// State is a ShardWriter's data and its shard-level steps.
struct ShardWriter::State {
  State(std::string p, ShardWriterOptions o)
      : pattern(std::move(p)),
        options(std::move(o)),
        roller(options.maxcount, options.maxsize),
        next_number(options.first_shard),
        remote(IsRemoteUrl(pattern)) {}

  absl::Status StartShard();
  absl::Status FinishShard();
  // Publish gives the finished temporary file its final name: a rename, or
  // an upload (the index, if any, deleted before and written after).
  absl::Status Publish(const std::string& index_text);
  absl::Status Fail(absl::Status status);
  void Abort();

  std::string pattern;
  ShardWriterOptions options;
  ShardRoller roller;
  std::unique_ptr<TarWriter> tar;
  ShardInfo current;
  std::string temp_path;
  ShardIndex index;
  absl::Status error;
  bool closed = false;
  int64_t next_number;
  // remote: the pattern is a URL; shards are staged, then uploaded.
  bool remote;
  int64_t shards_written = 0;
  int64_t samples_written = 0;
};

void ShardWriter::State::Abort() {
  tar.reset();
  if (!temp_path.empty()) std::remove(temp_path.c_str());
  temp_path.clear();
}

absl::Status ShardWriter::State::Fail(absl::Status status) {
  Abort();
  error = status;
  return status;
}

absl::Status ShardWriter::State::StartShard() {
  absl::StatusOr<std::string> path = FormatShardName(pattern, next_number);
  if (!path.ok()) return path.status();
  current = ShardInfo();
  current.path = *std::move(path);
  current.number = next_number++;
  index.samples.clear();
  if (remote) {
    WDS_ASSIGN_OR_RETURN(temp_path, StagingFile(options.staging_dir));
  } else {
    temp_path = TemporaryPath(current.path);
  }
  absl::StatusOr<std::unique_ptr<TarWriter>> created = TarWriter::Create(temp_path, options.tar);
  if (!created.ok()) {
    if (remote) std::remove(temp_path.c_str());  // made by StagingFile
    temp_path.clear();
    return created.status();
  }
  tar = *std::move(created);
  return absl::OkStatus();
}

absl::Status ShardWriter::State::FinishShard() {
  WDS_RETURN_IF_ERROR(tar->Close());
  current.tar_bytes = tar->tar_bytes();
  current.data_bytes = tar->bytes_written();
  tar.reset();
  struct stat st;
  if (stat(temp_path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, Cat(temp_path, ": cannot stat the finished shard"));
  }
  current.file_bytes = st.st_size;
  std::string index_text;
  if (options.write_index) {
    absl::StatusOr<std::string> text = index.ToText();
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          Cat(current.path, ": cannot index: ", ToStd(text.status().message())));
    }
    index_text = *std::move(text);
  }
  WDS_RETURN_IF_ERROR(Publish(index_text));
  if (options.on_close) WDS_RETURN_IF_ERROR(options.on_close(current));
  return absl::OkStatus();
}

absl::Status ShardWriter::State::Publish(const std::string& index_text) {
  const std::string index_path = IndexPath(current.path);
  if (!remote) {
    // A stale sidecar must never sit beside the new shard.
    if (options.write_index) std::remove(index_path.c_str());
    if (std::rename(temp_path.c_str(), current.path.c_str()) != 0) {
      return absl::ErrnoToStatus(errno,
                                 Cat(current.path, ": cannot rename ", temp_path, " into place"));
    }
    temp_path.clear();
    ++shards_written;
    if (options.write_index) WDS_RETURN_IF_ERROR(WriteFileAtomically(index_path, index_text));
    return absl::OkStatus();
  }
  const RemoteOptions& o = *options.remote;
  if (options.write_index) WDS_RETURN_IF_ERROR(DeleteRemoteObject(index_path, o));
  WDS_RETURN_IF_ERROR(UploadFile(temp_path, current.path, o));
  std::remove(temp_path.c_str());
  temp_path.clear();
  ++shards_written;
  if (!options.write_index) return absl::OkStatus();
  return UploadBytes(index_text, index_path, o);
}

absl::StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Create(std::string pattern,
                                                                 ShardWriterOptions options) {
  WDS_RETURN_IF_ERROR(FormatShardName(pattern, options.first_shard).status());
  if (options.maxcount <= 0 || options.maxsize <= 0) {
    return absl::InvalidArgumentError(Cat(pattern, ": maxcount and maxsize must be positive (got ",
                                          options.maxcount, " and ", options.maxsize, ")"));
  }
  if (IsRemoteUrl(pattern)) {
    if (!options.remote.has_value()) {
      WDS_ASSIGN_OR_RETURN(options.remote, RemoteOptions::ParseFromEnvironment());
    }
    // Checks the URL, the options and the credentials; sends nothing.
    WDS_ASSIGN_OR_RETURN(const std::string first, FormatShardName(pattern, options.first_shard));
    WDS_RETURN_IF_ERROR(RemoteUpload::Create(first, *options.remote).status());
  }
  return std::unique_ptr<ShardWriter>(
      new ShardWriter(std::make_unique<State>(std::move(pattern), std::move(options))));
}

ShardWriter::ShardWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

ShardWriter::~ShardWriter() { Abort(); }

void ShardWriter::Abort() { state_->Abort(); }

absl::Status ShardWriter::Write(const Sample& sample) {
  State& s = *state_;
  if (!s.error.ok()) return s.error;
  if (s.closed) return absl::FailedPreconditionError(Cat(s.pattern, ": writer is closed"));
  absl::Status valid = CheckKey(sample, s.pattern);
  if (!valid.ok()) return s.Fail(valid);
  const bool new_shard = s.roller.Add(TarFootprint(sample));
  if (new_shard && s.tar != nullptr) {
    absl::Status finished = s.FinishShard();
    if (!finished.ok()) return s.Fail(finished);
  }
  if (s.tar == nullptr) {
    absl::Status started = s.StartShard();
    if (!started.ok()) return s.Fail(started);
  }
  std::vector<WrittenMember> written;
  absl::Status status = s.tar->Write(sample, s.options.write_index ? &written : nullptr);
  if (!status.ok()) return s.Fail(status);
  if (s.options.write_index) s.index.samples.push_back(ToIndexSample(written));
  ++s.current.samples;
  ++s.samples_written;
  return absl::OkStatus();
}

absl::Status ShardWriter::Close() {
  State& s = *state_;
  if (!s.error.ok()) return s.error;
  if (s.closed) return absl::OkStatus();
  s.closed = true;
  if (s.tar == nullptr) return absl::OkStatus();
  absl::Status finished = s.FinishShard();
  if (!finished.ok()) return s.Fail(finished);
  return absl::OkStatus();
}

int64_t ShardWriter::shards_written() const { return state_->shards_written; }
int64_t ShardWriter::samples_written() const { return state_->samples_written; }

}  // namespace wds
