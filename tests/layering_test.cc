// The layers of docs/ARCHITECTURE.md, checked against the include lines of
// every header and source file: a file never includes one of a higher layer,
// public headers include only public headers, and the tools reach the library
// only through its public headers and the explicitly internal ones.
//
// A file's layer is read from its path, and so is an included header's:
//   include/wds/<layer>/x.h            public, included as "wds/<layer>/x.h"
//   include/wds/wds.h                  the umbrella: the top of wds::core
//   internal/wds/internal/<layer>/x.h  internal, "wds/internal/<layer>/x.h"
//   src/<layer>/x.h                    private, "<layer>/x.h"
// where <layer> is a folder of src/ (image/ belongs to decode).
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
// Includes are read in both forms, "wds/x.h" and <wds/x.h>. Each check runs
// over a tree root, so that the self-tests below can show it failing on a
// small tree with a violation.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace wds {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;
using Violations = std::vector<std::string>;

// kLayers lists the layers from the bottom up; each src/ folder is one, and
// image/ belongs to decode.
const std::vector<std::string> kLayers = {"base",     "shards", "io",    "tar",
                                          "stages",   "decode", "batch", "gpu",
                                          "pipeline", "loader", "torch"};
// kUmbrella is wds/wds.h, which includes all of wds::core.
constexpr char kUmbrella[] = "wds/wds.h";
constexpr char kUmbrellaLayer[] = "loader";

