// Tests for the io layer: OpenUrl on files, standard input and pipe: commands,
// and MemoryStream.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/local_url.h"
#include "util/test_util.h"
#include "wds/base/error_kind.h"
#include "wds/internal/base/strings.h"
#include "wds/io/byte_stream.h"

namespace wds {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::wds::testing::TempDir;

// ReadAll reads `stream` to its end, cycling through `chunk_sizes`.
absl::StatusOr<std::string> ReadAll(ByteStream& stream, std::vector<size_t> chunk_sizes = {65536}) {
  std::string out;
  std::vector<char> buffer(*std::max_element(chunk_sizes.begin(), chunk_sizes.end()));
  for (size_t i = 0;; ++i) {
    size_t want = chunk_sizes[i % chunk_sizes.size()];
    absl::StatusOr<size_t> n = stream.Read(buffer.data(), want);
    if (!n.ok()) return n.status();
    EXPECT_LE(*n, want);
    if (*n == 0) return out;
    out.append(buffer.data(), *n);
  }
}

// ReadLine reads up to and excluding the next newline.
std::string ReadLine(ByteStream& stream) {
  std::string line;
  char c;
  while (true) {
    absl::StatusOr<size_t> n = stream.Read(&c, 1);
    if (!n.ok() || *n == 0 || c == '\n') return line;
    line.push_back(c);
  }
}

std::unique_ptr<ByteStream> Open(std::string_view url) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(url);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? std::move(*stream) : nullptr;
}

std::string Message(const absl::Status& status) { return std::string(ToStd(status.message())); }

// NoChildProcesses is true when this process has no children, running or
// zombie.
bool NoChildProcesses() { return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD; }

// kPromptly bounds, in seconds, how long stopping a command may take: at
// most the 500 ms grace after SIGTERM unloaded, with room for a loaded
// machine, and far below the 100 s the commands would otherwise run.
constexpr double kPromptly = 10.0;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string RandomBytes(size_t size) {
  std::mt19937 rng(42);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// ProcessIsGone is true when `pid` has exited (absent, or a zombie waiting
// for a parent that is not us).
bool ProcessIsGone(pid_t pid) {
  std::ifstream stat(Cat("/proc/", pid, "/stat"));
  if (!stat) return true;
  std::string contents((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = contents.rfind(')');
  return paren != std::string::npos && contents.substr(paren + 2, 1) == "Z";
}

// ---------------------------------------------------------------- files

TEST(FileStreamTest, ReadsWholeFileExactly) {
  TempDir dir;
  std::string data("hello\0world\xff", 12);
  std::string path = dir.Write("a.tar", data);
  auto stream = Open(path);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->url(), path);
  EXPECT_EQ(*ReadAll(*stream), data);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(FileStreamTest, SkipSeeksAndStopsAtTheEnd) {
  TempDir dir;
  std::string path = dir.Write("a.tar", "0123456789");
  auto stream = Open(path);
  ASSERT_NE(stream, nullptr);
  char c[4];
  ASSERT_EQ(*stream->Read(c, 2), 2u);
  EXPECT_EQ(*stream->Skip(3), 3);
  ASSERT_EQ(*stream->Read(c, 1), 1u);
  EXPECT_EQ(c[0], '5');
  EXPECT_EQ(*stream->Skip(100), 4);  // only what is left
  EXPECT_EQ(*stream->Skip(1), 0);
  EXPECT_EQ(*stream->Read(c, 1), 0u);
}

TEST(PipeStreamTest, CannotSkip) {
  auto stream = Open("pipe:printf abc");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*stream->Skip(2), 0);
  EXPECT_EQ(*ReadAll(*stream), "abc");
}

TEST(FileStreamTest, ReadsLargeFileInOddSizedChunks) {
  TempDir dir;
  std::string data = RandomBytes(5 * 1000 * 1000 + 3);
  auto stream = Open(dir.Write("big.tar", data));
  ASSERT_NE(stream, nullptr);
  absl::StatusOr<std::string> read = ReadAll(*stream, {1, 7, 4093, 65537, 1000003});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == data) << "read " << read->size() << " bytes of " << data.size();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(FileStreamTest, EmptyFileIsAtEndAtOnce) {
  TempDir dir;
  auto stream = Open(dir.Write("empty.tar", ""));
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "");
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(FileStreamTest, ReadAfterEndReturnsZeroAgain) {
  TempDir dir;
  auto stream = Open(dir.Write("a.tar", "abc"));
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "abc");
  char c;
  EXPECT_EQ(*stream->Read(&c, 1), 0u);
  EXPECT_EQ(*stream->Read(&c, 1), 0u);
}

TEST(FileStreamTest, FilePrefixIsStripped) {
  TempDir dir;
  std::string path = dir.Write("a.tar", "payload");
  std::string url = "file:" + path;
  auto stream = Open(url);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->url(), url);
  EXPECT_EQ(*ReadAll(*stream), "payload");
}

