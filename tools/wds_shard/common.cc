#include "common.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/io/byte_stream.h"
#include "wds/io/remote.h"

namespace wds::tools {
namespace {

// A lock-free atomic is safe to set from a signal handler and to read from
// any thread.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnSignal(int signal_number) { g_signal.store(signal_number, std::memory_order_relaxed); }

constexpr auto kProgressInterval = std::chrono::milliseconds(200);

std::string Format(const char* format, double a, double b = 0) {
  char text[64];
  std::snprintf(text, sizeof(text), format, a, b);
  return text;
}

std::string Duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%" PRId64 ":%02d:%02d", s / 3600,
                static_cast<int>(s / 60 % 60), static_cast<int>(s % 60));
  return text;
}

}  // namespace

int Fail(std::string_view message) {
  std::fprintf(stderr, "wds-shard: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

int Fail(const absl::Status& status) {
  return Fail(std::string_view(status.message().data(), status.message().size()));
}

void Warn(std::string_view message) { Fail(message); }

absl::StatusOr<int64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  int64_t value = 0;
  while (digits < text.size() && digits < 18 && text[digits] >= '0' && text[digits] <= '9') {
    value = value * 10 + (text[digits++] - '0');
  }
  std::string_view unit = text.substr(digits);
  int shift = 0;
  if (!unit.empty()) {
    const char u = absl::ascii_toupper(static_cast<unsigned char>(unit[0]));
    shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : u == 'T' ? 40 : 0;
    if (shift > 0) unit.remove_prefix(1);
  }
  if (unit == "iB" || unit == "B") unit = "";
  if (digits == 0 || !unit.empty() || value == 0 || value > (INT64_MAX >> shift)) {
    return absl::InvalidArgumentError("bad size '" + std::string(text) +
                                      "' (expected a byte count such as 1048576, 512M or 3G)");
  }
  return value << shift;
}

absl::StatusOr<int64_t> ParseCount(std::string_view text, std::string_view option, int64_t min) {
  int64_t value = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char c : text) {
    if (c < '0' || c > '9') ok = false;
    value = value * 10 + (c - '0');
  }
  if (!ok || value < min) {
    return absl::InvalidArgumentError(std::string(option) + " needs an integer of at least " +
                                      std::to_string(min) + ", not '" + std::string(text) + "'");
  }
  return value;
}

absl::StatusOr<int> Args::Jobs(std::string_view command) {
  absl::StatusOr<std::string> text = Value("--jobs");
  if (!text.ok()) return text.status();
  absl::StatusOr<int64_t> n = ParseCount(*text, std::string(command) + ": --jobs");
  if (!n.ok()) return n.status();
  return static_cast<int>(std::min<int64_t>(*n, 256));
}

int DefaultJobs(const std::vector<std::string>& urls, int local) {
  return std::any_of(urls.begin(), urls.end(), IsRemoteUrl) ? 16 : local;
}

int CpuJobs() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  return u == 0 ? Format("%.0f B", bytes) : Format("%.1f ", bytes) + units[u];
}

absl::StatusOr<std::string> Args::Value(std::string_view option) {
  if (done()) return absl::InvalidArgumentError(std::string(option) + " needs a value");
  return std::string(Take());
}

bool IsOption(std::string_view arg) { return arg.size() > 1 && arg[0] == '-'; }

void InstallInterruptHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &action, nullptr);
}

int Interrupted() { return g_signal.load(std::memory_order_relaxed); }

Progress::Progress(int64_t total_samples)
    : enabled_(isatty(2) == 1),
      total_(total_samples),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

void Progress::Add(int64_t samples, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  samples_ += samples;
  bytes_ += bytes;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  // The first sample shows the line at once; later ones refresh it.
  if (printed_ && now - last_print_ < kProgressInterval) return;
  last_print_ = now;
  Print();
}

void Progress::Print() {
  const double elapsed = seconds();
  std::string line = "\rwds-shard: " + std::to_string(samples_);
  if (total_ > 0) line += "/" + std::to_string(total_);
  line += " samples, " + HumanBytes(static_cast<double>(bytes_));
  if (elapsed > 0) line += ", " + HumanBytes(bytes_ / elapsed) + "/s";
  if (total_ > 0 && samples_ > 0 && elapsed > 0) {
    line += ", ETA " + Duration(elapsed * static_cast<double>(total_ - samples_) / samples_);
  }
  line += "\033[K";
  std::fputs(line.c_str(), stderr);
  printed_ = true;
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (printed_) std::fputs("\r\033[K", stderr);
  printed_ = false;
}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

absl::StatusOr<std::unique_ptr<ByteStream>> OpenShard(const std::string& url) {
  // A tool runs one command: one opener for its lifetime is its state.
  static const Opener opener = MakeOpener();
  return opener(url);
}

absl::Status WalkShard(const std::string& url, const ShardVisitor& visitor) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenShard(url);
  if (!stream.ok()) return stream.status();
  ShardSampleReaderOptions options;
  options.on_skipped = visitor.on_skipped;
  absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
      ShardSampleReader::Open(*std::move(stream), std::move(options));
  if (!reader.ok()) return reader.status();
  while (true) {
    absl::StatusOr<std::optional<GroupedSample>> grouped = (*reader)->Next();
    if (!grouped.ok()) return grouped.status();
    if (!grouped->has_value()) return absl::OkStatus();
    RawSample sample{std::move((*grouped)->key), {}};
    for (SampleMember& m : (*grouped)->members) {
      sample.members.push_back({std::move(m.member.name), AsciiLower(m.field), m.member.offset,
                                std::move(m.member.data)});
    }
    if (!visitor.on_sample(sample)) return absl::OkStatus();
  }
}

}  // namespace wds::tools
