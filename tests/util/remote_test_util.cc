// Servers for the remote-shard tests (see remote_test_util.h).
#include "util/remote_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/sigv4.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"

extern char** environ;

namespace wds::testing {
namespace {

constexpr size_t kChunk = 16 << 10;

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool SendAll(int fd, const std::string& s) { return SendAll(fd, s.data(), s.size()); }

std::string MakeTempDir(const char* prefix) {
  std::string pattern = Cat("/tmp/", prefix, "XXXXXX");
  char* dir = mkdtemp(pattern.data());
  return dir == nullptr ? "" : std::string(dir);
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

RemoteOptions FastRemoteOptions() {
  RemoteOptions o;
  o.backoff_base = std::chrono::milliseconds(1);
  o.backoff_cap = std::chrono::milliseconds(10);
  // Short enough for the stall tests, long enough that a loaded machine (two sanitized test
  // binaries on two cores) pausing the in-process server is not a stall and an extra request.
  o.stall_timeout = std::chrono::milliseconds(2000);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.max_attempts = 6;
  o.aws_credentials_file = "/nonexistent";
  return o;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool WaitForPort(int port, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (ok) return true;
    SleepMs(10);
  }
  return false;
}

std::string Sha256(const std::string& data) { return sigv4::Sha256Hex(data); }

// --- FaultServer

FaultServer::FaultServer() {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  listen(listen_fd_, 64);
  socklen_t len = sizeof(a);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

FaultServer::~FaultServer() {
  stop_ = true;
  shutdown(listen_fd_, SHUT_RDWR);
  accept_thread_.join();
  close(listen_fd_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : threads_) t.join();
}

void FaultServer::Put(const std::string& path, std::string body, std::string etag,
                      std::string last_modified) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_[path] = {std::make_shared<const std::string>(std::move(body)), std::move(etag),
                    std::move(last_modified)};
}

void FaultServer::SetPlanner(Planner planner) {
  std::lock_guard<std::mutex> lock(mu_);
  planner_ = std::move(planner);
}

std::string FaultServer::Url(const std::string& path) const {
  return Cat("http://127.0.0.1:", port_, path);
}

std::vector<FaultRequest> FaultServer::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void FaultServer::AcceptLoop() {
  while (!stop_) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stop_ || errno != EINTR) return;
      continue;
    }
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FaultServer::CloseConnection(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
  close(fd);
}

void FaultServer::Serve(int fd) {
  std::string in;
  char buffer[4096];
  while (!stop_) {
    size_t end;
    while ((end = in.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return CloseConnection(fd);
      in.append(buffer, static_cast<size_t>(n));
    }
    const std::string head = in.substr(0, end);
    in.erase(0, end + 4);
    FaultRequest request;
    std::istringstream lines(head);
    std::string line;
    std::getline(lines, line);
    std::istringstream first(line);
    first >> request.method >> request.target;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = AsciiLower(line.substr(0, colon));
      size_t v = line.find_first_not_of(' ', colon + 1);
      request.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    if (auto length = request.headers.find("content-length"); length != request.headers.end()) {
      const size_t size = std::stoull(length->second);
      while (in.size() < size) {
        const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
        if (n <= 0) return CloseConnection(fd);
        in.append(buffer, static_cast<size_t>(n));
      }
      request.body = in.substr(0, size);
      in.erase(0, size);
    }
    request.index = requests_++;
    Planner planner;
    {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(request);
      planner = planner_;
    }
    const FaultPlan plan = planner ? planner(request) : FaultPlan();
    if (plan.no_response || !Respond(fd, request, plan)) return CloseConnection(fd);
  }
  CloseConnection(fd);
}

bool FaultServer::Respond(int fd, const FaultRequest& request, const FaultPlan& plan) {
  if (plan.status != 0) {
    return SendAll(fd, Cat("HTTP/1.1 ", plan.status, " Planned\r\nContent-Length: ",
                           plan.body.size(), "\r\n", plan.extra_headers, "\r\n", plan.body));
  }
  Object object;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(request.target);
    if (it == objects_.end()) {
      const std::string body = "<html><head><title>404 Not Found</title></head></html>";
      return SendAll(
          fd, Cat("HTTP/1.1 404 Not Found\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
    }
    object = it->second;
  }
  const std::string& body = *object.body;
  const int64_t size = static_cast<int64_t>(body.size());
  auto if_match = request.headers.find("if-match");
  auto if_unmodified = request.headers.find("if-unmodified-since");
  if ((!plan.ignore_if_match && if_match != request.headers.end() &&
       if_match->second != object.etag) ||
      (!plan.ignore_if_match && if_unmodified != request.headers.end() &&
       if_unmodified->second != object.last_modified)) {
    return SendAll(fd, "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n");
  }
  int64_t start = 0, last = size - 1;
  bool partial = false;
  auto range = request.headers.find("range");
  if (range != request.headers.end() && !plan.ignore_range) {
    long long a = -1, b = -1;
    const int parsed = std::sscanf(range->second.c_str(), "bytes=%lld-%lld", &a, &b);
    if (parsed >= 1 && a >= size) {
      return SendAll(fd, Cat("HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */", size,
                             "\r\nContent-Length: 0\r\n\r\n"));
    }
    if (parsed >= 1) {
      start = a;
      if (parsed == 2 && b < last) last = b;
      partial = true;
    }
  }
  std::string out = Cat("HTTP/1.1 ", partial ? "206 Partial Content" : "200 OK",
                        "\r\nContent-Length: ", last - start + 1, "\r\nAccept-Ranges: bytes\r\n");
  if (!plan.no_validators) {
    if (!plan.no_etag) out += Cat("ETag: ", object.etag, "\r\n");
    out += Cat("Last-Modified: ", object.last_modified, "\r\n");
  }
  if (partial) {
    out += Cat("Content-Range: bytes ", start + plan.content_range_skew, "-",
               last + plan.content_range_skew, "/", size, "\r\n");
  }
  out += plan.extra_headers + "\r\n";
  if (!SendAll(fd, out)) return false;
  if (request.method == "HEAD") return true;
  const int64_t length = last - start + 1;
  // Stall stops sending for plan.stall_ms (or until plan.until); false when the server stops.
  auto stall = [&] {
    for (int t = 0; t < plan.stall_ms && !stop_ && !(plan.until && plan.until()); t += 10) {
      SleepMs(10);
    }
    return !stop_;
  };
  if (plan.stall_after == 0 && !stall()) return false;  // the headers, then nothing for a while
  int64_t sent = 0;
  while (sent < length) {
    int64_t chunk = std::min<int64_t>(kChunk, length - sent);
    if (plan.close_after >= 0) chunk = std::min(chunk, plan.close_after - sent);
    if (plan.stall_after >= 0 && sent < plan.stall_after)
      chunk = std::min(chunk, plan.stall_after - sent);
    const bool dripping = plan.drip_after >= 0 && sent >= plan.drip_after;
    if (plan.drip_after >= 0 && sent < plan.drip_after) {
      chunk = std::min(chunk, plan.drip_after - sent);
    } else if (dripping) {
      chunk = std::min<int64_t>(chunk, 1);
    }
    // Counted before the send: a client that has read the chunk must find it counted, and the
    // send may return to this thread only after the client has read it and asked.
    body_bytes_ += chunk;
    if (chunk > 0 && !SendAll(fd, body.data() + start + sent, static_cast<size_t>(chunk))) {
      body_bytes_ -= chunk;
      return false;
    }
    sent += chunk;
    if (plan.stall_after > 0 && sent == plan.stall_after && !stall()) return false;
    if (plan.close_after >= 0 && sent >= plan.close_after) {
      if (plan.reset) {
        linger l{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      }
      return false;
    }
    if (dripping) {
      for (int t = 0; t < plan.drip_ms && !stop_; t += 10) SleepMs(std::min(10, plan.drip_ms - t));
      if (stop_) return false;
    }
    if (plan.chunk_delay_ms > 0) SleepMs(plan.chunk_delay_ms);
  }
  return true;
}

// --- Subprocess

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  for (const std::string& e : env) environment.push_back(e);
  std::vector<char*> envp, args;
  for (std::string& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.empty() ? "/dev/null" : out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.empty() ? "/dev/null" : err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Wait();
  }
}

bool Subprocess::running() {
  if (pid_ <= 0 || reaped_) return false;
  const pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return r == 0;
}

int Subprocess::Wait() {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    while (waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  return status_;
}

void Subprocess::Kill(int signal_number) {
  if (pid_ > 0 && !reaped_) kill(pid_, signal_number);
}

std::string FindProgram(const std::string& name) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = Cat(dir, "/", name);
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// --- NginxServer

absl::StatusOr<std::unique_ptr<NginxServer>> NginxServer::Start(const std::string& docroot) {
  const std::string nginx = FindProgram("nginx");
  if (nginx.empty()) return absl::NotFoundError("nginx is not installed (scripts/deps.sh)");
  std::unique_ptr<NginxServer> server(new NginxServer());
  server->dir_ = MakeTempDir("wds-nginx-");
  const std::string& d = server->dir_;
  server->cert_ = Cat(d, "/cert.pem");
  if (RunShell(Cat("mkdir -p ", d, "/logs ", d, "/tmp && openssl req -x509 -newkey ec -pkeyopt ",
                   "ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost -addext ",
                   "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ", d, "/key.pem -out ",
                   server->cert_, " 2>/dev/null")) != 0) {
    return absl::InternalError("openssl could not make a certificate");
  }
  // Ports are picked free, then bound by nginx: another process may take one
  // in between, so a failed start is retried with new ports.
  for (int attempt = 0; attempt < 5; ++attempt) {
    server->http_port_ = FreePort();
    server->https_port_ = FreePort();
    std::ofstream(Cat(d, "/nginx.conf"))
        << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\n"
        << "error_log " << d << "/logs/error.log warn;\nevents { worker_connections 64; }\n"
        << "http {\n  log_format proto '$server_protocol $status';\n  access_log " << d
        << "/logs/access.log proto;\n  client_body_temp_path " << d << "/tmp/body;\n"
        << "  proxy_temp_path " << d << "/tmp/proxy;\n  fastcgi_temp_path " << d << "/tmp/fcgi;\n"
        << "  uwsgi_temp_path " << d << "/tmp/uwsgi;\n  scgi_temp_path " << d << "/tmp/scgi;\n"
        << "  default_type application/octet-stream;\n  sendfile on;\n  etag on;\n"
        << "  max_ranges 1;\n  keepalive_requests 10000;\n"
        << "  server {\n    listen 127.0.0.1:" << server->http_port_ << ";\n"
        << "    listen 127.0.0.1:" << server->https_port_ << " ssl http2;\n"
        << "    ssl_certificate " << server->cert_ << ";\n    ssl_certificate_key " << d
        << "/key.pem;\n    root " << docroot << ";\n    location / { }\n  }\n}\n";
    server->process_ = std::make_unique<Subprocess>(
        std::vector<std::string>{nginx, "-p", d, "-c", Cat(d, "/nginx.conf"), "-e",
                                 Cat(d, "/logs/error.log")},
        std::vector<std::string>{}, "", Cat(d, "/logs/stderr.log"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && server->process_->running()) {
      if (WaitForPort(server->http_port_, 50) && WaitForPort(server->https_port_, 50)) {
        return server;
      }
    }
    server->process_.reset();
  }
  return absl::InternalError(Cat("nginx did not start: ", ReadFile(Cat(d, "/logs/error.log")),
                                 ReadFile(Cat(d, "/logs/stderr.log"))));
}

NginxServer::~NginxServer() {
  if (process_ != nullptr) {
    process_->Kill(SIGTERM);
    process_->Wait();
  }
  if (!dir_.empty()) RunShell(Cat("rm -rf '", dir_, "'"));
}

std::string NginxServer::access_log() const { return ReadFile(Cat(dir_, "/logs/access.log")); }

std::string NginxServer::HttpUrl(const std::string& path) const {
  return Cat("http://127.0.0.1:", http_port_, path);
}

std::string NginxServer::HttpsUrl(const std::string& path) const {
  return Cat("https://127.0.0.1:", https_port_, path);
}

// --- S3Server

std::string S3Server::Available() {
  if (FindProgram("node").empty()) return "node is not installed (scripts/deps.sh)";
  const std::string modules = Cat(WDS_SOURCE_DIR, "/tests/s3/node_modules/@20minutes/s3rver");
  if (access(modules.c_str(), R_OK) != 0) {
    return "tests/s3's npm packages are not installed (scripts/deps.sh runs npm ci there)";
  }
  return "";
}

absl::StatusOr<std::unique_ptr<S3Server>> S3Server::Start(const std::string& root,
                                                          std::vector<Key> keys) {
  if (std::string why = Available(); !why.empty()) return absl::NotFoundError(why);
  std::unique_ptr<S3Server> server(new S3Server());
  server->keys_ = std::move(keys);
  server->dir_ = MakeTempDir("wds-s3-");
  const std::string port_file = Cat(server->dir_, "/port");
  std::vector<std::string> argv = {FindProgram("node"),
                                   "--no-warnings",
                                   Cat(WDS_SOURCE_DIR, "/tests/s3/s3.js"),
                                   "serve",
                                   "--root",
                                   root,
                                   "--port-file",
                                   port_file};
  for (const Key& key : server->keys_) {
    argv.insert(argv.end(), {"--access-key", key.id, "--secret-key", key.secret});
  }
  const std::string log = Cat(server->dir_, "/log");
  server->process_ = std::make_unique<Subprocess>(argv, std::vector<std::string>{}, log, log);
  // Starting node and uploading the objects with the SDK takes a second or two.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline && server->process_->running()) {
    const std::string port = ReadFile(port_file);
    if (!port.empty()) {
      server->port_ = std::atoi(port.c_str());
      if (WaitForPort(server->port_, 2000)) return server;
    }
    SleepMs(20);
  }
  return absl::InternalError(Cat("the S3 server did not start: ", ReadFile(log)));
}

absl::Status S3Server::Put(const std::string& bucket, const std::string& key,
                           const std::string& data) {
  const std::string file = Cat(dir_, "/put.bin");
  std::ofstream(file, std::ios::binary) << data;
  const std::string log = Cat(dir_, "/put.log");
  Subprocess put({FindProgram("node"), "--no-warnings", Cat(WDS_SOURCE_DIR, "/tests/s3/s3.js"),
                  "put", "--endpoint", endpoint(), "--access-key", keys_.at(0).id, "--secret-key",
                  keys_.at(0).secret, "--bucket", bucket, "--key", key, "--file", file},
                 {}, log, log);
  const int status = put.Wait();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(Cat("uploading ", bucket, "/", key, " failed: ", ReadFile(log)));
}

absl::StatusOr<std::string> S3Server::Get(const std::string& bucket, const std::string& key) {
  const std::string file = Cat(dir_, "/get.bin");
  const std::string log = Cat(dir_, "/get.log");
  Subprocess get({FindProgram("node"), "--no-warnings", Cat(WDS_SOURCE_DIR, "/tests/s3/s3.js"),
                  "get", "--endpoint", endpoint(), "--access-key", keys_.at(0).id, "--secret-key",
                  keys_.at(0).secret, "--bucket", bucket, "--key", key, "--file", file},
                 {}, log, log);
  const int status = get.Wait();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return ReadFile(file);
  return absl::InternalError(Cat("downloading ", bucket, "/", key, " failed: ", ReadFile(log)));
}

S3Server::~S3Server() {
  if (process_ != nullptr) {
    process_->Kill(SIGTERM);
    process_->Wait();
  }
  if (!dir_.empty()) RunShell(Cat("rm -rf '", dir_, "'"));
}

std::string S3Server::endpoint() const { return Cat("http://127.0.0.1:", port_); }

}  // namespace wds::testing
