#include "loader/loader_state.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// Version 2 added each stream's pass_samples and the elastic resume's
// generation and base; version 1 states read as having neither.
constexpr int kStateVersion = 2;
constexpr std::string_view kStateFormat = "webdataset-cpp loader state";
constexpr int kJobVersion = 1;
constexpr std::string_view kJobFormat = "webdataset-cpp job state";

using Json = nlohmann::ordered_json;

// The largest layout a state may name: more is not a state this library
// wrote, and planning walks every worker of it.
constexpr int kMaxWorldSize = 1 << 20;
constexpr int kMaxWorkers = 1 << 12;

// BadNumber is a field whose number cannot be what it says: a float, or an
// integer out of range, where an integer goes. nlohmann's get<int64_t>()
// would cast such a float (undefined behaviour past the range) or wrap such
// an integer.
class BadNumber : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Int reads `key` of `j` (or element `key` of an array) as a T. Errors: the
// parser's exceptions for a missing field or a non-number, BadNumber.
template <typename T, typename Key>
T Int(const nlohmann::json& j, const Key& key) {
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max()) {
      return static_cast<T>(i);
    }
  } else if (!v.is_number_float()) {
    return v.get<T>();  // not a number: the parser's type error
  }
  std::string number = v.dump();
  if (number.size() > 40) number = number.substr(0, 40) + "...";
  std::string field;
  if constexpr (std::is_integral_v<Key>) {
    field = Cat("element ", key);
  } else {
    field = Cat("\"", key, "\"");
  }
  throw BadNumber(Cat(field, " is ", number, ", not an integer that fits"));
}

// FormatOf and VersionOf read the fields that say what a text is, before
// anything else: "" and 0 when absent or of another type (a text that is
// not a state, rather than an exception).
std::string FormatOf(const nlohmann::json& j) {
  const auto it = j.find("format");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int VersionOf(const nlohmann::json& j) {
  const auto it = j.find("version");
  return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
}

std::string Digest(std::string_view text) {
  return absl::StrCat(absl::Hex(Fnv1a(text), absl::kZeroPad16));
}

Json StreamsJson(const GroupState& group) {
  Json streams = Json::array();
  for (const WorkerStart& w : group.workers) {
    streams.push_back({w.checkpoint.pass, w.checkpoint.source_out, w.checkpoint.shuffle_out,
                       w.checkpoint.pass_samples, w.ended});
  }
  return streams;
}

// ReadStreams reads StreamsJson's arrays, or version 1's objects.
GroupState ReadStreams(const nlohmann::json& j) {
  GroupState group;
  group.cursor = Int<int>(j, "cursor");
  for (const nlohmann::json& s : j.at("streams")) {
    WorkerStart w;
    if (s.is_array()) {
      w.checkpoint = {Int<int64_t>(s, 0), Int<int64_t>(s, 1), Int<int64_t>(s, 2),
                      Int<int64_t>(s, 3)};
      w.ended = s.at(4).get<bool>();
    } else {
      w.checkpoint = {Int<int64_t>(s, "pass"), Int<int64_t>(s, "source_out"),
                      Int<int64_t>(s, "shuffle_out")};
      w.ended = s.at("ended").get<bool>();
    }
    group.workers.push_back(w);
  }
  return group;
}

// The fields every rank of a job shares, in both texts.
void PutCommon(const LoaderStateData& d, Json& j) {
  j["recipe"] = d.recipe;
  j["world_size"] = d.world_size;
  j["workers"] = d.workers;
  j["mode"] = d.mode;
  j["length"] = d.length;
  j["running"] = d.running;
  j["epoch"] = d.epoch;
  j["generation"] = d.generation;
  j["base_digest"] = d.base_digest;
}

void ReadCommon(const nlohmann::json& j, LoaderStateData& d) {
  d.recipe = j.at("recipe").get<std::string>();
  d.world_size = Int<int>(j, "world_size");
  d.workers = Int<int>(j, "workers");
  d.mode = Int<int>(j, "mode");
  d.length = Int<int64_t>(j, "length");
  d.running = j.at("running").get<bool>();
  d.epoch = Int<int64_t>(j, "epoch");
  d.generation = j.contains("generation") ? Int<int64_t>(j, "generation") : 0;
  d.base_digest = j.value("base_digest", std::string());
}

// The fields of one rank's position.
void PutPosition(const LoaderStateData& d, Json& j) {
  j["remaining"] = d.remaining;
  j["stream_epoch"] = d.stream_epoch;
  if (d.group.has_value()) {
    j["cursor"] = d.group->cursor;
    j["streams"] = StreamsJson(*d.group);
  }
}

void ReadPosition(const nlohmann::json& j, LoaderStateData& d) {
  d.remaining = Int<int64_t>(j, "remaining");
  d.stream_epoch = Int<int64_t>(j, "stream_epoch");
  if (j.contains("streams")) d.group = ReadStreams(j);
}

absl::Status CheckConsistent(const LoaderStateData& d, std::string_view what) {
  const bool placement_ok = d.world_size >= 1 && d.world_size <= kMaxWorldSize && d.rank >= 0 &&
                            d.rank < d.world_size && d.workers >= 1 &&
                            d.workers <= kMaxWorkers && d.generation >= 0;
  const bool group_ok = !d.group.has_value() ||
                        (static_cast<int>(d.group->workers.size()) == d.workers &&
                         d.group->cursor >= 0 && d.group->cursor < d.workers);
  if (placement_ok && group_ok) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat("Loader::Restore: the ", what, " is inconsistent"));
}