int Rank(const std::string& layer) {
  for (size_t i = 0; i < kLayers.size(); ++i) {
    if (kLayers[i] == layer) return static_cast<int>(i);
  }
  return -1;
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// FolderLayer is the layer of a path whose first folder names one:
// "tar/tar_samples.h" is in tar, "image/codecs.h" in decode.
std::optional<std::string> FolderLayer(const std::string& path) {
  const size_t slash = path.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string folder = path.substr(0, slash);
  if (folder == "image") return "decode";
  if (Rank(folder) >= 0) return folder;
  return std::nullopt;
}

bool IsInternalInclude(const std::string& include) { return StartsWith(include, "wds/internal/"); }
bool IsPublicInclude(const std::string& include) {
  return StartsWith(include, "wds/") && !IsInternalInclude(include);
}
// IsPrivateInclude: "<layer>/x.h", a header beside its sources in src/.
bool IsPrivateInclude(const std::string& include) { return FolderLayer(include).has_value(); }

// IncludeLayer is the layer of an included path, or nullopt for a path that
// is no library header (a file of the same folder, a third-party header).
std::optional<std::string> IncludeLayer(const std::string& include) {
  if (include == kUmbrella) return kUmbrellaLayer;
  if (IsInternalInclude(include)) return FolderLayer(include.substr(strlen("wds/internal/")));
  if (IsPublicInclude(include)) return FolderLayer(include.substr(strlen("wds/")));
  return FolderLayer(include);
}

// FileLayer is the layer of a library file, from its path relative to the
// root; nullopt for a file in no layer's folder.
std::optional<std::string> FileLayer(const std::string& relative) {
  if (relative == std::string("include/") + kUmbrella) return kUmbrellaLayer;
  for (const std::string tree : {"include/wds/", "internal/wds/internal/", "src/"}) {
    if (StartsWith(relative, tree)) return FolderLayer(relative.substr(tree.size()));
  }
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
  if (!fs::exists(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc" || ext == ".cu")) {
      files.push_back(entry.path());
    }
  }
  return files;
}

// ForEachInclude calls `f(where, include)` for each project include of each
// source file under root/dir; `where` names the file and the include.
template <typename F>
void ForEachInclude(const fs::path& root, const std::string& dir, F f) {
  for (const fs::path& file : SourceFiles(root / dir)) {
    for (const std::string& include : ProjectIncludes(file)) {
      f(file, fs::relative(file, root).string() + " includes " + include, include);
    }
  }
}

// ResolvesInTree is false for an include that names a project header which
// does not exist: "wds/..." missing from include/ and internal/, or
// "<layer>/..." missing from src/. Other includes (a file beside `file`, a
// third-party header) are not the project's to check.
bool ResolvesInTree(const fs::path& root, const fs::path& file, const std::string& include) {
  if (StartsWith(include, "wds/")) {
    return fs::exists(root / "include" / include) || fs::exists(root / "internal" / include);
  }
  if (IsPrivateInclude(include) && !fs::exists(file.parent_path() / include)) {
    return fs::exists(root / "src" / include);
  }
  return true;
}

const fs::path kRoot = WDS_SOURCE_DIR;

// ------------------------------------------------------------------ checks

// FilesOutsideALayer: every library file sits in its layer's folder.
Violations FilesOutsideALayer(const fs::path& root) {
  Violations out;
  for (const char* dir : {"include", "internal", "src"}) {
    for (const fs::path& file : SourceFiles(root / dir)) {
      const std::string relative = fs::relative(file, root).string();
      if (!FileLayer(relative).has_value()) out.push_back(relative + " is in no layer's folder");
    }
  }
  return out;
}

// HigherLayerIncludes: no library file includes a header of a higher layer.
Violations HigherLayerIncludes(const fs::path& root) {
  Violations out;
  for (const char* dir : {"include", "internal", "src"}) {
    for (const fs::path& file : SourceFiles(root / dir)) {
      const std::string relative = fs::relative(file, root).string();
      std::optional<std::string> layer = FileLayer(relative);
      if (!layer.has_value()) continue;  // FilesOutsideALayer reports it
      for (const std::string& include : ProjectIncludes(file)) {
        std::optional<std::string> to = IncludeLayer(include);
        if (to.has_value() && Rank(*to) > Rank(*layer)) {
          out.push_back(relative + " (" + *layer + ") includes " + include + " (" + *to + ")");
        }
      }
    }
  }
  return out;
}

Violations NonPublicIncludesOfPublicHeaders(const fs::path& root) {
  Violations out;
  ForEachInclude(root, "include",
                 [&](const fs::path&, const std::string& where, const std::string& include) {
                   if (IsInternalInclude(include) || IsPrivateInclude(include))
                     out.push_back(where);
                 });
  return out;
}

// PrivateIncludesOf: files under `dir` that include private headers (the
// tools, the bindings and the internal headers have no src/ on their path).
Violations PrivateIncludesOf(const fs::path& root, const std::string& dir) {
  Violations out;
  ForEachInclude(root, dir,
                 [&](const fs::path&, const std::string& where, const std::string& include) {
                   if (IsPrivateInclude(include)) out.push_back(where);
                 });
  return out;
}

Violations MissingOrTorchIncludesOf(const fs::path& root, const std::string& dir) {
  Violations out;
  ForEachInclude(root, dir,
                 [&](const fs::path& file, const std::string& where, const std::string& include) {
                   if (!ResolvesInTree(root, file, include)) out.push_back(where + " (missing)");
                   if (IncludeLayer(include) == "torch") out.push_back(where + " (torch)");
                 });
  return out;
}

// CodeOnly is `text` without its comments and string literals.
std::string CodeOnly(const std::string& text) {
  static const std::regex kNotCode(R"re(//[^\n]*|/\*[\s\S]*?\*/|"(?:[^"\\\n]|\\.)*")re");
  return std::regex_replace(text, kNotCode, " ");
}

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// TypesDefinedIn lists the types that the headers under root/dir define at
// their own name (class, struct, enum, alias); a member defined out of its
// class ("struct WorkerContext::Wiring {") is its class's.
std::set<std::string> TypesDefinedIn(const fs::path& root, const std::string& dir) {
  static const std::regex kDefinition(
      R"re(\b(?:class|struct|enum(?:\s+class)?)\s+(\w+)\s*(?:final\s*)?[:{]|\busing\s+(\w+)\s*=)re");
  std::set<std::string> out;
  for (const fs::path& file : SourceFiles(root / dir)) {
    if (file.extension() != ".h") continue;
    const std::string code = CodeOnly(ReadFile(file));
    for (std::sregex_iterator it(code.begin(), code.end(), kDefinition), end; it != end; ++it) {
      out.insert((*it)[1].matched ? (*it)[1].str() : (*it)[2].str());
    }
  }
  return out;
}

// InternalTypesInPublicHeaders: a public header names no type that only an
// internal or private header defines (a type of the same name that a public
// header defines too is a public one).
Violations InternalTypesInPublicHeaders(const fs::path& root) {
  std::set<std::string> hidden = TypesDefinedIn(root, "internal");
  for (const std::string& name : TypesDefinedIn(root, "src")) hidden.insert(name);
  for (const std::string& name : TypesDefinedIn(root, "include")) hidden.erase(name);
  static const std::regex kWord(R"re(\b[A-Za-z_]\w*\b)re");
  Violations out;
  for (const fs::path& file : SourceFiles(root / "include")) {
    const std::string code = CodeOnly(ReadFile(file));
    std::set<std::string> named;
    for (std::sregex_iterator it(code.begin(), code.end(), kWord), end; it != end; ++it) {
      if (hidden.count(it->str()) != 0) named.insert(it->str());
    }
    for (const std::string& name : named) {
      out.push_back(fs::relative(file, root).string() + " names " + name);
    }
  }
  return out;
}

// ------------------------------------------------------------- self-tests

// FakeTree writes a small tree of one-line files under a temporary root.
class FakeTree {
 public:
  // One tree per process: ctest runs these tests in parallel processes.
  FakeTree()
      : root_(fs::path(::testing::TempDir()) / ("layering_tree_" + std::to_string(getpid()))) {
    fs::remove_all(root_);
  }
  ~FakeTree() { fs::remove_all(root_); }
  FakeTree& File(const std::string& path, const std::string& text = "") {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
    return *this;
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

std::string Includes(const std::string& header) { return "#include \"" + header + "\"\n"; }

TEST(LayeringTest, IncludesAreReadInBothForms) {
  FakeTree tree;
  tree.File("a.cc",
            "#include \"wds/a.h\"\n"
            "#include <wds/b.h>\n"
            "  #  include<wds/torch/c.h>  // comment\n"
            "#include \"tar/d.h\"\n"
            "#include <vector>\n"
            "#include <torch/types.h>\n"
            "// #include \"wds/commented.h\" is not at the start of a line\n"
            "int x;  #include \"wds/e.h\"\n");
  EXPECT_THAT(ProjectIncludes(tree.root() / "a.cc"),
              ElementsAre("wds/a.h", "wds/b.h", "wds/torch/c.h", "tar/d.h"));
}

TEST(LayeringTest, TheLayerIsReadFromThePath) {
  EXPECT_EQ(IncludeLayer("wds/tar/tar_reader.h"), "tar");
  EXPECT_EQ(IncludeLayer("wds/internal/io/atomic_file.h"), "io");
  EXPECT_EQ(IncludeLayer("wds/image/image.h"), "decode");
  EXPECT_EQ(IncludeLayer("wds/wds.h"), "loader");
  EXPECT_EQ(IncludeLayer("wds/torch/tensor.h"), "torch");
  EXPECT_EQ(IncludeLayer("loader/launcher_env.h"), "loader");
  EXPECT_EQ(IncludeLayer("wds/flat.h"), std::nullopt);
  EXPECT_EQ(IncludeLayer("helper.h"), std::nullopt);
  EXPECT_EQ(FileLayer("include/wds/stages/stages.h"), "stages");
  EXPECT_EQ(FileLayer("internal/wds/internal/base/strings.h"), "base");
  EXPECT_EQ(FileLayer("src/image/codecs.h"), "decode");
  EXPECT_EQ(FileLayer("include/wds/wds.h"), "loader");
  EXPECT_EQ(FileLayer("include/wds/flat.h"), std::nullopt);
  EXPECT_EQ(FileLayer("include/wds/internal/base/x.h"), std::nullopt);
  EXPECT_EQ(FileLayer("internal/wds/internal/x.h"), std::nullopt);
}

TEST(LayeringTest, EveryCheckFailsOnATreeThatBreaksIt) {
  FakeTree tree;
  tree.File("include/wds/flat.h")                                         // no layer
      .File("include/wds/base/a.h", Includes("wds/loader/l.h"))           // higher
      .File("include/wds/loader/l.h", Includes("wds/internal/base/q.h"))  // not public
      .File("internal/wds/internal/base/q.h", Includes("base/p.h"))       // private
      .File("src/base/p.h", Includes("stages/s.h"))                       // higher
      .File("src/stages/s.h")
      .File("tools/t.cc", Includes("tar/x.h"))  // private
      .File("bench/b.cc", Includes("wds/torch/t.h") + Includes("wds/base/gone.h"));
  EXPECT_THAT(FilesOutsideALayer(tree.root()),
              ElementsAre("include/wds/flat.h is in no layer's folder"));
  EXPECT_THAT(HigherLayerIncludes(tree.root()),
              ::testing::UnorderedElementsAre(
                  "include/wds/base/a.h (base) includes wds/loader/l.h (loader)",
                  "src/base/p.h (base) includes stages/s.h (stages)"));
  EXPECT_THAT(NonPublicIncludesOfPublicHeaders(tree.root()),
              ElementsAre("include/wds/loader/l.h includes wds/internal/base/q.h"));
  EXPECT_THAT(PrivateIncludesOf(tree.root(), "internal"),
              ElementsAre("internal/wds/internal/base/q.h includes base/p.h"));
  EXPECT_THAT(PrivateIncludesOf(tree.root(), "tools"), ElementsAre("tools/t.cc includes tar/x.h"));
  EXPECT_THAT(MissingOrTorchIncludesOf(tree.root(), "bench"),
              ::testing::UnorderedElementsAre("bench/b.cc includes wds/torch/t.h (missing)",
                                              "bench/b.cc includes wds/torch/t.h (torch)",
                                              "bench/b.cc includes wds/base/gone.h (missing)"));
}

TEST(LayeringTest, APublicHeaderNamingAnInternalTypeFails) {
  FakeTree tree;
  tree.File("internal/wds/internal/base/channel.h", "struct Channel {\n  int n;\n};\n")
      .File("src/base/slots.h", "class Slots final : public Base {};\nusing Alias = int;\n")
      .File("src/base/shared.h", "struct Options {};\n")
      .File("include/wds/base/shared.h", "struct Options {};\n")
      .File("include/wds/base/context.h",
            "// Channel and Slots in a comment are fine, \"Alias\" in a string too.\n"
            "struct Channel;\n"
            "struct Context {\n"
            "  std::shared_ptr<Channel> channel;\n"
            "  Slots* slots;\n"
            "  Options options;  // public: include/ defines it as well\n"
            "  struct Wiring;\n"
            "};\n");
  EXPECT_THAT(InternalTypesInPublicHeaders(tree.root()),
              ElementsAre("include/wds/base/context.h names Channel",
                          "include/wds/base/context.h names Slots"));
}

// ------------------------------------------------------ the project's tree

TEST(LayeringTest, EveryLibraryFileIsInItsLayersFolder) {
  EXPECT_THAT(SourceFiles(kRoot / "include"), Not(IsEmpty()));
  EXPECT_THAT(FilesOutsideALayer(kRoot), IsEmpty());
}

TEST(LayeringTest, NoFileIncludesAHigherLayer) {
  EXPECT_THAT(HigherLayerIncludes(kRoot), IsEmpty());
}

TEST(LayeringTest, PublicHeadersIncludeOnlyPublicHeaders) {
  EXPECT_THAT(NonPublicIncludesOfPublicHeaders(kRoot), IsEmpty());
}

TEST(LayeringTest, InternalHeadersIncludeNoPrivateHeaders) {
  // The tools and the bindings include internal headers without src/ on
  // their include path.
  EXPECT_THAT(PrivateIncludesOf(kRoot, "internal"), IsEmpty());
}

TEST(LayeringTest, ToolsUseOnlyPublicAndInternalHeaders) {
  EXPECT_THAT(PrivateIncludesOf(kRoot, "tools"), IsEmpty());
}

TEST(LayeringTest, BenchmarksAndFuzzersUseExistingHeadersBelowTorch) {
  // bench/ and fuzz/ are white-box, like tests/: private headers are fine.
  // Two things are not: a header of the LibTorch layer (they link wds::core
  // only), and a header that no longer exists; fuzz/ is compiled only in a
  // clang build with WDS_BUILD_FUZZERS, so a header moved from under a fuzzer
  // would otherwise go unnoticed.
  EXPECT_THAT(MissingOrTorchIncludesOf(kRoot, "bench"), IsEmpty());
  EXPECT_THAT(MissingOrTorchIncludesOf(kRoot, "fuzz"), IsEmpty());
}

TEST(LayeringTest, DownstreamUsesOnlyPublicHeaders) {
  // tests/downstream builds against the installed package, exactly as a user
  // does: only include/wds/ is installed.
  Violations violations;
  std::vector<std::string> seen;
  ForEachInclude(kRoot, "tests/downstream",
                 [&](const fs::path&, const std::string& where, const std::string& include) {
                   seen.push_back(include);
                   if (!fs::exists(kRoot / "include" / include)) violations.push_back(where);
                 });
  EXPECT_THAT(seen, ::testing::Contains("wds/wds.h"));  // read through <wds/wds.h>
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, PythonBindingsUseOnlyPublicAndInternalHeaders) {
  // python/ sits above the library: public headers, the internal helpers, and
  // no LibTorch (torch interop goes through DLPack).
  Violations violations = PrivateIncludesOf(kRoot, "python");
  ForEachInclude(kRoot, "python",
                 [&](const fs::path&, const std::string& where, const std::string& include) {
                   if (StartsWith(include, "wds/torch/")) violations.push_back(where);
                 });
  EXPECT_THAT(violations, IsEmpty());
}

TEST(LayeringTest, PublicHeadersNameNoInternalType) {
  // WorkerContext::Wiring is declared by the public header and defined by an
  // internal one, as a member of a public type: an opaque handle.
  EXPECT_THAT(InternalTypesInPublicHeaders(kRoot), IsEmpty());
}

}  // namespace
}  // namespace wds
