// The layers of docs/ARCHITECTURE.md, checked against the include lines of
// every header and source file: a file never includes one of a higher layer,
// public headers include only public headers, and the tools reach the library
// only through its public headers and the explicitly internal ones.
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wds {
namespace {

namespace fs = std::filesystem;
using ::testing::IsEmpty;

// kLayers lists the layers from the bottom up; each src/ folder is one, and
// image/ belongs to decode.
const std::vector<std::string> kLayers = {"base",   "shards", "io",       "tar",    "stages",
                                          "decode", "batch",  "pipeline", "loader", "torch"};

// kHeaderLayers places every public and internal header. A header missing
// here fails the test, so a new one gets a layer when it is added.
const std::map<std::string, std::string> kHeaderLayers = {
    {"wds/array.h", "base"},
    {"wds/buffer.h", "base"},
    {"wds/buffer_pool.h", "base"},
    {"wds/error.h", "base"},
    {"wds/interrupt.h", "base"},
    {"wds/output_slots.h", "base"},
    {"wds/pull_iterator.h", "base"},
    {"wds/random.h", "base"},
    {"wds/sample.h", "base"},
    {"wds/stage.h", "base"},
    {"wds/shard_list.h", "shards"},
    {"wds/byte_stream.h", "io"},
    {"wds/remote.h", "io"},
    {"wds/shard_index.h", "tar"},
    {"wds/shard_writer.h", "tar"},
    {"wds/tar_reader.h", "tar"},
    {"wds/tar_writer.h", "tar"},
    {"wds/stages.h", "stages"},
    {"wds/decode.h", "decode"},
    {"wds/image.h", "decode"},
    {"wds/npy.h", "decode"},
    {"wds/batch.h", "batch"},
    {"wds/pipeline.h", "pipeline"},
    {"wds/equalize.h", "loader"},
    {"wds/loader.h", "loader"},
    {"wds/placement.h", "loader"},
    {"wds/wds.h", "loader"},
    {"wds/torch/distributed.h", "torch"},
    {"wds/torch/equalize.h", "torch"},
    {"wds/torch/prefetcher.h", "torch"},
    {"wds/torch/tensor.h", "torch"},
    {"wds/internal/atomic_file.h", "io"},
    {"wds/internal/bounded_queue.h", "base"},
    {"wds/internal/resume_channel.h", "base"},
    {"wds/internal/shard_roller.h", "tar"},
    {"wds/internal/shard_scan.h", "tar"},
    {"wds/internal/status_macros.h", "base"},
    {"wds/internal/strings.h", "base"},
    {"wds/internal/tar_grouping.h", "tar"},
};

int Rank(const std::string& layer) {
  for (size_t i = 0; i < kLayers.size(); ++i) {
    if (kLayers[i] == layer) return static_cast<int>(i);
  }
  return -1;
}

// FolderLayer is the layer of a private path "tar/tar_samples.h".
std::optional<std::string> FolderLayer(const std::string& path) {
  const std::string folder = path.substr(0, path.find('/'));
  if (folder == "image") return "decode";
  if (Rank(folder) >= 0) return folder;
  return std::nullopt;
}

std::vector<std::string> QuotedIncludes(const fs::path& file) {
  static const std::regex kInclude(R"(^\s*#\s*include\s+"([^"]+)\")");
  std::vector<std::string> out;
  std::ifstream in(file);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kInclude)) out.push_back(m[1]);
  }
  return out;
}

std::vector<fs::path> SourceFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc")) files.push_back(entry.path());
  }
  return files;
}

const fs::path kRoot = WDS_SOURCE_DIR;

// LayerOf is the layer of an included path, or nullopt for a path that is no
// library header (a file of the same folder, say).
std::optional<std::string> LayerOf(const std::string& include) {
  auto it = kHeaderLayers.find(include);
  if (it != kHeaderLayers.end()) return it->second;
  return FolderLayer(include);
}

TEST(LayeringTest, EveryHeaderHasALayer) {
  std::vector<std::string> missing;
  for (const fs::path& dir : {kRoot / "include", kRoot / "internal"}) {
    for (const fs::path& file : SourceFiles(dir)) {
      const std::string name = fs::relative(file, dir).string();
      if (kHeaderLayers.count(name) == 0) missing.push_back(name);
    }
  }
  EXPECT_THAT(missing, IsEmpty()) << "add them to kHeaderLayers";
}

TEST(LayeringTest, NoFileIncludesAHigherLayer) {
  std::vector<std::string> violations;
  auto check = [&](const fs::path& file, const std::string& layer) {
    for (const std::string& include : QuotedIncludes(file)) {
      std::optional<std::string> to = LayerOf(include);
      if (to.has_value() && Rank(*to) > Rank(layer)) {
        violations.push_back(fs::relative(file, kRoot).string() + " (" + layer + ") includes " +
                             include + " (" + *to + ")");
      }
    }
  };
  for (const fs::path& dir : {kRoot / "include", kRoot / "internal"}) {
    for (const fs::path& file : SourceFiles(dir)) {
      check(file, kHeaderLayers.at(fs::relative(file, dir).string()));
    }
  }
  for (const fs::path& file : SourceFiles(kRoot / "src")) {
    const std::string relative = fs::relative(file, kRoot / "src").string();
    std::optional<std::string> layer = FolderLayer(relative);
    ASSERT_TRUE(layer.has_value()) << relative << " is in no layer's folder";
    check(file, *layer);
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, PublicHeadersIncludeOnlyPublicHeaders) {
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "include")) {
    for (const std::string& include : QuotedIncludes(file)) {
      if (include.rfind("wds/internal/", 0) == 0 || FolderLayer(include).has_value()) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, ToolsUseOnlyPublicAndInternalHeaders) {
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "tools")) {
    for (const std::string& include : QuotedIncludes(file)) {
      if (FolderLayer(include).has_value()) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes private " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, PythonBindingsUseOnlyPublicAndInternalHeaders) {
  // python/ sits above the library: public headers, the internal helpers, and
  // no LibTorch (torch interop goes through DLPack).
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "python")) {
    for (const std::string& include : QuotedIncludes(file)) {
      if (FolderLayer(include).has_value() || include.rfind("wds/torch/", 0) == 0) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

}  // namespace
}  // namespace wds
