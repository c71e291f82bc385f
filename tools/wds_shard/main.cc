// wds-shard: pack datasets into WebDataset shards; inspect, verify and index
// shards. Each subcommand lives in its own tools/shard_*.cc file.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "commands.h"
#include "common.h"

namespace {

constexpr char kUsage[] =
    "usage: wds-shard <command> [options]\n"
    "commands:\n"
    "  create --output PATTERN [options] INPUT...   pack a directory tree, an ImageFolder,\n"
    "                                             a TSV/JSONL listing or tars into shards\n"
    "  ls [--json] [--handler NAME] URL...          list the samples of shards\n"
    "  cat SHARD KEY [FIELD]                        write one member to standard output\n"
    "  extract --output DIR [--force] SHARD...      write the members of shards out as files\n"
    "  stats [--json] SHARD...                      samples, bytes, fields, size distribution\n"
    "  verify [--decode] SHARD...                   check structure, grouping, images, index\n"
    "  index [--json FILE] [--dir DIR] SHARD...     write DALI index sidecars (SHARD.idx;\n"
    "                                             for remote shards DIR/NAME.idx)\n"
    "stats, verify and index read --jobs N shards at a time\n"
    "SHARD and URL may be paths, '-', pipe:CMD, or http(s)://, s3:// and gs:// URLs\n"
    "(environment: WDS_CACHE, WDS_CACHE_SIZE, AWS_*, CURL_CA_BUNDLE; see the README)\n"
    "run 'wds-shard create --help' for the options of create\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string_view command = argv[1];
  using Command = int (*)(int, char**);
  struct Entry {
    std::string_view name;
    Command run;
  };
  static constexpr Entry kCommands[] = {
      {"create", wds::tools::RunCreate}, {"ls", wds::tools::RunLs},
      {"cat", wds::tools::RunCat},       {"extract", wds::tools::RunExtract},
      {"stats", wds::tools::RunStats},   {"verify", wds::tools::RunVerify},
      {"index", wds::tools::RunIndex},
  };
  for (const Entry& entry : kCommands) {
    if (entry.name == command) return entry.run(argc - 2, argv + 2);
  }
  std::fputs(kUsage, stderr);
  return wds::tools::Fail("unknown command " + std::string(command));
}