TEST(FileStreamTest, FileSlashSlashPrefixIsStripped) {
  TempDir dir;
  std::string path = dir.Write("a.tar", "payload");
  ASSERT_EQ(path[0], '/');
  std::string url = "file://" + path;
  auto stream = Open(url);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->url(), url);
  EXPECT_EQ(*ReadAll(*stream), "payload");
}

TEST(FileStreamTest, MissingFileIsNotFoundNamingPath) {
  TempDir dir;
  std::string path = dir.path() + "/missing-000123.tar";
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(path);
  ASSERT_EQ(stream.status().code(), absl::StatusCode::kNotFound) << stream.status();
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
}

TEST(FileStreamTest, MissingFileWithFilePrefixIsNotFoundNamingPath) {
  TempDir dir;
  std::string path = dir.path() + "/missing.tar";
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl("file:" + path);
  ASSERT_EQ(stream.status().code(), absl::StatusCode::kNotFound) << stream.status();
  EXPECT_THAT(Message(stream.status()), HasSubstr(path));
}

TEST(FileStreamTest, DirectoryIsInvalidArgument) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(dir.path());
  ASSERT_EQ(stream.status().code(), absl::StatusCode::kInvalidArgument) << stream.status();
  EXPECT_THAT(Message(stream.status()), HasSubstr(dir.path()));
  EXPECT_THAT(Message(stream.status()), HasSubstr("is a directory"));
}

TEST(FileStreamTest, EmptyUrlIsInvalidArgument) {
  EXPECT_EQ(OpenUrl("").status().code(), absl::StatusCode::kInvalidArgument);
}

// Root reads any file regardless of its mode, so as root the open is done in
// a child process that has become the unprivileged user "nobody" (65534).
TEST(FileStreamTest, UnreadableFileIsPermissionDeniedNamingPath) {
  TempDir dir;
  std::string path = dir.Write("secret.tar", "x");
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(2);
    absl::Status status = OpenUrl(path).status();
    std::string line = Cat(static_cast<int>(status.code()), " ", ToStd(status.message()));
    ssize_t written = write(report[1], line.data(), line.size());
    _exit(written == static_cast<ssize_t>(line.size()) ? 0 : 3);
  }
  close(report[1]);
  std::string line;
  char buffer[512];
  for (ssize_t n; (n = read(report[0], buffer, sizeof(buffer))) > 0;) line.append(buffer, n);
  close(report[0]);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(line.substr(0, line.find(' ')),
            std::to_string(static_cast<int>(absl::StatusCode::kPermissionDenied)))
      << line;
  EXPECT_THAT(line, HasSubstr(path));
}

// ---------------------------------------------------------------- stdin

// StdinFromPipe replaces fd 0 with a pipe holding `data` for its lifetime.
class StdinFromPipe {
 public:
  explicit StdinFromPipe(const std::string& data) {
    saved_ = dup(STDIN_FILENO);
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    EXPECT_EQ(write(fds[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(fds[1]);
    dup2(fds[0], STDIN_FILENO);
    close(fds[0]);
  }
  ~StdinFromPipe() {
    dup2(saved_, STDIN_FILENO);
    close(saved_);
  }

 private:
  int saved_;
};

TEST(StdinStreamTest, DashReadsStandardInputAndLeavesItOpen) {
  StdinFromPipe stdin_pipe("from stdin");
  {
    auto stream = Open("-");
    ASSERT_NE(stream, nullptr);
    EXPECT_EQ(stream->url(), "-");
    EXPECT_EQ(*ReadAll(*stream, {3}), "from stdin");
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_NE(fcntl(STDIN_FILENO, F_GETFD), -1) << "fd 0 was closed";
}

// ---------------------------------------------------------------- pipe:

TEST(PipeStreamTest, SuccessfulCommandReadsOutputAndFinishesOk) {
  auto stream = Open("pipe:printf 'a b c'");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(stream->url(), "pipe:printf 'a b c'");
  EXPECT_EQ(*ReadAll(*stream), "a b c");
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, ReadsLargeOutputExactly) {
  TempDir dir;
  std::string data = RandomBytes(3 * 1000 * 1000);
  std::string path = dir.Write("big.tar", data);
  auto stream = Open("pipe:cat " + path);
  ASSERT_NE(stream, nullptr);
  absl::StatusOr<std::string> read = ReadAll(*stream, {4093, 100000, 1});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == data) << "read " << read->size() << " bytes of " << data.size();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(PipeStreamTest, ReadAfterEndReturnsZeroAgain) {
  auto stream = Open("pipe:printf x");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "x");
  char c;
  EXPECT_EQ(*stream->Read(&c, 1), 0u);
  EXPECT_EQ(*stream->Read(&c, 1), 0u);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(PipeStreamTest, NonZeroExitAfterCompleteOutputIsDataLoss) {
  const std::string command = "printf data; exit 3";
  auto stream = Open("pipe:" + command);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "data");
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr("pipe:" + command));
  EXPECT_THAT(Message(status), HasSubstr("exit status 3"));
  EXPECT_EQ(ErrorKindOf(status), ErrorKind::kCommandFailed);
  EXPECT_EQ(ShardUrlOf(status), "pipe:" + command);
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, FailureAfterCatOfWholeShardIsDataLoss) {
  TempDir dir;
  std::string path = dir.Write("shard.tar", "complete shard bytes");
  const std::string url = "pipe:cat " + path + "; exit 1";
  auto stream = Open(url);
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "complete shard bytes");
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr(url));
  EXPECT_THAT(Message(status), HasSubstr("exit status 1"));
}

