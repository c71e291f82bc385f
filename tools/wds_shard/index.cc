// wds-shard index: write DALI index sidecars and, with --json, the dataset's
// wids shard index.
//
//   wds-shard index [--json FILE] [--dir DIR] SHARD...
//
// Each SHARD gets SHARD.idx (see wds/tar/shard_index.h), built from its tar
// headers alone. A remote shard (http(s)://, s3://, gs://) cannot get a file
// beside it: its index is written locally, as DIR/<name of the shard>.idx
// (DIR defaults to the current directory). FILE lists every shard with its
// sample count and size; local shard URLs under FILE's directory are written
// relative to it (as wids resolves them), other local ones as absolute paths,
// remote ones as given.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
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

}  // namespace

int RunIndex(int argc, char** argv) {
  Args args(argc, argv);
  std::string json;
  std::string dir;
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
    } else if (IsOption(arg)) {
      return Fail("index: unknown option " + std::string(arg));
    } else {
      absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(arg);
      if (!expanded.ok()) return Fail("index: " + std::string(expanded.status().message()));
      shards.insert(shards.end(), expanded->begin(), expanded->end());
    }
  }
  if (shards.empty()) return Fail("usage: wds-shard index [--json FILE] [--dir DIR] SHARD...");
  DatasetIndex dataset;
  for (const std::string& shard : shards) {
    const bool remote = IsRemoteUrl(shard);
    absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenShard(shard);
    if (!stream.ok()) return Fail("index: " + std::string(stream.status().message()));
    int64_t size = 0;
    absl::StatusOr<ShardIndex> index = ScanStream(*std::move(stream), &size);
    if (!index.ok()) return Fail("index: " + std::string(index.status().message()));
    const std::string path = remote ? LocalIndexPath(dir, shard) : IndexPath(shard);
    if (remote && !dir.empty()) {
      std::error_code ec;
      fs::create_directories(dir, ec);
    }
    if (absl::Status s = index->Save(path); !s.ok()) {
      return Fail("index: " + std::string(s.message()));
    }
    dataset.shards.push_back({json.empty() || remote ? shard : UrlFrom(json, shard),
                              static_cast<int64_t>(index->samples.size()), size});
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
