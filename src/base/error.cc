#include "wds/error.h"

#include <cstdio>
#include <string>

#include "base/handlers.h"
#include "wds/internal/strings.h"

namespace wds {

absl::StatusOr<Handler> ParseHandler(std::string_view name) {
  struct Entry {
    std::string_view name;
    Handler handler;
  };
  static constexpr Entry kEntries[] = {
      {"reraise", Handler::kReraise},
      {"warn_and_continue", Handler::kWarnAndContinue},
      {"ignore_and_continue", Handler::kIgnoreAndContinue},
      {"warn_and_stop", Handler::kWarnAndStop},
      {"ignore_and_stop", Handler::kIgnoreAndStop},
  };
  std::string_view base = name;
  if (base == "reraise_exception") base = "reraise";
  constexpr std::string_view kSuffix = "_exception";
  for (const Entry& e : kEntries) {
    if (base == e.name || base == Cat(e.name, kSuffix)) return e.handler;
  }
  return absl::InvalidArgumentError(
      Cat("unknown error handler \"", name,
          "\" (expected reraise, warn_and_continue, ignore_and_continue, warn_and_stop or "
          "ignore_and_stop)"));
}

std::string_view HandlerName(Handler handler) {
  switch (handler) {
    case Handler::kReraise:
      return "reraise";
    case Handler::kWarnAndContinue:
      return "warn_and_continue";
    case Handler::kIgnoreAndContinue:
      return "ignore_and_continue";
    case Handler::kWarnAndStop:
      return "warn_and_stop";
    case Handler::kIgnoreAndStop:
      return "ignore_and_stop";
  }
  return "unknown";
}

void WriteWarningToStderr(std::string_view message) {
  std::string line = Cat("wds: warning: ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void ErrorCounters::Record(std::string_view stage, absl::StatusCode cause) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{std::string(stage), cause}];
}

int64_t ErrorCounters::Count(std::string_view stage, absl::StatusCode cause) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find({std::string(stage), cause});
  return it == counts_.end() ? 0 : it->second;
}

int64_t ErrorCounters::Total() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [unused, n] : counts_) total += n;
  return total;
}

std::vector<ErrorCounters::Entry> ErrorCounters::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const auto& [k, n] : counts_) out.push_back({k.first, k.second, n});
  return out;
}

void ErrorCounters::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  counts_.clear();
}

ErrorAction ApplyHandler(Handler handler, std::string_view stage, const absl::Status& error,
                         ErrorCounters* counters, const WarningSink& warn) {
  // An interruption is not the item's fault: skipping it would only go on
  // to the next shard (wds/interrupt.h).
  if (absl::IsCancelled(error)) return ErrorAction::kRaise;
  if (counters != nullptr) counters->Record(stage, error.code());
  const bool warns = handler == Handler::kWarnAndContinue || handler == Handler::kWarnAndStop;
  if (warns) {
    std::string message = Cat(stage, ": ", error.ToString());
    if (warn) {
      warn(message);
    } else {
      WriteWarningToStderr(message);
    }
  }
  switch (handler) {
    case Handler::kReraise:
      return ErrorAction::kRaise;
    case Handler::kWarnAndContinue:
    case Handler::kIgnoreAndContinue:
      return ErrorAction::kContinue;
    case Handler::kWarnAndStop:
    case Handler::kIgnoreAndStop:
      return ErrorAction::kStop;
  }
  return ErrorAction::kRaise;
}

}  // namespace wds
