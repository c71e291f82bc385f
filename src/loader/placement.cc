#include "wds/loader/placement.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>
#include <vector>

#include "loader/launcher_env.h"
#include "loader/slurm_nodelist.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

template <typename Int>
bool ParseInt(std::string_view text, Int& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// ReadEnvInt reads the integer variable `name`; `partner` names the variable
// whose presence made `name` required.
template <typename Int = int>
absl::StatusOr<Int> ReadEnvInt(const char* name, const char* partner) {
  const char* value = std::getenv(name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        Cat("environment variable ", name, " is not set although ", partner, " is"));
  }
  Int out = 0;
  if (!ParseInt(value, out)) {
    return absl::InvalidArgumentError(
        Cat("environment variable ", name, "=\"", value, "\" is not an integer"));
  }
  return out;
}

bool IsSet(const char* name) { return std::getenv(name) != nullptr; }

// Setting is a resolved integer and where it came from, for error messages.
struct Setting {
  int value;
  std::string source;
};

// ResolveSetting takes `option` if set, else the variable `name` (whose
// partner variable names the pair it belongs to), else `fallback`.
absl::StatusOr<Setting> ResolveSetting(std::optional<int> option, std::string_view option_name,
                                       const char* name, const char* partner, int fallback) {
  if (option.has_value()) return Setting{*option, std::string(option_name)};
  if (name == nullptr) return Setting{fallback, "the default"};
  WDS_ASSIGN_OR_RETURN(int value, ReadEnvInt(name, partner));
  return Setting{value, name};
}

absl::StatusOr<std::string> ResolveMasterAddr(const PlacementOptions& options) {
  if (options.master_addr.has_value()) {
    if (options.master_addr->empty()) {
      return absl::InvalidArgumentError("PlacementOptions.master_addr is empty");
    }
    return *options.master_addr;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr) {
    if (*addr == '\0')
      return absl::InvalidArgumentError("environment variable MASTER_ADDR is empty");
    return std::string(addr);
  }
  for (const char* name : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    const char* list = std::getenv(name);
    if (list == nullptr) continue;
    absl::StatusOr<std::string> host = FirstHostOfNodeList(list);
    if (!host.ok()) {
      return absl::InvalidArgumentError(
          Cat("environment variable ", name, ": ", ToStd(host.status().message())));
    }
    return host;
  }
  return absl::InvalidArgumentError(
      "no rendezvous address: environment variable MASTER_ADDR is not set and neither is "
      "SLURM_JOB_NODELIST or SLURM_NODELIST");
}

absl::Status CheckPort(int64_t port, std::string_view source, std::string_view text) {
  if (port >= 1 && port <= 65535) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(source, "=\"", text, "\" is not a port in [1, 65535]"));
}

absl::StatusOr<int> ResolveMasterPort(const PlacementOptions& options) {
  if (options.master_port.has_value()) {
    const int port = *options.master_port;
    WDS_RETURN_IF_ERROR(CheckPort(port, "PlacementOptions.master_port", std::to_string(port)));
    return port;
  }
  if (IsSet("MASTER_PORT")) {
    WDS_ASSIGN_OR_RETURN(int port, ReadEnvInt("MASTER_PORT", "MASTER_PORT"));
    WDS_RETURN_IF_ERROR(
        CheckPort(port, "environment variable MASTER_PORT", std::getenv("MASTER_PORT")));
    return port;
  }
  if (IsSet("SLURM_JOB_ID")) {
    WDS_ASSIGN_OR_RETURN(int64_t job, ReadEnvInt<int64_t>("SLURM_JOB_ID", "SLURM_JOB_ID"));
    if (job < 0) {
      return absl::InvalidArgumentError(
          Cat("environment variable SLURM_JOB_ID=\"", job, "\" is negative"));
    }
    return kDefaultSlurmPortBase + static_cast<int>(job % 10000);
  }
  return kDefaultMasterPort;
}

absl::Status NodeListError(std::string_view nodelist, std::string_view problem) {
  return absl::InvalidArgumentError(Cat("node list \"", nodelist, "\" ", problem));
}

// FirstOfGroup returns the first number of a bracket group such as
// "003-005,007", checking every item of the group.
absl::StatusOr<std::string> FirstOfGroup(std::string_view group, std::string_view nodelist) {
  std::string first;
  size_t start = 0;
  while (start <= group.size()) {
    size_t comma = group.find(',', start);
    if (comma == std::string_view::npos) comma = group.size();
    const std::string_view item = group.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string_view low = item.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : item.substr(dash + 1);
    uint64_t lo = 0;
    uint64_t hi = 0;
    if (!ParseInt(low, lo) || !ParseInt(high, hi) || lo > hi) {
      return NodeListError(nodelist, Cat("has a bad range \"", item, "\" in [", group, "]"));
    }
    if (first.empty()) first = std::string(low);
    start = comma + 1;
  }
  return first;
}