TEST(PipeStreamTest, StderrTailIsInFailureMessage) {
  auto stream = Open("pipe:echo oops >&2; exit 1");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "");
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr("exit status 1"));
  EXPECT_THAT(Message(status), HasSubstr("oops"));
}

TEST(PipeStreamTest, CommandKilledBySignalIsDataLoss) {
  auto stream = Open("pipe:printf partial; kill -9 $$");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "partial");
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(Message(status), HasSubstr("killed by signal 9"));
  EXPECT_EQ(ErrorKindOf(status), ErrorKind::kCommandFailed);
  EXPECT_THAT(Message(status), HasSubstr("pipe:printf partial; kill -9 $$"));
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, StderrOutputAloneIsNoError) {
  auto stream = Open("pipe:echo progress >&2; printf ok");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "ok");
  EXPECT_TRUE(stream->Finish().ok());
}

// The command fills the stderr pipe before writing stdout: reading stdout
// alone would wait forever.
TEST(PipeStreamTest, MegabyteOnStderrAndStdoutDoesNotDeadlockAndKeepsBoundedTail) {
  auto stream = Open(
      "pipe:head -c 1048576 /dev/zero | tr '\\0' e >&2; "
      "head -c 1048576 /dev/zero | tr '\\0' o; printf LAST-STDERR-BYTES >&2; exit 5");
  ASSERT_NE(stream, nullptr);
  absl::StatusOr<std::string> read = ReadAll(*stream, {8191});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 1048576u);
  EXPECT_EQ(read->find_first_not_of('o'), std::string::npos);
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status.code();
  std::string message = Message(status);
  EXPECT_THAT(message, HasSubstr("exit status 5"));
  EXPECT_THAT(message, EndsWith("LAST-STDERR-BYTES"));
  size_t tail_start = message.find("stderr: ");
  ASSERT_NE(tail_start, std::string::npos);
  std::string tail = message.substr(tail_start + 8);
  EXPECT_EQ(tail.size(), 4096u);
  EXPECT_EQ(tail, std::string(4096 - 17, 'e') + "LAST-STDERR-BYTES");
}

// A tar reader stops at the end-of-archive blocks and may leave padding
// unread; Finish must still report the command's own exit status, not a
// SIGPIPE it caused.
TEST(PipeStreamTest, FinishAfterPartialReadReportsCommandStatus) {
  auto ok = Open("pipe:head -c 1000000 /dev/zero");
  ASSERT_NE(ok, nullptr);
  char buffer[10];
  EXPECT_EQ(*ok->Read(buffer, sizeof(buffer)), sizeof(buffer));
  EXPECT_TRUE(ok->Finish().ok());

  auto failing = Open("pipe:head -c 1000000 /dev/zero; exit 4");
  ASSERT_NE(failing, nullptr);
  EXPECT_EQ(*failing->Read(buffer, sizeof(buffer)), sizeof(buffer));
  absl::Status status = failing->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("exit status 4"));
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, CommandStdinIsDevNull) {
  auto stream = Open("pipe:cat; echo done");
  ASSERT_NE(stream, nullptr);
  EXPECT_EQ(*ReadAll(*stream), "done\n");
  EXPECT_TRUE(stream->Finish().ok());
}

