// The layers of docs/ARCHITECTURE.md, checked against the include lines of
// every header and source file: a file never includes one of a higher layer,
// public headers include only public headers, and the tools reach the library
// only through its public headers and the explicitly internal ones.
//
// Who may include what:
//   include/wds/          public headers only (they are installed alone)
//   internal/wds/internal public and internal headers, of its layer or below
//   src/<layer>/          anything of its layer or below, private or not
//   tools/, python/       public and internal headers, never private ones
//   bench/, fuzz/         any header, private ones included: they measure and
//                         fuzz internal code (the resampler, the HTTP parser),
//                         as tests/ do; but not the LibTorch layer, which
//                         they do not link
//   tests/downstream/     public headers only: it builds against the installed
//                         package, which holds nothing else
//   tests/                anything
// Includes are read in both forms, "wds/x.h" and <wds/x.h>.
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
const std::vector<std::string> kLayers = {"base",  "shards", "io",       "tar",
                                          "stages", "decode", "batch",  "gpu",
                                          "pipeline", "loader", "torch"};

// kHeaderLayers places every public and internal header. A header missing
// here fails the test, so a new one gets a layer when it is added.
const std::map<std::string, std::string> kHeaderLayers = {
    {"wds/array.h", "base"},
    {"wds/buffer.h", "base"},
    {"wds/buffer_pool.h", "base"},
    {"wds/error.h", "base"},
    {"wds/error_kind.h", "base"},
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
    {"wds/shard_counts.h", "tar"},
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

// ProjectIncludes lists the included paths of `file` that may be the
// project's: every "quoted" include, and <wds/...> ones (system headers, in
// angle brackets, are left out).
std::vector<std::string> ProjectIncludes(const fs::path& file) {
  static const std::regex kInclude(R"re(^\s*#\s*include\s*(?:"([^"]+)"|<(wds/[^>]+)>))re");
  std::vector<std::string> out;
  std::ifstream in(file);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kInclude)) out.push_back(m[1].matched ? m[1] : m[2]);
  }
  return out;
}

std::vector<fs::path> SourceFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc" || ext == ".cu")) {
      files.push_back(entry.path());
    }
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

// ResolvesInTree is false for an include that names a project header which
// does not exist: "wds/..." missing from include/ and internal/, or
// "<layer>/..." missing from src/. Other includes (a file beside `file`, a
// third-party header) are not the project's to check.
bool ResolvesInTree(const fs::path& file, const std::string& include) {
  if (include.rfind("wds/", 0) == 0) {
    return fs::exists(kRoot / "include" / include) || fs::exists(kRoot / "internal" / include);
  }
  if (FolderLayer(include).has_value() && !fs::exists(file.parent_path() / include)) {
    return fs::exists(kRoot / "src" / include);
  }
  return true;
}

TEST(LayeringTest, IncludesAreReadInBothForms) {
  const fs::path file = fs::path(::testing::TempDir()) / "layering_includes.cc";
  std::ofstream(file) << "#include \"wds/a.h\"\n"
                         "#include <wds/b.h>\n"
                         "  #  include<wds/torch/c.h>  // comment\n"
                         "#include \"tar/d.h\"\n"
                         "#include <vector>\n"
                         "#include <torch/types.h>\n"
                         "// #include \"wds/commented.h\" is not at the start of a line\n"
                         "int x;  #include \"wds/e.h\"\n";
  EXPECT_THAT(ProjectIncludes(file),
              ::testing::ElementsAre("wds/a.h", "wds/b.h", "wds/torch/c.h", "tar/d.h"));
  fs::remove(file);
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
    for (const std::string& include : ProjectIncludes(file)) {
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
    for (const std::string& include : ProjectIncludes(file)) {
      if (include.rfind("wds/internal/", 0) == 0 || FolderLayer(include).has_value()) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, InternalHeadersIncludeNoPrivateHeaders) {
  // The tools and the bindings include internal headers without src/ on
  // their include path.
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "internal")) {
    for (const std::string& include : ProjectIncludes(file)) {
      if (FolderLayer(include).has_value()) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, ToolsUseOnlyPublicAndInternalHeaders) {
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "tools")) {
    for (const std::string& include : ProjectIncludes(file)) {
      if (FolderLayer(include).has_value()) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes private " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, BenchmarksAndFuzzersUseExistingHeadersBelowTorch) {
  // bench/ and fuzz/ are white-box, like tests/: private headers are fine.
  // Two things are not: a header of the LibTorch layer (they link wds::core
  // only), and a header that no longer exists; fuzz/ is compiled only in a
  // clang build with WDS_BUILD_FUZZERS, so a header moved from under a fuzzer
  // would otherwise go unnoticed.
  std::vector<std::string> violations;
  for (const char* dir : {"bench", "fuzz"}) {
    for (const fs::path& file : SourceFiles(kRoot / dir)) {
      for (const std::string& include : ProjectIncludes(file)) {
        const std::string where = fs::relative(file, kRoot).string() + " includes " + include;
        if (!ResolvesInTree(file, include)) violations.push_back(where + " (missing)");
        if (LayerOf(include) == "torch") violations.push_back(where + " (torch)");
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, DownstreamUsesOnlyPublicHeaders) {
  // tests/downstream builds against the installed package, exactly as a user
  // does: only include/wds/ is installed.
  std::vector<std::string> violations;
  std::vector<std::string> seen;
  for (const fs::path& file : SourceFiles(kRoot / "tests" / "downstream")) {
    for (const std::string& include : ProjectIncludes(file)) {
      seen.push_back(include);
      if (!fs::exists(kRoot / "include" / include)) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(seen, ::testing::Contains("wds/wds.h"));  // read through <wds/wds.h>
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, PythonBindingsUseOnlyPublicAndInternalHeaders) {
  // python/ sits above the library: public headers, the internal helpers, and
  // no LibTorch (torch interop goes through DLPack).
  std::vector<std::string> violations;
  for (const fs::path& file : SourceFiles(kRoot / "python")) {
    for (const std::string& include : ProjectIncludes(file)) {
      if (FolderLayer(include).has_value() || include.rfind("wds/torch/", 0) == 0) {
        violations.push_back(fs::relative(file, kRoot).string() + " includes " + include);
      }
    }
  }
  EXPECT_THAT(violations, IsEmpty());
}

}  // namespace
}  // namespace wds
