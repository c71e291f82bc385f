// wds-shard index: write DALI index sidecars and, with --json, the dataset's
// wids shard index.
//
//   wds-shard index [--json FILE] SHARD...
//
// Each SHARD gets SHARD.idx (see wds/shard_index.h), built from its tar
// headers alone. FILE lists every shard with its sample count and file size;
// shard URLs under FILE's directory are written relative to it (as wids
// resolves them), others as absolute paths.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "shard_commands.h"
#include "shard_common.h"
#include "wds/shard_index.h"
#include "wds/shard_list.h"

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

}  // namespace

int RunIndex(int argc, char** argv) {
  Args args(argc, argv);
  std::string json;
  std::vector<std::string> shards;
  while (!args.done()) {
    const std::string_view arg = args.Take();
    if (arg == "--json") {
      absl::StatusOr<std::string> v = args.Value(arg);
      if (!v.ok()) return Fail(v.status());
      json = *v;
    } else if (IsOption(arg)) {
      return Fail("index: unknown option " + std::string(arg));
    } else {
      absl::StatusOr<std::vector<std::string>> expanded = ExpandUrls(arg);
      if (!expanded.ok()) return Fail("index: " + std::string(expanded.status().message()));
      shards.insert(shards.end(), expanded->begin(), expanded->end());
    }
  }
  if (shards.empty()) return Fail("usage: wds-shard index [--json FILE] SHARD...");
  DatasetIndex dataset;
  for (const std::string& shard : shards) {
    absl::StatusOr<ShardIndex> index = ScanShard(shard);
    if (!index.ok()) return Fail("index: " + std::string(index.status().message()));
    if (absl::Status s = index->Save(IndexPath(shard)); !s.ok()) {
      return Fail("index: " + std::string(s.message()));
    }
    struct stat st;
    const int64_t size = stat(shard.c_str(), &st) == 0 ? st.st_size : 0;
    dataset.shards.push_back({json.empty() ? shard : UrlFrom(json, shard),
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