Json JobJson(const JobStateData& job) {
  Json j;
  j["format"] = kJobFormat;
  j["version"] = kJobVersion;
  PutCommon(job.first(), j);
  Json ranks = Json::array();
  for (const LoaderStateData& d : job.ranks) {
    Json r;
    PutPosition(d, r);
    ranks.push_back(std::move(r));
  }
  j["ranks"] = std::move(ranks);
  if (job.base != nullptr) j["base"] = JobJson(*job.base);
  return j;
}

// kMaxBases bounds the chain of job states an epoch resumed from (one per
// elastic resume within one epoch): reading, writing and planning walk it
// recursively, so a crafted text must not nest deeper.
constexpr int kMaxBases = 64;

absl::StatusOr<JobStateData> ReadJob(const nlohmann::json& j, int depth = 0) {
  if (depth > kMaxBases) {
    return absl::InvalidArgumentError(Cat("Loader::Restore: the job state nests more than ",
                                          kMaxBases, " job states it resumed from"));
  }
  if (!j.is_object() || FormatOf(j) != kJobFormat) {
    return absl::InvalidArgumentError("Loader::Restore: the text is not a job state");
  }
  const int version = VersionOf(j);
  if (version != kJobVersion) {
    return absl::InvalidArgumentError(Cat("Loader::Restore: job state version ", version,
                                          " is unknown (this build reads version ", kJobVersion,
                                          ")"));
  }
  LoaderStateData common;
  ReadCommon(j, common);
  std::vector<LoaderStateData> ranks;
  for (const nlohmann::json& r : j.at("ranks")) {
    LoaderStateData d = common;
    d.rank = static_cast<int>(ranks.size());
    ReadPosition(r, d);
    if (absl::Status s = CheckConsistent(d, "job state"); !s.ok()) return s;
    ranks.push_back(std::move(d));
  }
  std::shared_ptr<const JobStateData> base;
  if (j.contains("base")) {
    absl::StatusOr<JobStateData> parsed = ReadJob(j.at("base"), depth + 1);
    if (!parsed.ok()) return parsed.status();
    base = std::make_shared<const JobStateData>(*std::move(parsed));
  }
  return GatherJob(std::move(ranks), std::move(base));
}

}  // namespace

std::string StateJson(const LoaderStateData& d) {
  Json j;
  j["format"] = kStateFormat;
  j["version"] = kStateVersion;
  j["rank"] = d.rank;
  PutCommon(d, j);
  PutPosition(d, j);
  return j.dump();
}

absl::StatusOr<LoaderStateData> ParseState(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || FormatOf(j) != kStateFormat) {
    return absl::InvalidArgumentError("Loader::Restore: the text is not a loader state");
  }
  const int version = VersionOf(j);
  if (version != 1 && version != kStateVersion) {
    return absl::InvalidArgumentError(Cat("Loader::Restore: loader state version ", version,
                                          " is unknown (this build reads versions 1 and ",
                                          kStateVersion, ")"));
  }
  try {
    LoaderStateData d;
    d.rank = Int<int>(j, "rank");
    ReadCommon(j, d);
    ReadPosition(j, d);
    WDS_RETURN_IF_ERROR(CheckConsistent(d, "loader state"));
    return d;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        Cat("Loader::Restore: the loader state is incomplete: ", e.what()));
  } catch (const BadNumber& e) {
    return absl::InvalidArgumentError(Cat("Loader::Restore: the loader state's ", e.what()));
  }
}

bool IsJobState(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  return !j.is_discarded() && j.is_object() && FormatOf(j) == kJobFormat;
}

std::string JobStateJson(const JobStateData& job) { return JobJson(job).dump(); }

absl::StatusOr<JobStateData> ParseJobState(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError("Loader::Restore: the text is not JSON");
  try {
    return ReadJob(j);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        Cat("Loader::Restore: the job state is incomplete: ", e.what()));
  } catch (const BadNumber& e) {
    return absl::InvalidArgumentError(Cat("Loader::Restore: the job state's ", e.what()));
  }
}

absl::StatusOr<JobStateData> GatherJob(std::vector<LoaderStateData> ranks,
                                       std::shared_ptr<const JobStateData> base) {
  if (ranks.empty()) return absl::InvalidArgumentError("Loader::JobState: no rank states");
  std::sort(ranks.begin(), ranks.end(),
            [](const LoaderStateData& a, const LoaderStateData& b) { return a.rank < b.rank; });
  const LoaderStateData& first = ranks.front();
  if (static_cast<int>(ranks.size()) != first.world_size) {
    return absl::InvalidArgumentError(Cat("Loader::JobState: ", ranks.size(),
                                          " rank states for a world of ", first.world_size));
  }
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    const LoaderStateData& d = ranks[r];
    if (d.rank != r) {
      return absl::InvalidArgumentError(
          Cat("Loader::JobState: rank ", d.rank, "'s state is there twice, rank ", r, "'s not"));
    }
    const bool same = d.recipe == first.recipe && d.world_size == first.world_size &&
                      d.workers == first.workers && d.mode == first.mode &&
                      d.length == first.length && d.running == first.running &&
                      d.epoch == first.epoch && d.generation == first.generation &&
                      d.base_digest == first.base_digest;
    if (!same) {
      return absl::FailedPreconditionError(
          Cat("Loader::JobState: rank ", r, "'s state differs from rank 0's in its recipe, layout, "
              "epoch or length (states of one step of one job?)"));
    }
  }
  if (!first.base_digest.empty() && (base == nullptr || base->digest != first.base_digest)) {
    return absl::FailedPreconditionError(
        "Loader::JobState: the states read the leftover of a job state this loader was not "
        "restored from");
  }
  const bool has_base = !first.base_digest.empty();
  JobStateData job;
  job.ranks = std::move(ranks);
  if (has_base) job.base = std::move(base);
  job.digest = Digest(JobStateJson(job));
  return job;
}

}  // namespace wds
