// Servers for the remote-shard tests, all on 127.0.0.1 and stopped by their
// destructors:
// - FaultServer: an in-process HTTP/1.1 server whose answers a test plans
//   request by request (close or reset after N bytes, stall, drip, any
//   status with any headers, a changed ETag, If-Match ignored, 200 to a Range
//   request, a wrong Content-Range, no answer at all).
// - NginxServer: Debian's nginx on a temporary config, http and https (HTTP/2,
//   a self-signed certificate made by openssl), serving a directory.
// - S3Server: s3rver (npm, installed by scripts/deps.sh into tests/s3), an
//   S3-compatible server that checks SigV4 signatures, filled through AWS's
//   JavaScript client (tests/s3/s3.js).
// - Subprocess: a child process with extra environment, killed on destruction.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "wds/io/remote.h"

namespace wds::testing {

struct FaultRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lower-case names
  int index = 0;                               // 0-based, over all connections
  std::string body;                            // as framed by Content-Length
};

struct FaultPlan {
  // status != 0 answers with it, `body` and `extra_headers` (e.g.
  // "Retry-After: 1\r\n") instead of the object.
  int status = 0;
  std::string body;
  std::string extra_headers;
  // close_after >= 0 closes the connection after that many body bytes, with
  // an RST instead of a FIN when `reset`.
  int64_t close_after = -1;
  bool reset = false;
  // stall_after >= 0 stops sending for stall_ms after that many body bytes
  // (0: right after the headers; before closing, when close_after is the
  // same offset).
  int64_t stall_after = -1;
  int stall_ms = 0;
  // until, when set, ends the stall as soon as it returns true (a gate a
  // test opens, instead of a time that a loaded machine may overrun).
  std::function<bool()> until;
  // drip_after >= 0 sends the body from that many bytes on one byte per
  // drip_ms (a server too slow to be of use, yet never silent for long).
  int64_t drip_after = -1;
  int drip_ms = 0;
  // chunk_delay_ms sleeps between 16 KiB chunks (a slow server).
  int chunk_delay_ms = 0;
  bool ignore_range = false;       // 200 and the whole object to a Range request
  int64_t content_range_skew = 0;  // Content-Range claims start + skew
  bool no_response = false;        // read the request, close without answering
  bool no_validators = false;      // send neither ETag nor Last-Modified
  bool no_etag = false;            // send Last-Modified only
  bool ignore_if_match = false;  // the current object whatever If-Match or If-Unmodified-Since say
};

class FaultServer {
 public:
  using Planner = std::function<FaultPlan(const FaultRequest&)>;

  FaultServer();
  ~FaultServer();
  FaultServer(const FaultServer&) = delete;
  FaultServer& operator=(const FaultServer&) = delete;

  // Put serves `body` at `path` ("/a.tar") with `etag` and `last_modified`.
  // A request whose If-Match or If-Unmodified-Since differs from them (an
  // exact comparison) is answered 412.
  void Put(const std::string& path, std::string body, std::string etag = "\"v1\"",
           std::string last_modified = "Tue, 15 Nov 1994 12:45:26 GMT");
  // SetPlanner decides each request's answer (default: answer normally).
  void SetPlanner(Planner planner);
  std::string Url(const std::string& path) const;
  int port() const { return port_; }
  int requests() const { return requests_; }
  // body_bytes is how many body bytes the server has handed to the kernel,
  // each chunk counted as its send begins (a chunk whose send fails is not).
  int64_t body_bytes() const { return body_bytes_; }
  int connections() const { return connections_; }
  std::vector<FaultRequest> log() const;

 private:
  struct Object {
    std::shared_ptr<const std::string> body;
    std::string etag;
    std::string last_modified;
  };
  void AcceptLoop();
  void Serve(int fd);
  bool Respond(int fd, const FaultRequest& request, const FaultPlan& plan);
  void CloseConnection(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::atomic<int64_t> body_bytes_{0};
  std::atomic<int> connections_{0};
  mutable std::mutex mu_;
  std::map<std::string, Object> objects_;
  Planner planner_;
  std::vector<FaultRequest> log_;
  std::vector<int> open_fds_;
  std::vector<std::thread> threads_;
  std::thread accept_thread_;
};

// Subprocess runs `argv` with `env` added to this process's environment,
// standard output and error to the given files ("" for /dev/null).
class Subprocess {
 public:
  Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             const std::string& out_path = "", const std::string& err_path = "");
  // Kills (SIGKILL) and reaps a child still running.
  ~Subprocess();
  pid_t pid() const { return pid_; }
  bool running();
  // Wait reaps the child and returns its wait status.
  int Wait();
  void Kill(int signal_number);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// FindProgram returns the path of `name` in PATH (or /usr/sbin, /sbin), or "".
std::string FindProgram(const std::string& name);

class NginxServer {
 public:
  // Start serves `docroot` on http://127.0.0.1:http_port() and
  // https://127.0.0.1:https_port() (HTTP/2 and 1.1, certificate cert_path()).
  static absl::StatusOr<std::unique_ptr<NginxServer>> Start(const std::string& docroot);
  ~NginxServer();
  int http_port() const { return http_port_; }
  int https_port() const { return https_port_; }
  const std::string& cert_path() const { return cert_; }
  std::string HttpUrl(const std::string& path) const;
  std::string HttpsUrl(const std::string& path) const;
  // access_log has one line per request: "<protocol> <status>" ("HTTP/2.0 200").
  std::string access_log() const;

 private:
  NginxServer() = default;
  std::string dir_;
  std::string cert_;
  int http_port_ = 0;
  int https_port_ = 0;
  std::unique_ptr<Subprocess> process_;
};

class S3Server {
 public:
  struct Key {
    std::string id;
    std::string secret;
  };
  // Start serves the buckets under `root` (sub-directories; objects are the
  // files below them) at endpoint(), accepting requests signed with any of
  // `keys` (and anonymous ones); the objects are uploaded with the first.
  static absl::StatusOr<std::unique_ptr<S3Server>> Start(const std::string& root,
                                                         std::vector<Key> keys);
  // Available is "" when node and tests/s3's packages are installed, else
  // why not.
  static std::string Available();
  ~S3Server();
  std::string endpoint() const;
  // Put uploads `data` as bucket/key with AWS's client (replacing it).
  absl::Status Put(const std::string& bucket, const std::string& key, const std::string& data);
  // Get downloads bucket/key with AWS's client.
  absl::StatusOr<std::string> Get(const std::string& bucket, const std::string& key);

 private:
  S3Server() = default;
  std::string dir_;
  int port_ = 0;
  std::vector<Key> keys_;
  std::unique_ptr<Subprocess> process_;
};

// FastRemoteOptions are limits under which a fault costs little time: backoff
// 1-10 ms, a 2 s stall timeout (the defaults': 30 s), 2 s to connect, 6
// attempts, and no credentials file.
RemoteOptions FastRemoteOptions();

// FreePort returns a port that was free on 127.0.0.1 a moment ago.
int FreePort();
// WaitForPort waits up to `timeout_ms` until 127.0.0.1:port accepts.
bool WaitForPort(int port, int timeout_ms);
// Sha256 is the hex SHA-256 of `data`.
std::string Sha256(const std::string& data);

}  // namespace wds::testing
