// wds-shard create: pack samples from a directory tree, an ImageFolder, a
// listing or tars into numbered shards.
//
// Shard boundaries follow ShardWriter's rule over the sample sequence, so
// `--workers N` (shards written by N threads, each a whole shard) gives the
// same bytes as one worker. Shards are written under temporary names and
// renamed when complete; on an error or a signal (SIGINT, SIGTERM, SIGHUP)
// the unfinished shards are removed, the finished ones stay (to s3://, a
// finished shard still uploading is given up unless it had gone up).
//
// Beside the shards, named after the pattern's prefix ("out/train-%06d.tar"
// -> "out/train-..."): with --index, "<prefix>-shardindex.json" (the wids
// dataset index) and a DALI sidecar per shard; for an ImageFolder,
// "<prefix>-classes.txt": one class name per line, line N (from 0) naming
// class index N.
//
// An s3:// or gs:// pattern uploads each finished shard (ShardWriter stages
// it in $TMPDIR first) and the files beside it; credentials and endpoint
// come from the environment (AWS_*; GOOGLE_OAUTH_ACCESS_TOKEN or
// WDS_GCS_HMAC_*), as for reading.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "common.h"
#include "inputs.h"
#include "wds/base/interrupt.h"
#include "wds/base/random.h"
#include "wds/internal/base/bounded_queue.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/tar/shard_roller.h"
#include "wds/io/remote.h"
#include "wds/io/remote_upload.h"
#include "wds/tar/shard_index.h"
#include "wds/tar/shard_writer.h"

