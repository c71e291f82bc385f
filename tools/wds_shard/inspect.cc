// wds-shard cat, extract and stats: look inside shards.
//
//   cat SHARD KEY [FIELD]       the member's bytes on standard output; FIELD
//                               is matched as a pipeline names fields (ASCII
//                               case ignored) and may be left out when the
//                               sample has a single member.
//   extract --output DIR [--force] SHARD...
//                               every regular member written to DIR/<name>;
//                               an existing file is an error unless --force;
//                               absolute names and ".." are refused.
//   stats [--json] [--jobs N] SHARD...
//                               per shard: samples, members, bytes, each
//                               field's count and size distribution, and
//                               the distribution of sample sizes; then the
//                               totals. Sizes are member data bytes.
//                               Quantiles are nearest-rank. Shards are
//                               read N at a time (at most 256; default 16
//                               when a shard is remote, else 1), reported
//                               in the order given; the error is that of
//                               the first shard in that order that fails.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "wds/internal/base/concurrently.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_index.h"

namespace wds::tools {
namespace {

absl::StatusOr<std::vector<std::string>> ExpandAll(const std::vector<std::string>& args) {
  std::vector<std::string> urls;
  for (const std::string& arg : args) {
    absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(arg);
    if (!expanded.ok()) return expanded.status();
    urls.insert(urls.end(), expanded->begin(), expanded->end());
  }
  if (urls.empty()) return absl::InvalidArgumentError("no shard given");
  return urls;
}

bool WriteAll(int fd, const Buffer& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---- cat ----

absl::Status CatMember(const std::string& url, const std::string& key, const std::string& field) {
  const std::string wanted = AsciiLower(field);
  absl::Status result = absl::NotFoundError(url + ": no sample with key '" + key + "'");
  ShardVisitor visitor;
  visitor.on_sample = [&](RawSample& sample) {
    if (sample.key != key) return true;
    std::vector<const ShardMember*> matches;
    std::string fields;
    for (const ShardMember& m : sample.members) {
      fields += (fields.empty() ? "" : ", ") + m.field;
      if (wanted.empty() || m.field == wanted) matches.push_back(&m);
    }
    if (matches.size() == 1) {
      result = WriteAll(1, matches[0]->data)
                   ? absl::OkStatus()
                   : absl::UnavailableError("cannot write to standard output");
    } else if (wanted.empty()) {
      result = absl::InvalidArgumentError(url + ": sample '" + key + "' has fields " + fields +
                                          "; name one");
    } else {
      result = absl::NotFoundError(url + ": sample '" + key + "' has no field '" + field +
                                   "' (it has " + fields + ")");
    }
    return false;
  };
  absl::Status walked = WalkShard(url, visitor);
  return walked.ok() ? result : walked;
}

// ---- extract ----

absl::Status CheckMemberPath(const std::string& url, const TarMember& m) {
  const std::filesystem::path path(m.name);
  bool escapes = path.is_absolute() || m.name.empty();
  for (const auto& part : path) escapes = escapes || part == "..";
  if (escapes) {
    return absl::InvalidArgumentError(url + ": member " + m.name + " at offset " +
                                      std::to_string(m.offset) +
                                      " would be written outside the output directory");
  }
  return absl::OkStatus();
}

absl::Status WriteMemberFile(const std::string& path, const Buffer& data, bool force) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec)
    return absl::PermissionDeniedError(path + ": cannot create its directory: " + ec.message());
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
  const int fd = open(path.c_str(), flags, 0644);
  if (fd < 0) {
    return errno == EEXIST ? absl::AlreadyExistsError(path + ": exists (use --force to overwrite)")
                           : absl::ErrnoToStatus(errno, path + ": cannot create");
  }
  const bool written = WriteAll(fd, data);
  if (close(fd) != 0 || !written) {
    std::remove(path.c_str());
    return absl::DataLossError(path + ": cannot write: " + std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status ExtractShard(const std::string& url, const std::string& dir, bool force,
                          int64_t& count) {
  absl::Status result;
  auto write = [&](const TarMember& m) {
    result = CheckMemberPath(url, m);
    if (result.ok()) result = WriteMemberFile(dir + "/" + m.name, m.data, force);
    if (result.ok()) ++count;
    return result.ok();
  };
  ShardVisitor visitor;
  visitor.on_skipped = write;
  visitor.on_sample = [&](RawSample& sample) {
    for (const ShardMember& m : sample.members) {
      if (!write(TarMember{m.name, m.data, m.offset})) return false;
    }
    return true;
  };
  absl::Status walked = WalkShard(url, visitor);
  return result.ok() ? walked : result;
}

// ---- stats ----

// Distribution summarizes sizes with nearest-rank quantiles.
nlohmann::ordered_json Distribution(std::vector<int64_t> sizes) {
  nlohmann::ordered_json d;
  if (sizes.empty()) return d;
  std::sort(sizes.begin(), sizes.end());
  auto rank = [&](double q) {
    const size_t n = sizes.size();
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    return sizes[std::min(n, std::max<size_t>(i, 1)) - 1];
  };
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  d["min"] = sizes.front();
  d["p50"] = rank(0.5);
  d["p90"] = rank(0.9);
  d["p99"] = rank(0.99);
  d["max"] = sizes.back();
  d["mean"] = static_cast<double>(total) / static_cast<double>(sizes.size());
  return d;
}

struct Tally {
  int64_t samples = 0;
  int64_t members = 0;
  int64_t member_bytes = 0;
  int64_t file_bytes = 0;
  std::map<std::string, std::vector<int64_t>> field_sizes;
  std::vector<int64_t> sample_sizes;

  void Add(const Tally& o) {
    samples += o.samples;
    members += o.members;
    member_bytes += o.member_bytes;
    file_bytes += o.file_bytes;
    for (const auto& [field, sizes] : o.field_sizes) {
      std::vector<int64_t>& mine = field_sizes[field];
      mine.insert(mine.end(), sizes.begin(), sizes.end());
    }
    sample_sizes.insert(sample_sizes.end(), o.sample_sizes.begin(), o.sample_sizes.end());
  }

  nlohmann::ordered_json ToJson() const {
    nlohmann::ordered_json j;
    j["samples"] = samples;
    j["members"] = members;
    j["member_bytes"] = member_bytes;
    j["file_bytes"] = file_bytes;
    nlohmann::ordered_json fields = nlohmann::ordered_json::object();
    for (const auto& [field, sizes] : field_sizes) {
      nlohmann::ordered_json f;
      f["count"] = sizes.size();
      int64_t bytes = 0;
      for (int64_t s : sizes) bytes += s;
      f["bytes"] = bytes;
      f["size"] = Distribution(sizes);
      fields[field] = f;
    }
    j["fields"] = fields;
    j["sample_size"] = Distribution(sample_sizes);
    return j;
  }
};

absl::StatusOr<Tally> StatShard(const std::string& url) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenShard(url);
  if (!stream.ok()) return stream.status();
  Tally t;
  absl::StatusOr<ShardIndex> index = ScanStream(*std::move(stream), &t.file_bytes);
  if (!index.ok()) return index.status();
  for (const IndexSample& sample : index->samples) {
    int64_t bytes = 0;
    for (const IndexMember& m : sample.members) {
      t.field_sizes[AsciiLower(m.field)].push_back(m.size);
      bytes += m.size;
      ++t.members;
    }
    t.member_bytes += bytes;
    t.sample_sizes.push_back(bytes);
    ++t.samples;
  }
  return t;
}

std::string SizeLine(const nlohmann::ordered_json& d) {
  if (d.is_null()) return "-";
  char text[160];
  std::snprintf(text, sizeof(text), "min %lld  p50 %lld  p90 %lld  max %lld  mean %.1f",
                static_cast<long long>(d["min"]), static_cast<long long>(d["p50"]),
                static_cast<long long>(d["p90"]), static_cast<long long>(d["max"]),
                d["mean"].get<double>());
  return text;
}

void PrintText(const std::string& title, const Tally& t) {
  const nlohmann::ordered_json j = t.ToJson();
  std::printf("%s\n  samples %lld  members %lld  member bytes %lld  file bytes %lld\n",
              title.c_str(), static_cast<long long>(t.samples), static_cast<long long>(t.members),
              static_cast<long long>(t.member_bytes), static_cast<long long>(t.file_bytes));
  for (const auto& [field, f] : j["fields"].items()) {
    std::printf("  field %-12s count %-8lld bytes %-12lld %s\n", field.c_str(),
                static_cast<long long>(f["count"]), static_cast<long long>(f["bytes"]),
                SizeLine(f["size"]).c_str());
  }
  std::printf("  sample size: %s\n", SizeLine(j["sample_size"]).c_str());
}

}  // namespace

int RunCat(int argc, char** argv) {
  if (argc < 2 || argc > 3) return Fail("usage: wds-shard cat SHARD KEY [FIELD]");
  absl::Status status = CatMember(argv[0], argv[1], argc == 3 ? argv[2] : "");
  return status.ok() ? 0 : Fail("cat: " + std::string(status.message()));
}

int RunExtract(int argc, char** argv) {
  Args args(argc, argv);
  std::string dir;
  bool force = false;
  std::vector<std::string> shards;
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--output") {
      absl::StatusOr<std::string> v = args.Value(arg);
      if (!v.ok()) return Fail(v.status());
      dir = *v;
    } else if (arg == "--force") {
      force = true;
    } else if (IsOption(arg)) {
      return Fail("extract: unknown option " + std::string(arg));
    } else {
      shards.emplace_back(arg);
    }
  }
  if (dir.empty()) return Fail("usage: wds-shard extract --output DIR [--force] SHARD...");
  absl::StatusOr<std::vector<std::string>> urls = ExpandAll(shards);
  if (!urls.ok()) return Fail("extract: " + std::string(urls.status().message()));
  int64_t count = 0;
  for (const std::string& url : *urls) {
    absl::Status s = ExtractShard(url, dir, force, count);
    if (!s.ok()) return Fail("extract: " + std::string(s.message()));
  }
  Warn("extract: wrote " + std::to_string(count) + " file(s) to " + dir);
  return 0;
}

