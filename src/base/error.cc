#include "wds/base/error.h"

#include <cstdio>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/cord.h"
#include "base/handlers.h"
#include "wds/base/error_kind.h"
#include "wds/internal/base/strings.h"

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

namespace {

constexpr std::string_view kKindNames[] = {"", "shard-unreadable", "command-failed",
                                           "field-decode"};

bool Markable(const absl::Status& status) { return !status.ok() && !absl::IsCancelled(status); }

void SetText(absl::Status& status, std::string_view type_url, std::string_view value) {
  status.SetPayload(ToAbsl(type_url), absl::Cord(ToAbsl(value)));
}

std::optional<std::string> GetText(const absl::Status& status, std::string_view type_url) {
  auto payload = status.GetPayload(ToAbsl(type_url));
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

}  // namespace

absl::Status WithErrorKind(absl::Status status, ErrorKind kind, std::string_view shard_url) {
  if (!Markable(status)) return status;
  SetText(status, kErrorKindPayload, kKindNames[static_cast<size_t>(kind)]);
  SetText(status, kShardUrlPayload, shard_url);
  return status;
}

ErrorKind ErrorKindOf(const absl::Status& status) {
  std::optional<std::string> name = GetText(status, kErrorKindPayload);
  if (!name.has_value()) return ErrorKind::kUnspecified;
  for (size_t i = 1; i < std::size(kKindNames); ++i) {
    if (*name == kKindNames[i]) return static_cast<ErrorKind>(i);
  }
  return ErrorKind::kUnspecified;
}

std::optional<std::string> ShardUrlOf(const absl::Status& status) {
  return GetText(status, kShardUrlPayload);
}

absl::Status WithFieldSite(absl::Status status, const FieldSite& site) {
  if (!Markable(status)) return status;
  SetText(status, kErrorKindPayload, kKindNames[static_cast<size_t>(ErrorKind::kFieldDecode)]);
  SetText(status, kSampleUrlPayload, site.url);
  SetText(status, kSampleKeyPayload, site.key);
  SetText(status, kFieldPayload, site.field);
  return status;
}

std::optional<FieldSite> FieldSiteOf(const absl::Status& status) {
  if (ErrorKindOf(status) != ErrorKind::kFieldDecode) return std::nullopt;
  FieldSite site;
  site.url = GetText(status, kSampleUrlPayload).value_or("");
  site.key = GetText(status, kSampleKeyPayload).value_or("");
  site.field = GetText(status, kFieldPayload).value_or("");
  return site;
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
  // to the next shard (wds/base/interrupt.h).
  if (absl::IsCancelled(error)) return ErrorAction::kRaise;
  if (counters != nullptr) counters->Record(stage, error.code());
  const bool warns = handler == Handler::kWarnAndContinue || handler == Handler::kWarnAndStop;
  if (warns) {
    // Code and message only: payloads (error kinds, URLs) are for programs.
    std::string message =
        Cat(stage, ": ", error.ToString(absl::StatusToStringMode::kWithNoExtraData));
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