namespace wds::tools {
namespace {

constexpr char kUsage[] =
    "usage: wds-shard create --output PATTERN [options] INPUT...\n"
    "  INPUT: a directory tree, an ImageFolder root (--format imagefolder), a listing\n"
    "         (.tsv: KEY<TAB>FIELD=PATH...; .jsonl: {\"__key__\": KEY, FIELD: PATH, ...}),\n"
    "         or tar shards / '-' for a tar stream on standard input (re-sharding)\n"
    "  --output PATTERN       shard names with one integer conversion: out/train-%06d.tar,\n"
    "                         s3://bucket/train-%06d.tar or gs://... (staged in $TMPDIR, then\n"
    "                         uploaded)\n"
    "  --maxcount N           samples per shard (default 100000)\n"
    "  --maxsize SIZE         uncompressed tar bytes per shard: 512M, 3G (default 3e9)\n"
    "  --compress none|gz|zst[:LEVEL]   default: from the pattern's suffix (.gz, .zst)\n"
    "  --compress-threads N   threads compressing each shard (default 1; gz: same bytes)\n"
    "  --shuffle [--seed N]   shuffle the sample order first (a tar input is held in memory)\n"
    "  --workers N            write N shards at a time (same bytes as one worker)\n"
    "  --index                write SHARD.idx sidecars and <prefix>-shardindex.json\n"
    "  --format auto|tree|imagefolder|tsv|jsonl|tar\n"
    "  --mtime SECONDS        member modification time (default 0)\n";

// Big enough never to roll: a worker's writer gets exactly one planned shard.
constexpr int64_t kNoLimit = int64_t{1} << 60;

struct CreateOptions {
  std::string pattern;
  ShardWriterOptions writer;
  bool compression_given = false;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t workers = 1;
  InputFormat format = InputFormat::kAuto;
  std::vector<std::string> inputs;
};

absl::Status ParseCompression(std::string_view spec, TarWriterOptions& tar) {
  const size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  if (name == "none") {
    tar.compression = TarCompression::kNone;
  } else if (name == "gz" || name == "gzip") {
    tar.compression = TarCompression::kGzip;
  } else if (name == "zst" || name == "zstd") {
    tar.compression = TarCompression::kZstd;
  } else {
    return absl::InvalidArgumentError("--compress: expected none, gz or zst, not '" +
                                      std::string(spec) + "'");
  }
  if (colon == std::string_view::npos) return absl::OkStatus();
  const int max_level = tar.compression == TarCompression::kGzip ? 9 : 22;
  absl::StatusOr<int64_t> level = ParseCount(spec.substr(colon + 1), "--compress level");
  if (tar.compression == TarCompression::kNone || !level.ok() || *level > max_level) {
    return absl::InvalidArgumentError("--compress: the level of '" + std::string(spec) +
                                      "' is out of range (gz: 1..9, zst: 1..22)");
  }
  tar.level = static_cast<int>(*level);
  return absl::OkStatus();
}

template <typename T, typename U>
absl::Status Assign(absl::StatusOr<T> value, U& out) {
  if (!value.ok()) return value.status();
  out = static_cast<U>(*value);
  return absl::OkStatus();
}

// ApplyValue applies an option that takes a value.
absl::Status ApplyValue(std::string_view option, const std::string& value, CreateOptions& o) {
  if (option == "--output") return Assign(absl::StatusOr<std::string>(value), o.pattern);
  if (option == "--maxcount") return Assign(ParseCount(value, option), o.writer.maxcount);
  if (option == "--maxsize") return Assign(ParseSize(value), o.writer.maxsize);
  if (option == "--seed") return Assign(ParseCount(value, option, 0), o.seed);
  if (option == "--mtime") return Assign(ParseCount(value, option, 0), o.writer.tar.mtime);
  if (option == "--workers") return Assign(ParseCount(value, option), o.workers);
  if (option == "--compress-threads") {
    absl::StatusOr<int64_t> threads = ParseCount(value, option);
    if (threads.ok() && *threads > kMaxCompressionThreads) {
      return absl::InvalidArgumentError(
          Cat("--compress-threads: at most ", kMaxCompressionThreads, ", not ", value));
    }
    return Assign(threads, o.writer.tar.threads);
  }
  if (option == "--format") return Assign(ParseInputFormat(value), o.format);
  if (option == "--compress") {
    o.compression_given = true;
    return ParseCompression(value, o.writer.tar);
  }
  return absl::InvalidArgumentError("create: unknown option " + std::string(option));
}

absl::Status ParseCreate(int argc, char** argv, CreateOptions& o) {
  Args args(argc, argv);
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--shuffle") {
      o.shuffle = true;
    } else if (arg == "--index") {
      o.writer.write_index = true;
    } else if (IsOption(arg)) {
      absl::StatusOr<std::string> value = args.Value(arg);
      if (!value.ok()) return value.status();
      if (absl::Status s = ApplyValue(arg, *value, o); !s.ok()) return s;
    } else {
      o.inputs.emplace_back(arg);
    }
  }
  if (o.pattern.empty()) return absl::InvalidArgumentError("create: --output PATTERN is required");
  absl::StatusOr<std::string> first = FormatShardName(o.pattern, 0);
  if (!first.ok()) return first.status();
  const size_t slash = o.pattern.rfind('/');
  if (slash != std::string::npos && o.pattern.find('%') < slash) {
    return absl::InvalidArgumentError(
        "create: --output " + o.pattern +
        ": the shard number belongs in the file name, not a directory");
  }
  if (!o.compression_given) {
    if (EndsWith(o.pattern, "gz")) o.writer.tar.compression = TarCompression::kGzip;
    if (EndsWith(o.pattern, ".zst")) o.writer.tar.compression = TarCompression::kZstd;
  }
  if (o.inputs.empty()) return absl::InvalidArgumentError("create: no INPUT given");
  // More threads than this only add memory (a tar input's shards are held).
  o.workers = std::min<int64_t>(o.workers, 256);
  return absl::OkStatus();
}

// BesidePath names a file beside the shards: "<dir>/<stem>-<name>" where
// stem is the pattern's file name up to the number, without a trailing
// separator ("out/train-%06d.tar", "classes.txt" -> "out/train-classes.txt").
std::string BesidePath(const std::string& pattern, const std::string& name) {
  const size_t slash = pattern.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : pattern.substr(0, slash + 1);
  std::string stem = pattern.substr(dir.size(), pattern.find('%') - dir.size());
  while (!stem.empty() && (stem.back() == '-' || stem.back() == '_' || stem.back() == '.')) {
    stem.pop_back();
  }
  return dir + (stem.empty() ? name : stem + "-" + name);
}

