// wds-shard index: write DALI index sidecars and, with --json, the dataset's
// wids shard index.
//
//   wds-shard index [--json FILE] [--dir DIR] [--jobs N] SHARD...
//
// Each SHARD gets SHARD.idx (see wds/tar/shard_index.h), built from its tar
// headers alone. A remote shard (http(s)://, s3://, gs://) cannot get a file
// beside it: its index is written locally, as DIR/<name of the shard>.idx
// (DIR defaults to the current directory); two shards whose indexes would
// be one file are refused before any is read. FILE lists every shard with
// its sample count and size, in the order given; local shard URLs under
// FILE's directory are written relative to it (as wids resolves them), other
// local ones as absolute paths, remote ones as given.
//
// Shards are scanned N at a time (--jobs, at most 256; default 16 when a
// shard is remote, each scan waiting on round trips, else 1), each distinct
// shard once (a local file however it is spelled). The error reported is
// that of the first shard in the order given that fails; no scan begins
// after a failed one (those under way finish and write their indexes), and
// FILE is written only when every shard was indexed.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "commands.h"
#include "common.h"
#include "wds/internal/base/concurrently.h"
#include "wds/internal/tar/shard_scan.h"
#include "wds/io/remote.h"
#include "wds/shards/shard_list.h"
#include "wds/tar/shard_index.h"

namespace wds::tools {
namespace {

namespace fs = std::filesystem;

// UrlFrom returns `shard` as the JSON at `json_path` names it.
std::string UrlFrom(const std::string& json_path, const std::string& shard) {
  std::error_code ec;
  const fs::path base = fs::absolute(fs::path(json_path), ec).lexically_normal().parent_path();
  const fs::path target = fs::absolute(fs::path(shard), ec).lexically_normal();
  if (ec) return shard;
  const fs::path relative = target.lexically_relative(base);
  if (relative.empty() || *relative.begin() == "..") return target.string();
  return relative.string();
}

// LocalIndexPath is where a remote shard's index goes: DIR/<last path
// segment of the URL, without any query>.idx.
std::string LocalIndexPath(const std::string& dir, const std::string& url) {
  std::string name = url.substr(0, url.find_first_of("?#"));
  name = name.substr(name.rfind('/') + 1);
  return (fs::path(dir.empty() ? "." : dir) / IndexPath(name)).string();
}

// FileKey names the file at `path` whatever the spelling ("a.tar",
// "./a.tar", an absolute path, a symbolic link to it).
std::string FileKey(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : canonical.string();
}

// ShardKey names a shard: a local file by its FileKey, anything else (a
// remote URL, a pipe: command, "-") as written.
std::string ShardKey(const std::string& shard) {
  std::optional<std::string> local = LocalPath(shard);
  return local.has_value() ? FileKey(*local) : shard;
}

// Indexed is one shard's scan: its sample count and size in bytes.
struct Indexed {
  int64_t samples = 0;
  int64_t size = 0;
};

// IndexShard scans `shard` and writes its index to `path`.
absl::StatusOr<Indexed> IndexShard(const std::string& shard, const std::string& path) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenShard(shard);
  if (!stream.ok()) return stream.status();
  Indexed indexed;
  absl::StatusOr<ShardIndex> index = ScanStream(*std::move(stream), &indexed.size);
  if (!index.ok()) return index.status();
  if (absl::Status s = index->Save(path); !s.ok()) return s;
  indexed.samples = static_cast<int64_t>(index->samples.size());
  return indexed;
}

}  // namespace

int RunIndex(int argc, char** argv) {
  Args args(argc, argv);
  std::string json;
  std::string dir;
  int jobs = 0;  // 0: the default
  std::vector<std::string> shards;
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--json") {
      absl::StatusOr<std::string> v = args.Value(arg);
      if (!v.ok()) return Fail(v.status());
      json = *v;
    } else if (arg == "--dir") {
      absl::StatusOr<std::string> v = args.Value(arg);
      if (!v.ok()) return Fail(v.status());
      dir = *v;
    } else if (arg == "--jobs") {
      absl::StatusOr<int> n = args.Jobs("index");
      if (!n.ok()) return Fail(n.status());
      jobs = *n;
    } else if (IsOption(arg)) {
      return Fail("index: unknown option " + std::string(arg));
    } else {
      absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(arg);
      if (!expanded.ok()) return Fail("index: " + std::string(expanded.status().message()));
      shards.insert(shards.end(), expanded->begin(), expanded->end());
    }
  }
  if (shards.empty()) {
    return Fail("usage: wds-shard index [--json FILE] [--dir DIR] [--jobs N] SHARD...");
  }
  // Each distinct shard (a local file however it is spelled) is scanned
  // once, into an index file of its own.
  std::vector<std::string> unique;
  std::vector<std::string> paths;
  std::vector<size_t> job_of(shards.size());                   // listed shard -> its job
  std::unordered_map<std::string, size_t> job_of_shard;        // ShardKey -> its job
  std::unordered_map<std::string, std::string> shard_of_path;  // FileKey of an index -> shard
  bool any_remote = false;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& shard = shards[s];
    auto [job, added] = job_of_shard.emplace(ShardKey(shard), unique.size());
    job_of[s] = job->second;
    if (!added) continue;
    const bool remote = IsRemoteUrl(shard);
    any_remote = any_remote || remote;
    std::string path = remote ? LocalIndexPath(dir, shard) : IndexPath(shard);
    auto [other, free] = shard_of_path.emplace(FileKey(path), shard);
    if (!free) {
      const bool both_remote = IsRemoteUrl(other->second) && remote;
      return Fail("index: " + other->second + " and " + shard + " would both write " + path +
                  (both_remote ? " (remote shards' indexes are named by the URL's last "
                                 "segment: index them into different --dir)"
                               : ""));
    }
    unique.push_back(shard);
    paths.push_back(std::move(path));
  }
  if (any_remote && !dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
  }
  std::vector<size_t> order(unique.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::vector<absl::StatusOr<Indexed>> indexed =
      ReadEach<Indexed>(order, jobs > 0 ? jobs : DefaultJobs(unique, 1),
                        [&](size_t i) { return IndexShard(unique[i], paths[i]); });
  DatasetIndex dataset;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& shard = shards[s];
    const absl::StatusOr<Indexed>& done = indexed[job_of[s]];
    if (!done.ok()) return Fail("index: " + std::string(done.status().message()));
    const bool remote = IsRemoteUrl(shard);
    dataset.shards.push_back(
        {json.empty() || remote ? shard : UrlFrom(json, shard), done->samples, done->size});
  }
  if (!json.empty()) {
    if (absl::Status s = dataset.Save(json); !s.ok())
      return Fail("index: " + std::string(s.message()));
  }
  Warn("index: " + std::to_string(shards.size()) + " shard(s), " +
       std::to_string(dataset.total_samples()) + " samples" + (json.empty() ? "" : "; " + json));
  return 0;
}

}  // namespace wds::tools
