// OpenUrl: local files, standard input and pipe: commands as ByteStreams.
//
// Every descriptor is opened close-on-exec, because loaders start pipe:
// commands from several threads at once: a child that inherited another
// stream's pipe would keep that stream from ever seeing end of data.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>

#include "io/file_stream.h"
#include "io/local_url.h"
#include "wds/base/error_kind.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"

extern char** environ;

namespace wds {
namespace {

// A command's stderr is kept only as a tail, so a chatty command cannot use
// unbounded memory; the end is what explains a failure.
constexpr size_t kStderrTailBytes = 4096;
// How long an abandoned command gets to exit after SIGTERM before SIGKILL.
constexpr std::chrono::milliseconds kTerminateGrace(500);

absl::Status ErrnoError(int error_number, const std::string& what) {
  return absl::ErrnoToStatus(error_number, what);
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenFile(std::string url, const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, Cat("cannot open ", path));
  UniqueFd file(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError(errno, Cat("cannot stat ", path));
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(Cat(path, " is a directory"));
  // Only a hint: it fails harmlessly on FIFOs.
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const int64_t size = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  return MakeFileStream(std::move(url), std::move(file), size);
}

// StdinStream reads standard input, which belongs to the process: it is
// never closed here.
class StdinStream : public ByteStream {
 public:
  explicit StdinStream(std::string url) : url_(std::move(url)) {}

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    return ReadFd(STDIN_FILENO, buffer, size, url_, "", /*may_block=*/true);
  }
  absl::Status Finish() override { return absl::OkStatus(); }
  const std::string& url() const override { return url_; }

 private:
  std::string url_;
};

// Pipe is a pipe(2) pair, both ends close-on-exec.
struct Pipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// AboveStdio moves `fd` to a number above 2 so that the child's dup2 onto 0, 1
// and 2 cannot overwrite it (possible when the process runs with one closed).
absl::StatusOr<UniqueFd> AboveStdio(UniqueFd fd) {
  if (fd.get() > STDERR_FILENO) return fd;
  int moved = fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return ErrnoError(errno, "fcntl(F_DUPFD_CLOEXEC)");
  return UniqueFd(moved);
}

// MakePipe returns a pipe whose read end, ours, is non-blocking: a read on
// stdout must never block while the command waits for us to drain stderr.
absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe2");
  Pipe p;
  WDS_ASSIGN_OR_RETURN(p.read_end, AboveStdio(UniqueFd(fds[0])));
  WDS_ASSIGN_OR_RETURN(p.write_end, AboveStdio(UniqueFd(fds[1])));
  if (fcntl(p.read_end.get(), F_SETFL, O_NONBLOCK) != 0) return ErrnoError(errno, "fcntl");
  return p;
}

// SpawnShell runs `/bin/sh -c command` in a new process group, with stdin from
// /dev/null and stdout/stderr to the given pipe ends; returns its pid.
absl::StatusOr<pid_t> SpawnShell(const std::string& command, int stdout_fd, int stderr_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors that other code opened without O_CLOEXEC stay with us too.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group lets us stop the whole pipeline the shell starts.
  // SIGPIPE is restored because embedders (Python) ignore it, and the command
  // should die when we stop reading; loader threads may block signals.
  sigset_t pipe_only, none;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigemptyset(&none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &pipe_only);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid;
  int error = posix_spawn(&pid, argv[0], &actions, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return ErrnoError(error, Cat("cannot start /bin/sh -c ", command));
  return pid;
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return Cat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return Cat("killed by signal ", WTERMSIG(status));
  return Cat("wait status ", status);
}

// PipeStream reads the stdout of a running command while draining its stderr
// into a bounded tail. The command is reaped by Finish, or terminated and
// reaped on destruction.
class PipeStream : public ByteStream {
 public:
  PipeStream(std::string url, pid_t pid, UniqueFd out, UniqueFd err)
      : url_(std::move(url)), pid_(pid), out_(std::move(out)), err_(std::move(err)) {}

  ~PipeStream() override {
    if (!reaped_) Terminate();
  }

  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    if (size == 0 || !out_.valid()) return 0;
    while (true) {
      ssize_t n = read(out_.get(), buffer, size);
      if (n > 0) return static_cast<size_t>(n);
      if (n == 0) {
        out_.Reset();
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return ErrnoError(errno, Cat(url_, ": reading the command's output"));
      }
      WDS_RETURN_IF_ERROR(AwaitOutput());
    }
  }

  absl::Status Finish() override {
    assert(!reaped_ && "Finish called twice");
    // What the consumer left unread (a tar's trailing padding) is read and
    // dropped, so that the command runs to its end and its status means
    // something instead of it dying of SIGPIPE.
    std::array<char, 65536> sink;
    while (out_.valid()) WDS_RETURN_IF_ERROR(Read(sink.data(), sink.size()).status());
    while (err_.valid()) WDS_RETURN_IF_ERROR(AwaitOutput());
    WDS_ASSIGN_OR_RETURN(int status, Reap());
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
    std::string message = Cat(url_, ": command failed with ", DescribeWaitStatus(status),
                              " (its output may be incomplete)");
    if (!stderr_tail_.empty()) message += Cat("; stderr: ", stderr_tail_);
    return WithErrorKind(absl::DataLossError(message), ErrorKind::kCommandFailed, url_);
  }

  const std::string& url() const override { return url_; }

 private:
  // AwaitOutput blocks until stdout is readable or closed, draining whatever
  // stderr the command writes meanwhile, or until the thread's interrupt
  // check says to give up (wds/base/interrupt.h).
  absl::Status AwaitOutput() {
    std::array<pollfd, 2> fds = {pollfd{out_.get(), POLLIN, 0}, pollfd{err_.get(), POLLIN, 0}};
    // poll ignores negative descriptors, so closed ones simply drop out.
    const int ready = poll(fds.data(), fds.size(), InterruptPollTimeout());
    if (ready < 0 && errno != EINTR) return ErrnoError(errno, Cat(url_, ": poll"));
    if (ready <= 0) return CheckInterrupt();
    if (fds[1].revents != 0) return DrainStderr();
    return absl::OkStatus();
  }

  // DrainStderr reads all stderr available now into the tail.
  absl::Status DrainStderr() {
    std::array<char, kStderrTailBytes> chunk;
    while (true) {
      ssize_t n = read(err_.get(), chunk.data(), chunk.size());
      if (n > 0) {
        stderr_tail_.append(chunk.data(), static_cast<size_t>(n));
        if (stderr_tail_.size() > kStderrTailBytes) {
          stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
        }
      } else if (n == 0) {
        err_.Reset();
        return absl::OkStatus();
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::OkStatus();
      } else if (errno != EINTR) {
        return ErrnoError(errno, Cat(url_, ": reading the command's stderr"));
      }
    }
  }

  // Reap waits for the shell; it fails only if something else reaped it
  // (e.g. SIGCHLD set to SIG_IGN by the embedding program).
  absl::StatusOr<int> Reap() {
    int status = 0;
    pid_t result;
    do {
      result = waitpid(pid_, &status, 0);
    } while (result < 0 && errno == EINTR);
    reaped_ = true;
    if (result < 0) return ErrnoError(errno, Cat(url_, ": cannot get the command's exit status"));
    return status;
  }

  // WaitForExit waits up to `timeout` for the shell to exit, leaving it
  // unreaped so that its process group id stays ours to signal.
  void WaitForExit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      siginfo_t info{};
      int result = waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
      if (result == 0 ? info.si_pid != 0 : errno != EINTR) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Terminate stops an abandoned command: closing our ends makes writers fail,
  // SIGTERM asks the whole group to stop, and SIGKILL then removes any member
  // that ignored it, so nothing outlives the stream.
  void Terminate() {
    out_.Reset();
    err_.Reset();
    kill(-pid_, SIGTERM);
    WaitForExit(kTerminateGrace);
    kill(-pid_, SIGKILL);
    Reap().IgnoreError();
  }

  std::string url_;
  pid_t pid_;
  UniqueFd out_;
  UniqueFd err_;
  std::string stderr_tail_;
  bool reaped_ = false;
};

absl::StatusOr<std::unique_ptr<ByteStream>> OpenPipe(std::string url, const std::string& command) {
  if (command.empty()) return absl::InvalidArgumentError(Cat(url, ": empty command"));
  WDS_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  WDS_ASSIGN_OR_RETURN(Pipe err, MakePipe());
  WDS_ASSIGN_OR_RETURN(pid_t pid, SpawnShell(command, out.write_end.get(), err.write_end.get()));
  // The write ends live on in the child only; ours must close for EOF to come.
  return std::make_unique<PipeStream>(std::move(url), pid, std::move(out.read_end),
                                      std::move(err.read_end));
}

// HasScheme reports whether `url` starts with "scheme://" (RFC 3986 scheme).
bool HasScheme(std::string_view url) {
  size_t end = url.find("://");
  if (end == std::string_view::npos || end == 0) return false;
  if (!std::isalpha(static_cast<unsigned char>(url[0]))) return false;
  for (char c : url.substr(0, end)) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteStream>> OpenLocalUrl(std::string_view url) {
  if (url.empty()) return absl::InvalidArgumentError("empty URL");
  if (url == "-") return std::make_unique<StdinStream>(std::string(url));
  if (StartsWith(url, "pipe:")) return OpenPipe(std::string(url), std::string(url.substr(5)));
  if (StartsWith(url, "file://")) return OpenFile(std::string(url), std::string(url.substr(7)));
  if (StartsWith(url, "file:")) return OpenFile(std::string(url), std::string(url.substr(5)));
  if (IsRemoteUrl(url)) {
    return absl::InvalidArgumentError(Cat(url, ": a remote URL needs an opener with a remote "
                                          "session (MakeOpener)"));
  }
  if (HasScheme(url)) return absl::UnimplementedError(Cat("unsupported URL scheme: ", url));
  return OpenFile(std::string(url), std::string(url));
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenUrl(std::string_view url) {
  // A one-off session: no connection pool to share (MakeOpener has one).
  if (IsRemoteUrl(url)) return MakeOpener()(url);
  if (StartsWith(url, "pipe:")) {
    RemoteOptions options = RemoteOptions::FromEnvironment();
    if (options.cache_pipes && !options.cache_dir.empty())
      return MakeOpener(std::move(options))(url);
  }
  return OpenLocalUrl(url);
}

}  // namespace wds