// ShardLog collects finished shards from any thread.
class ShardLog {
 public:
  absl::Status Record(const ShardInfo& info) {
    std::lock_guard<std::mutex> lock(mu_);
    shards_[info.number] = info;
    return absl::OkStatus();
  }
  std::vector<ShardInfo> Shards() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ShardInfo> out;
    for (const auto& entry : shards_) out.push_back(entry.second);
    return out;
  }

 private:
  std::mutex mu_;
  std::map<int64_t, ShardInfo> shards_;
};

struct Job {
  int64_t number = 0;
  std::vector<SampleSource> samples;
};

// JobQueue hands planned shards to the worker threads; bounded, so that a
// tar input is held in memory a few shards at a time.
using JobQueue = BoundedQueue<Job>;

// FirstError keeps the first error any thread reports.
class FirstError {
 public:
  void Set(const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = status;
    failed_ = true;
  }
  bool failed() const { return failed_; }
  absl::Status Get() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  absl::Status status_;
  std::atomic<bool> failed_{false};
};

absl::Status InterruptedError() {
  return absl::CancelledError("interrupted by signal " + std::to_string(Interrupted()));
}

class Creator {
 public:
  Creator(const CreateOptions& options, Progress& progress)
      : options_(options), progress_(progress) {}

  absl::Status Run(SampleInput& input) {
    return options_.workers > 1 ? RunParallel(input) : RunSequential(input);
  }
  std::vector<ShardInfo> Shards() { return log_.Shards(); }

 private:
  ShardWriterOptions WriterOptions() {
    ShardWriterOptions o = options_.writer;
    o.on_close = [this](const ShardInfo& info) { return log_.Record(info); };
    return o;
  }

  absl::Status WriteOne(ShardWriter& writer, const SampleSource& source) {
    absl::StatusOr<Sample> sample = LoadSample(source);
    if (!sample.ok()) return sample.status();
    if (absl::Status s = writer.Write(*sample); !s.ok()) return s;
    progress_.Add(1, source.DataBytes());
    return absl::OkStatus();
  }

  // StopOnSignal is the interrupt check of a thread that writes shards: an
  // upload (an s3:// pattern) waiting on its server ends at a signal, and
  // its shard is not published.
  static absl::Status StopOnSignal() {
    return Interrupted() ? InterruptedError() : absl::OkStatus();
  }

  absl::Status RunSequential(SampleInput& input) {
    ScopedInterruptCheck check(&StopOnSignal);
    absl::StatusOr<std::unique_ptr<ShardWriter>> writer =
        ShardWriter::Create(options_.pattern, WriterOptions());
    if (!writer.ok()) return writer.status();
    while (true) {
      if (Interrupted()) return InterruptedError();
      absl::StatusOr<std::optional<SampleSource>> source = input.Next();
      if (!source.ok()) return source.status();
      if (!source->has_value()) break;
      if (absl::Status s = WriteOne(**writer, **source); !s.ok()) return s;
    }
    return (*writer)->Close();
  }

  absl::Status WriteJob(const Job& job) {
    ShardWriterOptions o = WriterOptions();
    o.first_shard = job.number;
    o.maxcount = kNoLimit;
    o.maxsize = kNoLimit;
    absl::StatusOr<std::unique_ptr<ShardWriter>> writer = ShardWriter::Create(options_.pattern, o);
    if (!writer.ok()) return writer.status();
    for (const SampleSource& source : job.samples) {
      if (Interrupted()) return InterruptedError();
      if (error_.failed()) return absl::CancelledError("another shard failed");
      if (absl::Status s = WriteOne(**writer, source); !s.ok()) return s;
    }
    return (*writer)->Close();
  }

  void Work(JobQueue& queue) {
    ScopedInterruptCheck check(&StopOnSignal);
    while (std::optional<Job> job = queue.Pop()) {
      if (error_.failed()) continue;
      if (absl::Status s = WriteJob(*job); !s.ok()) error_.Set(s);
    }
  }

