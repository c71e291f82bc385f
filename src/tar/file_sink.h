// FileSink: where TarWriter writes a compressed shard (ZstdFileSink,
// GzipFileSink), and FileOutput, the file such a sink writes to.
//
// Errors are reported as libarchive reports its own (an errno, or 0, and a
// short text: "Write error", "Close error", the compressor's reason), so that
// TarWriter reports them alike; a failure is final.
// Thread safety: one thread at a time.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/tar/tar_writer.h"

namespace wds {

// CheckCompressionThreads is InvalidArgument naming `path` unless `threads`
// is from 1 to kMaxCompressionThreads.
[[nodiscard]] absl::Status CheckCompressionThreads(const std::string& path, int threads);

class FileSink {
 public:
  virtual ~FileSink() = default;
  // Write compresses `data` and writes out what is ready. False on failure.
  [[nodiscard]] virtual bool Write(std::string_view data) = 0;
  // Finish writes out the rest and the end, then closes the file. False on
  // failure. A sink destroyed without it leaves an unfinished file.
  [[nodiscard]] virtual bool Finish() = 0;
  // error_number is the errno of the failed system call, or 0 when the
  // compressor itself failed; error_message says what failed.
  virtual int error_number() const = 0;
  virtual const std::string& error_message() const = 0;
};

// FileOutput is a file opened for writing, its first failure kept.
class FileOutput {
 public:
  // Open truncates or creates `path` ("-": standard output, which is never
  // closed). Errors: the system's (NotFound, PermissionDenied, ...) naming
  // `path`.
  [[nodiscard]] static absl::StatusOr<FileOutput> Open(const std::string& path);
  FileOutput(FileOutput&& other) noexcept;
  FileOutput& operator=(FileOutput&&) = delete;
  FileOutput(const FileOutput&) = delete;
  ~FileOutput();

  // Write writes all of `data`; false on failure ("Write error").
  [[nodiscard]] bool Write(std::string_view data);
  // Close closes the file (a file system may report a failed write-back
  // only then: NFS); false on failure ("Close error").
  [[nodiscard]] bool Close();
  // Fail records a failure (the first one is kept) and returns false.
  bool Fail(int error_number, std::string message);

  bool failed() const { return failed_; }
  int error_number() const { return error_number_; }
  const std::string& error_message() const { return error_message_; }

 private:
  FileOutput(int fd, bool owns_fd) : fd_(fd), owns_fd_(owns_fd) {}

  int fd_;
  bool owns_fd_;
  bool failed_ = false;
  int error_number_ = 0;
  std::string error_message_;
};

}  // namespace wds
