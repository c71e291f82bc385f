#include "wds/tar/shard_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <system_error>
#include <utility>

#include "wds/internal/base/background_call.h"
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

// PublishRemote uploads the staged shard `staged` to `url`, its index (when
// `write_index`) deleted before and written after.
absl::Status PublishRemote(const std::string& staged, const std::string& url,
                           const std::string& index_text, bool write_index,
                           const RemoteOptions& options) {
  const std::string index_url = IndexPath(url);
  if (write_index) WDS_RETURN_IF_ERROR(DeleteRemoteObject(index_url, options));
  WDS_RETURN_IF_ERROR(UploadFile(staged, url, options));
  if (!write_index) return absl::OkStatus();
  return UploadBytes(index_text, index_url, options);
}

// BackgroundUpload runs one shard's upload on a thread of its own (a
// BackgroundCall), so that the writer fills the next shard meanwhile. The
// constructor throws std::system_error when no thread can be started.
class BackgroundUpload {
 public:
  // Outcome is what became of the upload (OK: the shard is published), and
  // the waiting thread's interrupt, if it gave up waiting.
  struct Outcome {
    absl::Status uploaded;
    absl::Status interrupted;
  };

  explicit BackgroundUpload(std::function<absl::Status()> upload)
      : call_([this, upload = std::move(upload)] { result_ = upload(); },
              absl::CancelledError("the shard writer gave up its upload")) {}

  // Wait waits for the upload to end; when the calling thread's interrupt
  // check gives up first, the upload is cancelled (it may have gone up all
  // the same, just before).
  Outcome Wait() {
    absl::Status interrupted = call_.Wait(BackgroundCall::kCancelAndFinish);
    return Outcome{result_, std::move(interrupted)};
  }

  // Cancel cancels the upload and returns its status once it ended (OK when
  // it had gone up).
  absl::Status Cancel() {
    call_.Cancel();
    (void)call_.Wait(BackgroundCall::kCancelAndFinish);
    return result_;
  }

 private:
  absl::Status result_;  // written by the call before it ends
  BackgroundCall call_;
};

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
  // FinishShard closes the current shard and publishes it: a rename into
  // place, or (remote) an upload started in the background once the
  // previous one ended.
  absl::Status FinishShard();
  absl::Status PublishLocal(const std::string& index_text);
  // JoinUpload waits for the upload in progress, if any (Ctrl-C, through the
  // caller's interrupt check, cancels it), then counts its shard and runs
  // on_close.
  absl::Status JoinUpload();
  absl::Status Fail(absl::Status status);
  void Abort();

  // Uploading is a finished remote shard going up while the next fills.
  struct Uploading {
    ShardInfo shard;
    std::string staged;
    std::unique_ptr<BackgroundUpload> upload;
  };

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
  std::optional<Uploading> uploading;
  const pid_t owner = getpid();
  int64_t shards_written = 0;
  int64_t samples_written = 0;
};

void ShardWriter::State::Abort() {
  if (getpid() != owner) {
    // A forked child's copy: the files and the upload thread are the
    // parent's (the thread does not exist here, and joining it would hang;
    // the tar writer would flush what it buffered into the parent's file).
    if (uploading.has_value()) (void)uploading->upload.release();
    uploading.reset();
    (void)tar.release();
    temp_path.clear();
    return;
  }
  if (uploading.has_value()) {
    // Counted if it went up before the cancel took effect.
    if (uploading->upload->Cancel().ok()) ++shards_written;
    std::remove(uploading->staged.c_str());
    uploading.reset();
  }
  tar.reset();
  if (!temp_path.empty()) std::remove(temp_path.c_str());
  temp_path.clear();
}

absl::Status ShardWriter::State::Fail(absl::Status status) {
  // The shard finished before the error is still published (unless the
  // caller's interrupt check gives up on it); what went wrong with it is
  // added to the error.
  if (uploading.has_value()) {
    const std::string url = uploading->shard.path;
    if (absl::Status joined = JoinUpload(); !joined.ok()) {
      status = absl::Status(status.code(), Cat(ToStd(status.message()), "; and the shard before, ",
                                               url, ": ", ToStd(joined.message())));
    }
  }
  Abort();
  error = status;
  return status;
}

absl::Status ShardWriter::State::JoinUpload() {
  if (!uploading.has_value()) return absl::OkStatus();
  const BackgroundUpload::Outcome outcome = uploading->upload->Wait();
  std::remove(uploading->staged.c_str());
  const ShardInfo shard = std::move(uploading->shard);
  uploading.reset();
  absl::Status status = outcome.uploaded;
  if (status.ok()) {
    ++shards_written;
    if (options.on_close) status = options.on_close(shard);
  }
  return outcome.interrupted.ok() ? status : outcome.interrupted;
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
  if (!remote) {
    WDS_RETURN_IF_ERROR(PublishLocal(index_text));
    if (options.on_close) WDS_RETURN_IF_ERROR(options.on_close(current));
    return absl::OkStatus();
  }
  // One upload at a time: the last shard's must end before this one's starts.
  WDS_RETURN_IF_ERROR(JoinUpload());
  std::function<absl::Status()> upload =
      [staged = temp_path, url = current.path, index_text = std::move(index_text),
       write_index = options.write_index, remote_options = *options.remote] {
        return PublishRemote(staged, url, index_text, write_index, remote_options);
      };
  std::unique_ptr<BackgroundUpload> background;
  if (options.upload_in_background) {
    try {
      background = std::make_unique<BackgroundUpload>(upload);
    } catch (const std::system_error&) {
      // No thread to be had (a limit on threads): upload here instead.
    }
  }
  if (background == nullptr) {
    WDS_RETURN_IF_ERROR(upload());
    std::remove(temp_path.c_str());
    temp_path.clear();
    ++shards_written;
    if (options.on_close) WDS_RETURN_IF_ERROR(options.on_close(current));
    return absl::OkStatus();
  }
  uploading = Uploading{current, temp_path, std::move(background)};
  temp_path.clear();  // the upload's now
  return absl::OkStatus();
}

absl::Status ShardWriter::State::PublishLocal(const std::string& index_text) {
  const std::string index_path = IndexPath(current.path);
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
  absl::Status finished = s.tar == nullptr ? absl::OkStatus() : s.FinishShard();
  if (finished.ok()) finished = s.JoinUpload();
  if (!finished.ok()) return s.Fail(finished);
  return absl::OkStatus();
}

int64_t ShardWriter::shards_written() const { return state_->shards_written; }
int64_t ShardWriter::samples_written() const { return state_->samples_written; }

}  // namespace wds
