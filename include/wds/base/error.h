// Error handlers and error counters.
//
// Setup errors (a malformed pattern, a bad option) come back as absl::Status
// from builders. Per-item errors (an unreadable shard, a truncated member, a
// corrupt field, a missing field) go to the handler of the stage that met them:
//
//   reraise              the error ends the stream and reaches the consumer
//   warn_and_continue    log a warning, drop the item, go on
//   ignore_and_continue  drop the item silently (still counted), go on
//   warn_and_stop        log a warning, end the stream cleanly
//   ignore_and_stop      end the stream cleanly (still counted)
//
// Every error a handler sees is counted per (stage, cause) in ErrorCounters, so
// nothing is ever lost without a trace. A warning never sleeps.
//
// Cancelled errors (an interrupted wait, see wds/base/interrupt.h, or a stopped
// loader) are not per-item errors: they reach no handler, are not counted,
// and end the stream whatever the handler.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace wds {

enum class Handler {
  kReraise,
  kWarnAndContinue,
  kIgnoreAndContinue,
  kWarnAndStop,
  kIgnoreAndStop,
};

// ParseHandler accepts the reference package's names: "reraise",
// "warn_and_continue", "ignore_and_continue", "warn_and_stop", "ignore_and_stop"
// (also "reraise_exception" and the other *_exception spellings).
[[nodiscard]] absl::StatusOr<Handler> ParseHandler(std::string_view name);
std::string_view HandlerName(Handler handler);

// ErrorAction is what a stage does after its handler saw an error.
enum class ErrorAction { kRaise, kContinue, kStop };

// WarningSink receives one line per warning. Where none is given, warnings
// go to stderr.
using WarningSink = std::function<void(std::string_view message)>;

// ErrorCounters counts handled errors per stage and cause (the status code).
// Thread-safe.
class ErrorCounters {
 public:
  struct Entry {
    std::string stage;
    absl::StatusCode cause;
    int64_t count;
  };

  void Record(std::string_view stage, absl::StatusCode cause);
  int64_t Count(std::string_view stage, absl::StatusCode cause) const;
  int64_t Total() const;
  // Snapshot lists the non-zero counters, ordered by stage then cause.
  std::vector<Entry> Snapshot() const;
  void Reset();

 private:
  // std::mutex rather than absl::Mutex: Debian's prebuilt Abseil is not
  // instrumented, so ThreadSanitizer cannot see absl::Mutex synchronise.
  mutable std::mutex mu_;
  std::map<std::pair<std::string, absl::StatusCode>, int64_t> counts_;  // guarded by mu_
};

}  // namespace wds
