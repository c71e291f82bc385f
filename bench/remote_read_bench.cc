// remote_read_bench: one reading thread over the same shards from several
// sources, measured side by side in one run (bench/remote_bench.sh starts the
// servers and passes the URLs).
//
//   remote_read_bench --rounds 3 file=/data/s-{0..7}.tar http=http://127.0.0.1:8080/s-{0..7}.tar
//       [tcp=127.0.0.1:8080/s-{0..7}.tar] [bytes=/data/s-{0..7}.tar] [cache=http://...]
//
// Modes, each NAME=PATTERN:
//   file, http, https, s3, gs   samples through WebDataset(PATTERN).Open() (tar reading and
//                               grouping, no decoding), remote ones through MakeOpener
//   cache                       the same with a fresh cache directory: round 1 is the cold
//                               download (written while read), later rounds are warm hits
//   bytes                       read(2) of the files alone, no tar: the raw file ceiling
//   tcp                         HOST:PORT/PATH over a plain socket (GET, body read and dropped):
//                               the loopback + server ceiling with no HTTP client library
// Rounds interleave the modes (file, http, ..., file, http, ...) so that machine noise
// falls on all of them alike. Prints one JSON line per mode and round, then the medians.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "wds/io/remote.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/shards/shard_list.h"

namespace {

struct Result {
  double seconds = 0;
  int64_t bytes = 0;
  int64_t samples = 0;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ReadSamples(const std::string& pattern, wds::Opener opener, Result& r) {
  absl::StatusOr<wds::Pipeline> p = wds::WebDataset(pattern, {.opener = std::move(opener)});
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
    return false;
  }
  std::unique_ptr<wds::SampleStream> stream = p->Open({});
  const double start = Now();
  while (true) {
    wds::SampleResult s = stream->Next();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
      return false;
    }
    if (!s->has_value()) break;
    for (const auto& [name, value] : **s) {
      if (const wds::Buffer* b = std::get_if<wds::Buffer>(&value)) r.bytes += b->size();
    }
    ++r.samples;
  }
  r.seconds = Now() - start;
  return true;
}

bool ReadBytes(const std::vector<std::string>& paths, Result& r) {
  std::vector<char> buffer(1 << 20);
  const double start = Now();
  for (const std::string& path : paths) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return false;
    ssize_t n;
    while ((n = read(fd, buffer.data(), buffer.size())) > 0) r.bytes += n;
    close(fd);
  }
  r.seconds = Now() - start;
  return true;
}

// ReadTcp GETs HOST:PORT/PATH over one keep-alive socket per URL and counts
// the bytes after the headers (nginx sends Content-Length; the connection is
// closed by asking for it).
bool ReadTcp(const std::vector<std::string>& urls, Result& r) {
  std::vector<char> buffer(1 << 20);
  const double start = Now();
  for (const std::string& url : urls) {
    const size_t colon = url.find(':'), slash = url.find('/');
    const std::string host = url.substr(0, colon);
    const int port = std::atoi(url.substr(colon + 1, slash - colon - 1).c_str());
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return false;
    const std::string request =
        "GET " + url.substr(slash) + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
    if (send(fd, request.data(), request.size(), 0) < 0) return false;
    bool body = false;
    ssize_t n;
    while ((n = read(fd, buffer.data(), buffer.size())) > 0) {
      if (!body) {
        const char* end = static_cast<const char*>(memmem(buffer.data(), n, "\r\n\r\n", 4));
        if (end == nullptr) continue;
        body = true;
        r.bytes += n - (end + 4 - buffer.data());
      } else {
        r.bytes += n;
      }
    }
    close(fd);
  }
  r.seconds = Now() - start;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::vector<std::pair<std::string, std::string>> modes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg.find('=') != std::string::npos) {
      modes.emplace_back(arg.substr(0, arg.find('=')), arg.substr(arg.find('=') + 1));
    } else {
      std::fprintf(stderr, "usage: remote_read_bench [--rounds N] NAME=PATTERN...\n");
      return 2;
    }
  }
  const std::string cache_dir =
      (std::filesystem::temp_directory_path() / ("remote_read_bench-" + std::to_string(getpid())))
          .string();
  std::map<std::string, std::vector<double>> rates;
  std::map<std::string, wds::Opener> openers;
  for (const auto& [name, pattern] : modes) {
    wds::RemoteOptions options = wds::RemoteOptions::FromEnvironment();
    if (name == "cache") options.cache_dir = cache_dir;
    openers[name] = wds::MakeOpener(options);
  }
  bool ok = true;
  for (int round = 1; round <= rounds && ok; ++round) {
    for (const auto& [name, pattern] : modes) {
      Result r;
      absl::StatusOr<std::vector<std::string>> urls = wds::ExpandUrls(pattern);
      if (!urls.ok()) return 2;
      if (name == "bytes") {
        ok = ReadBytes(*urls, r);
      } else if (name == "tcp") {
        ok = ReadTcp(*urls, r);
      } else {
        ok = ReadSamples(pattern, openers[name], r);
      }
      if (!ok) {
        std::fprintf(stderr, "mode %s failed\n", name.c_str());
        break;
      }
      const double mbps = r.bytes / r.seconds / 1e6;
      std::string label = name;
      if (name == "cache") label = round == 1 ? "cache-cold" : "cache-warm";
      rates[label].push_back(mbps);
      std::printf(
          "{\"round\": %d, \"mode\": \"%s\", \"seconds\": %.3f, \"MB\": %.1f, \"MB/s\": %.0f, "
          "\"samples/s\": %.0f}\n",
          round, label.c_str(), r.seconds, r.bytes / 1e6, mbps, r.samples / r.seconds);
      std::fflush(stdout);
    }
  }
  std::filesystem::remove_all(cache_dir);
  for (auto& [label, v] : rates) {
    std::sort(v.begin(), v.end());
    std::printf("median %-11s %6.0f MB/s  (%zu rounds)\n", label.c_str(), v[v.size() / 2],
                v.size());
  }
  return ok ? 0 : 1;
}
