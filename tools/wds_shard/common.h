// Helpers shared by the wds-shard subcommands: messages, option values,
// interruption, progress, and reading a shard's members grouped by key.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"
#include "wds/tar/tar_reader.h"

namespace wds::tools {

// Fail prints "wds-shard: <message>" to stderr and returns exit status 1.
int Fail(std::string_view message);
int Fail(const absl::Status& status);
// Warn prints "wds-shard: <message>" to stderr.
void Warn(std::string_view message);

// ParseSize reads a byte count: digits with an optional K, M, G or T suffix
// (powers of 1024; "512M", "3G"), optionally followed by "B" or "iB".
[[nodiscard]] absl::StatusOr<int64_t> ParseSize(std::string_view text);
// ParseCount reads a decimal integer of at least `min`.
[[nodiscard]] absl::StatusOr<int64_t> ParseCount(std::string_view text, std::string_view option,
                                                 int64_t min = 1);
// HumanBytes renders a byte count for people ("1.5 MB", decimal units).
std::string HumanBytes(double bytes);

// DefaultJobs is 16 when a shard is remote (each read waits on round trips),
// else `local`.
int DefaultJobs(const std::vector<std::string>& urls, int local);
// CpuJobs is the number of this machine's cores, at most 8: a default for
// reads that are CPU work (decompression, decoding).
int CpuJobs();

// Args walks a subcommand's arguments.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool done() const { return i_ >= argc_; }
  std::string_view Peek() const { return argv_[i_]; }
  std::string_view Take() { return argv_[i_++]; }
  // Value returns the value of the option just taken, or an error naming it.
  absl::StatusOr<std::string> Value(std::string_view option);
  // Jobs returns N of the `--jobs N` just taken (shards read N at a time):
  // an integer of at least 1, at most 256; `command` names the subcommand in
  // the error.
  absl::StatusOr<int> Jobs(std::string_view command);

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
};

// IsOption is true for "-x" and "--x" but not for "-" (standard input).
bool IsOption(std::string_view arg);

// InstallInterruptHandlers makes SIGINT, SIGTERM and SIGHUP set a flag
// (Interrupted()) instead of killing the process, so that partial output can
// be removed between samples.
void InstallInterruptHandlers();
// Interrupted returns the number of the signal received, or 0.
int Interrupted();

// Progress prints a one-line progress report to a terminal (standard error
// only, and only when it is a terminal), at most a few times a second.
// Thread-safe.
class Progress {
 public:
  // total_samples: the number expected, or -1 when unknown (no ETA).
  explicit Progress(int64_t total_samples);
  void Add(int64_t samples, int64_t bytes);
  // Finish clears the progress line.
  void Finish();
  double seconds() const;

 private:
  void Print();

  std::mutex mu_;
  const bool enabled_;
  const int64_t total_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  int64_t samples_ = 0;
  int64_t bytes_ = 0;
  bool printed_ = false;
};

// ShardMember is a member of a grouped sample, as read from the tar.
struct ShardMember {
  std::string name;
  // field is lower-cased, as a pipeline names it.
  std::string field;
  int64_t offset = 0;
  Buffer data;
};

// RawSample is one group of consecutive members with one key.
struct RawSample {
  std::string key;
  std::vector<ShardMember> members;
  int64_t offset() const { return members.empty() ? 0 : members.front().offset; }
};

// SampleVisitor sees each member that a reader skips (metadata or a name
// without a field) and each grouped sample; returning false stops the walk.
struct ShardVisitor {
  std::function<bool(const TarMember& member)> on_skipped;
  std::function<bool(RawSample& sample)> on_sample;
};

// OpenShard opens a shard URL (a path, "-", "pipe:", or a remote URL read with
// wds/io/remote.h's options from the environment). Remote shards share one
// connection pool for the whole run.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> OpenShard(const std::string& url);

// WalkShard reads the shard at `url` grouped by ShardSampleReader
// (wds/internal/tar/tar_grouping.h), without merging repeated fields. The error of
// a broken shard is returned after the samples completed before it.
[[nodiscard]] absl::Status WalkShard(const std::string& url, const ShardVisitor& visitor);

}  // namespace wds::tools
