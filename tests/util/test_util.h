// Shared helpers for the test suite: tars generated in memory with libarchive's
// writer, temporary directories, and draining streams.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/base/stage.h"
#include "wds/io/byte_stream.h"

namespace wds::testing {

struct TarEntry {
  std::string name;
  std::string data;
  // type: 'f' regular file, 'd' directory, 'l' symlink (data is the target).
  char type = 'f';
};

enum class TarFormat { kUstar, kPax, kGnu };
enum class Compression { kNone, kGzip, kBzip2, kXz, kZstd };

// MakeTar returns the bytes of a tar holding `entries` in order.
std::string MakeTar(const std::vector<TarEntry>& entries, TarFormat format = TarFormat::kPax,
                    Compression compression = Compression::kNone);

// Compress compresses `data` alone (libarchive's raw format: no tar around it).
std::string Compress(const std::string& data, Compression compression);

// TempDir is a fresh directory removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Write creates `name` (relative) with `data` and returns its full path.
  std::string Write(std::string_view name, std::string_view data) const;

 private:
  std::string path_;
};

// Drain reads `stream` to its end; the first error is returned instead.
absl::StatusOr<std::vector<Sample>> Drain(SampleStream& stream);
// Keys lists each sample's __key__.
std::vector<std::string> Keys(const std::vector<Sample>& samples);
// FieldText returns a bytes or string field as text ("" if absent).
std::string FieldText(const Sample& sample, std::string_view field);
// ReadFile returns the whole content of `path` ("" if it cannot be read).
std::string ReadFile(const std::string& path);
// ToolRun is what a command run by RunCaptured did.
struct ToolRun {
  int status;
  std::string out;
  std::string err;
};
// RunCaptured runs `command` with /bin/sh in directory `dir`, capturing its
// standard output and error (through files in `dir`).
ToolRun RunCaptured(const std::string& dir, const std::string& command);
// ToolPath is the path of a tool built with the tests ("wds-shard").
std::string ToolPath(std::string_view tool);
// RunWdsShard runs `wds-shard ARGS` in `dir` with RunCaptured.
ToolRun RunWdsShard(const TempDir& dir, const std::string& args);
// MakeSample builds a tar-like sample: __key__, __url__ (`url`), then bytes
// fields in order.
Sample MakeSample(const std::string& key,
                  const std::vector<std::pair<std::string, std::string>>& fields = {},
                  const std::string& url = "mem/shard-000.tar");
// RunShell runs `command` with /bin/sh and returns its exit status.
int RunShell(const std::string& command);
// VectorSource is a pipeline source whose every stream yields copies of
// `samples`, in order, whatever the context.
StreamFactory VectorSource(std::vector<Sample> samples);
// WriteUnevenShards writes "shard-<i>.tar" in `dir` for each sizes[i]:
// samples "s<i>_<j>" with a .cls (j % 7) and a .txt (the key), and each
// shard's .idx sidecar; returns the paths.
std::vector<std::string> WriteUnevenShards(const TempDir& dir, const std::vector<int>& sizes);
// UnevenShardKeys lists the keys WriteUnevenShards writes, in order.
std::vector<std::string> UnevenShardKeys(const std::vector<int>& sizes);

// ScopedEnv sets (or, given nullptr, unsets) an environment variable for one
// test and restores its previous state when it ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// CountingStream counts what its reader reads and skips.
class CountingStream : public ByteStream {
 public:
  CountingStream(std::unique_ptr<ByteStream> inner, int64_t* read, int64_t* skipped)
      : inner_(std::move(inner)), read_(read), skipped_(skipped) {}
  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    absl::StatusOr<size_t> n = inner_->Read(buffer, size);
    if (n.ok()) *read_ += static_cast<int64_t>(*n);
    return n;
  }
  absl::StatusOr<int64_t> Skip(int64_t size) override {
    absl::StatusOr<int64_t> n = inner_->Skip(size);
    if (n.ok()) *skipped_ += *n;
    return n;
  }
  absl::Status Finish() override { return inner_->Finish(); }
  const std::string& url() const override { return inner_->url(); }

 private:
  std::unique_ptr<ByteStream> inner_;
  int64_t* read_;
  int64_t* skipped_;
};

}  // namespace wds::testing