// FirstEntryEnd returns the end of the first top-level entry of `nodelist`,
// checking that all its brackets are balanced and not nested.
absl::StatusOr<size_t> FirstEntryEnd(std::string_view nodelist) {
  size_t end = nodelist.size();
  bool open = false;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == '[' || c == ']') {
      if (open == (c == '[')) return NodeListError(nodelist, Cat("has an unbalanced '", c, "'"));
      open = !open;
    } else if (c == ',' && !open && end == nodelist.size()) {
      end = i;
    }
  }
  if (open) return NodeListError(nodelist, "has an unclosed '['");
  return end;
}

}  // namespace

absl::StatusOr<Placement> ResolvePlacement(const PlacementOptions& options,
                                           std::string_view options_name) {
  Placement placement;
  const char* rank_var = nullptr;
  const char* world_var = nullptr;
  if (IsSet("RANK") || IsSet("WORLD_SIZE")) {
    rank_var = "RANK";
    world_var = "WORLD_SIZE";
    placement.launcher = Launcher::kTorchrun;
  } else if (IsSet("SLURM_PROCID") || IsSet("SLURM_NTASKS")) {
    rank_var = "SLURM_PROCID";
    world_var = "SLURM_NTASKS";
    placement.launcher = Launcher::kSlurm;
  }
  if (options.rank.has_value() && options.world_size.has_value()) {
    placement.launcher = Launcher::kNone;
  }
  WDS_ASSIGN_OR_RETURN(
      Setting world,
      ResolveSetting(options.world_size, Cat(options_name, ".world_size"), world_var, rank_var, 1));
  WDS_ASSIGN_OR_RETURN(Setting rank, ResolveSetting(options.rank, Cat(options_name, ".rank"),
                                                    rank_var, world_var, 0));
  if (world.value < 1) {
    return absl::InvalidArgumentError(
        Cat("world size ", world.value, " from ", world.source, " must be >= 1"));
  }
  if (rank.value < 0 || rank.value >= world.value) {
    return absl::InvalidArgumentError(Cat("rank ", rank.value, " from ", rank.source,
                                          " is not in [0, ", world.value, ") (world size from ",
                                          world.source, ")"));
  }
  placement.rank = rank.value;
  placement.world_size = world.value;
  return placement;
}

absl::StatusOr<std::optional<int>> LauncherLocalRank(std::string_view what) {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID"}) {
    if (!IsSet(name)) continue;
    WDS_ASSIGN_OR_RETURN(int value, ReadEnvInt(name, name));
    if (value < 0) {
      return absl::InvalidArgumentError(Cat(what, " ", value, " from ", name, " must be >= 0"));
    }
    return value;
  }
  return std::nullopt;
}

absl::StatusOr<int> ResolveLocalRank(std::optional<int> local_rank, std::string_view option_name,
                                     std::string_view what) {
  if (!local_rank.has_value()) {
    WDS_ASSIGN_OR_RETURN(std::optional<int> launcher, LauncherLocalRank(what));
    return launcher.value_or(0);
  }
  if (*local_rank < 0) {
    return absl::InvalidArgumentError(
        Cat(what, " ", *local_rank, " from ", option_name, " must be >= 0"));
  }
  return *local_rank;
}

absl::StatusOr<Rendezvous> ResolveRendezvous(const PlacementOptions& options) {
  Rendezvous rendezvous;
  WDS_ASSIGN_OR_RETURN(rendezvous.addr, ResolveMasterAddr(options));
  WDS_ASSIGN_OR_RETURN(rendezvous.port, ResolveMasterPort(options));
  return rendezvous;
}

absl::StatusOr<std::string> FirstHostOfNodeList(std::string_view nodelist) {
  WDS_ASSIGN_OR_RETURN(size_t end, FirstEntryEnd(nodelist));
  const std::string_view entry = nodelist.substr(0, end);
  if (entry.empty()) return NodeListError(nodelist, "starts with an empty host name");
  std::string host;
  size_t i = 0;
  while (i < entry.size()) {
    if (entry[i] != '[') {
      host.push_back(entry[i++]);
      continue;
    }
    const size_t close = entry.find(']', i);
    WDS_ASSIGN_OR_RETURN(std::string first,
                         FirstOfGroup(entry.substr(i + 1, close - i - 1), nodelist));
    host += first;
    i = close + 1;
  }
  return host;
}

}  // namespace wds