int RunStats(int argc, char** argv) {
  Args args(argc, argv);
  bool json = false;
  int jobs = 0;  // 0: the default
  std::vector<std::string> shards;
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--json") {
      json = true;
    } else if (arg == "--jobs") {
      absl::StatusOr<int> n = args.Jobs("stats");
      if (!n.ok()) return Fail(n.status());
      jobs = *n;
    } else if (IsOption(arg)) {
      return Fail("stats: unknown option " + std::string(arg));
    } else {
      shards.emplace_back(arg);
    }
  }
  absl::StatusOr<std::vector<std::string>> urls = ExpandAll(shards);
  if (!urls.ok()) return Fail("stats: " + std::string(urls.status().message()));
  Tally total;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  absl::Status failed;  // the first shard in order that failed
  ReadEachInOrder<Tally>(*urls, jobs > 0 ? jobs : DefaultJobs(*urls, 1), StatShard,
                         [&](size_t i, absl::StatusOr<Tally>& t) {
                           if (!failed.ok()) return;
                           if (!t.ok()) {
                             failed = t.status();
                             return;
                           }
                           if (json) {
                             nlohmann::ordered_json j;
                             j["url"] = (*urls)[i];
                             j.update(t->ToJson());
                             list.push_back(j);
                           } else {
                             PrintText((*urls)[i], *t);
                             std::fflush(stdout);
                           }
                           total.Add(*t);
                         });
  if (!failed.ok()) return Fail("stats: " + std::string(failed.message()));
  if (json) {
    nlohmann::ordered_json doc;
    doc["shards"] = list;
    doc["total"] = total.ToJson();
    std::printf("%s\n", doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (urls->size() > 1) {
    PrintText("total (" + std::to_string(urls->size()) + " shards)", total);
  }
  return std::fflush(stdout) == 0 ? 0 : Fail("stats: cannot write output");
}

}  // namespace wds::tools