// Loaders start many commands from several threads: a child must not inherit
// another stream's pipes, or that stream would never see end of data.
TEST(PipeStreamTest, CommandInheritsOnlyStandardStreams) {
  TempDir dir;
  auto file = Open(dir.Write("a.tar", "x"));
  auto sleeper = Open("pipe:sleep 100");
  ASSERT_NE(file, nullptr);
  ASSERT_NE(sleeper, nullptr);
  auto stream = Open("pipe:for f in /proc/$$/fd/*; do if [ -e $f ]; then echo ${f##*/}; fi; done");
  ASSERT_NE(stream, nullptr);
  // The glob's own directory descriptor is listed too but closed by the test.
  EXPECT_EQ(*ReadAll(*stream), "0\n1\n2\n");
  absl::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status;
}

TEST(PipeStreamTest, DestroyingEarlyStopsEndlessWriterPromptly) {
  auto start = std::chrono::steady_clock::now();
  {
    auto stream = Open("pipe:yes");
    ASSERT_NE(stream, nullptr);
    char buffer[4096];
    EXPECT_EQ(*stream->Read(buffer, 1), 1u);
    EXPECT_EQ(buffer[0], 'y');
  }
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, DestroyingEarlyStopsSleepingCommandPromptly) {
  auto start = std::chrono::steady_clock::now();
  { auto stream = Open("pipe:sleep 100"); }
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, DestroyingEarlyKillsCommandIgnoringSigpipeAndSigterm) {
  auto start = std::chrono::steady_clock::now();
  {
    auto stream = Open("pipe:trap '' PIPE TERM; printf ready; sleep 100");
    ASSERT_NE(stream, nullptr);
    char buffer[5];
    EXPECT_EQ(*stream->Read(buffer, sizeof(buffer)), sizeof(buffer));
  }
  EXPECT_LT(SecondsSince(start), kPromptly);
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, DestroyingEarlyStopsBackgroundMembersOfTheCommand) {
  pid_t background = 0;
  {
    auto stream = Open("pipe:sleep 100 & echo $!; wait");
    ASSERT_NE(stream, nullptr);
    background = std::stoi(ReadLine(*stream));
  }
  ASSERT_GT(background, 0);
  auto start = std::chrono::steady_clock::now();
  while (!ProcessIsGone(background) && SecondsSince(start) < kPromptly) {
    usleep(10000);
  }
  EXPECT_TRUE(ProcessIsGone(background)) << "pid " << background << " still runs";
  EXPECT_TRUE(NoChildProcesses());
}

TEST(PipeStreamTest, EmptyCommandIsInvalidArgument) {
  EXPECT_EQ(OpenUrl("pipe:").status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- schemes

// http(s)://, s3:// and gs:// are remote URLs (remote_test.cc); others are not
// read.
TEST(OpenUrlTest, OtherSchemesAreUnimplementedNamingUrl) {
  for (const char* url : {"ftp://host/a.tar", "hf+x.y-z://repo/a.tar", "file+x://a.tar"}) {
    absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(url);
    EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnimplemented) << url;
    EXPECT_THAT(Message(stream.status()), HasSubstr(url));
  }
}

TEST(OpenUrlTest, ColonInRelativePathIsNotAScheme) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl("no-such-dir/a:b.tar");
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kNotFound) << stream.status();
  EXPECT_THAT(Message(stream.status()), HasSubstr("no-such-dir/a:b.tar"));
}

TEST(OpenLocalUrlTest, ARemoteUrlNeedsAnOpenerWithASession) {
  // OpenUrl hands remote URLs to a RemoteOpener, which hands local ones here:
  // this end never calls back into the remote opener.
  for (const char* url : {"http://h/a.tar", "https://h/a.tar", "s3://b/a.tar", "gs://b/a.tar"}) {
    absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenLocalUrl(url);
    EXPECT_EQ(stream.status().code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_EQ(Message(stream.status()),
              Cat(url, ": a remote URL needs an opener with a remote session (MakeOpener)"));
  }
  TempDir dir;
  const std::string path = dir.Write("a.tar", "abc");
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenLocalUrl(Cat("file:", path));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(*ReadAll(**stream, {2}), "abc");
}

// ---------------------------------------------------------------- memory

TEST(MemoryStreamTest, ServesDataThenZero) {
  auto stream = MemoryStream("mem:a", "abcdefg");
  EXPECT_EQ(stream->url(), "mem:a");
  char buffer[3];
  EXPECT_EQ(*stream->Read(buffer, 3), 3u);
  EXPECT_EQ(std::string(buffer, 3), "abc");
  EXPECT_EQ(*ReadAll(*stream, {2}), "defg");
  EXPECT_EQ(*stream->Read(buffer, 3), 0u);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(MemoryStreamTest, FinishReturnsGivenStatus) {
  auto stream = MemoryStream("mem:b", "xy", absl::DataLossError("mem:b: truncated"));
  EXPECT_EQ(*ReadAll(*stream), "xy");
  absl::Status status = stream->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Message(status), "mem:b: truncated");
}

}  // namespace
}  // namespace wds