  // Plan cuts the samples into shards with the writer's own rule.
  absl::Status Plan(SampleInput& input, JobQueue& queue) {
    ShardRoller roller(options_.writer.maxcount, options_.writer.maxsize);
    Job job{options_.writer.first_shard, {}};
    while (!error_.failed()) {
      if (Interrupted()) return InterruptedError();
      absl::StatusOr<std::optional<SampleSource>> source = input.Next();
      if (!source.ok()) return source.status();
      if (!source->has_value()) break;
      if (roller.Add((*source)->Footprint()) && !job.samples.empty()) {
        const int64_t next = job.number + 1;
        queue.Push(std::move(job));
        job = Job{next, {}};
      }
      job.samples.push_back(**std::move(source));
    }
    if (!job.samples.empty()) queue.Push(std::move(job));
    return absl::OkStatus();
  }

  absl::Status RunParallel(SampleInput& input) {
    JobQueue queue(static_cast<size_t>(options_.workers));
    std::vector<std::thread> threads;
    for (int64_t i = 0; i < options_.workers; ++i) threads.emplace_back([&] { Work(queue); });
    absl::Status planned = Plan(input, queue);
    if (!planned.ok()) error_.Set(planned);
    queue.CloseInput();
    for (std::thread& t : threads) t.join();
    return error_.Get();
  }

  const CreateOptions& options_;
  Progress& progress_;
  ShardLog log_;
  FirstError error_;
};

absl::Status Shuffle(Input& input, uint64_t seed) {
  std::vector<SampleSource> all;
  while (true) {
    if (Interrupted()) return InterruptedError();
    absl::StatusOr<std::optional<SampleSource>> source = input.samples->Next();
    if (!source.ok()) return source.status();
    if (!source->has_value()) break;
    all.push_back(**std::move(source));
  }
  // Fisher-Yates over Rng, whose draws are the same on every platform.
  Rng rng(DeriveSeed(seed, {kShuffle}));
  for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.Below(i)]);
  input.samples = VectorInput(std::move(all), input.samples->notes());
  return absl::OkStatus();
}

// WriteOutput writes `text` to `path`, a local file or an s3:// or gs:// object.
absl::Status WriteOutput(const std::string& path, std::string_view text) {
  return IsRemoteUrl(path) ? UploadBytes(text, path) : WriteFileAtomically(path, text);
}

absl::Status WriteSidecars(const CreateOptions& o, const Input& input,
                           const std::vector<ShardInfo>& shards, std::vector<std::string>& notes) {
  if (!input.classes.empty()) {
    std::string text;
    for (const std::string& name : input.classes) text += name + "\n";
    const std::string path = BesidePath(o.pattern, "classes.txt");
    if (absl::Status s = WriteOutput(path, text); !s.ok()) return s;
    notes.push_back("classes: " + path);
  }
  if (!o.writer.write_index) return absl::OkStatus();
  const std::string path = BesidePath(o.pattern, "shardindex.json");
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  DatasetIndex index;
  for (const ShardInfo& s : shards) {
    // The shards lie beside the JSON: their URLs are relative to it.
    index.shards.push_back({s.path.substr(dir.size()), s.samples, s.file_bytes});
  }
  if (absl::Status s = WriteOutput(path, index.ToJson()); !s.ok()) return s;
  notes.push_back("index: " + path);
  return absl::OkStatus();
}

void PrintSummary(const std::vector<ShardInfo>& shards, double seconds,
                  const std::vector<std::string>& notes) {
  int64_t samples = 0, data = 0, files = 0;
  for (const ShardInfo& s : shards) {
    samples += s.samples;
    data += s.data_bytes;
    files += s.file_bytes;
  }
  char time[32];
  std::snprintf(time, sizeof(time), "%.1f s", seconds);
  std::string line = "create: wrote " + std::to_string(shards.size()) + " shard(s), " +
                     std::to_string(samples) + " samples, " + HumanBytes(data) + " of data, " +
                     HumanBytes(files) + " in files, in " + time + ": " + shards.front().path;
  if (shards.size() > 1) line += " .. " + shards.back().path;
  Warn(line);
  for (const std::string& note : notes) Warn("create: " + note);
}

absl::Status CreateOutputDirectory(const std::string& pattern) {
  const std::filesystem::path dir = std::filesystem::path(pattern).parent_path();
  if (dir.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(dir.string() + ": cannot create: " + ec.message());
  return absl::OkStatus();
}

// RemoveStaleTemporaries removes the temporary shards ("<final>.<pid>.tmp",
// see TemporaryPath) that a run killed outright (SIGKILL, a crash, a power
// cut) left beside the output, judged stale because their process is gone.
// Temporaries of a run still going are left alone.
void RemoveStaleTemporaries(const std::string& pattern) {
  const std::filesystem::path path(pattern);
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  const std::string base = path.filename().string();
  const std::string prefix = base.substr(0, base.find('%'));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!StartsWith(name, prefix) || !EndsWith(name, ".tmp")) continue;
    const std::string_view rest = std::string_view(name).substr(0, name.size() - 4);
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos) continue;
    const std::string pid_text(rest.substr(dot + 1));
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == getpid() || (kill(pid, 0) != 0 && errno == ESRCH)) {
      std::filesystem::remove(entry.path(), ec);
      if (!ec) Warn("create: removed " + entry.path().string() + ", left by a run that was killed");
    }
  }
}

// ExitStatus reports `status` and returns the exit status: 128 + the signal
// after an interruption, else 1.
int ExitStatus(const std::string& message) {
  Fail(message);
  return Interrupted() ? 128 + Interrupted() : 1;
}

int Finish(const CreateOptions& o, Input& input, Creator& creator, Progress& progress,
           const absl::Status& status) {
  progress.Finish();
  std::vector<ShardInfo> shards = creator.Shards();
  if (!status.ok()) {
    std::string message = "create: " + std::string(status.message());
    if (!shards.empty()) {
      message += "; " + std::to_string(shards.size()) +
                 " finished shard(s) remain, unfinished ones were removed";
    }
    return ExitStatus(message);
  }
  if (shards.empty()) return Fail("create: no samples found in " + o.inputs.front());
  std::vector<std::string> notes;
  if (absl::Status s = WriteSidecars(o, input, shards, notes); !s.ok()) return Fail(s);
  if (std::string skipped = input.samples->notes(); !skipped.empty()) notes.push_back(skipped);
  absl::StatusOr<std::string> after = FormatShardName(o.pattern, shards.back().number + 1);
  struct stat st;
  if (after.ok() && !IsRemoteUrl(*after) && stat(after->c_str(), &st) == 0) {
    notes.push_back(*after + " is left from an earlier run and is not part of this output");
  }
  PrintSummary(shards, progress.seconds(), notes);
  return 0;
}

}  // namespace

int RunCreate(int argc, char** argv) {
  if (argc == 1 && (std::string_view(argv[0]) == "--help" || std::string_view(argv[0]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  CreateOptions options;
  if (absl::Status s = ParseCreate(argc, argv, options); !s.ok()) {
    std::fputs(kUsage, stderr);
    return Fail(s);
  }
  InstallInterruptHandlers();
  // Beyond a file size limit (ulimit -f) a write should fail with EFBIG and be
  // reported, naming the file, rather than kill the process mid-shard.
  signal(SIGXFSZ, SIG_IGN);
  absl::StatusOr<Input> input = OpenInput(options.format, options.inputs);
  if (!input.ok()) return ExitStatus("create: " + std::string(input.status().message()));
  if (options.shuffle) {
    if (absl::Status s = Shuffle(*input, options.seed); !s.ok()) {
      return ExitStatus("create: " + std::string(s.message()));
    }
  }
  if (!IsRemoteUrl(options.pattern)) {
    if (absl::Status s = CreateOutputDirectory(options.pattern); !s.ok()) return Fail(s);
    RemoveStaleTemporaries(options.pattern);
  }
  Progress progress(input->samples->total());
  Creator creator(options, progress);
  absl::Status status = creator.Run(*input->samples);
  return Finish(options, *input, creator, progress, status);
}

}  // namespace wds::tools
