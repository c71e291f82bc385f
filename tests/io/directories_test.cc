// MakeDirectories, RemoveTree, BaseName and ParentDirectory: the POSIX
// directory helpers that code linked with LibTorch uses instead of
// std::filesystem (wds/internal/io/directories.h).
#include "wds/internal/io/directories.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "util/test_util.h"

namespace wds {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(DirectoriesTest, MakeDirectoriesCreatesEveryMissingParentAndAcceptsExisting) {
  testing::TempDir dir;
  const std::string deep = dir.path() + "/a/b/c";
  ASSERT_TRUE(MakeDirectories(deep).ok());
  EXPECT_TRUE(IsDirectory(dir.path() + "/a/b"));
  EXPECT_TRUE(IsDirectory(deep));
  EXPECT_TRUE(MakeDirectories(deep).ok());
  EXPECT_TRUE(MakeDirectories(deep + "/").ok());
}

TEST(DirectoriesTest, FileInTheWayIsAnErrorNamingIt) {
  testing::TempDir dir;
  const std::string file = dir.Write("f", "x");
  absl::Status s = MakeDirectories(file + "/sub");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "cannot create directory " + file + "/sub: Not a directory");
  absl::Status same = MakeDirectories(file);
  EXPECT_EQ(same.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(same.message(), file + " exists and is not a directory");
}

TEST(DirectoriesTest, RemoveTreeRemovesEverythingButWhatLinksPointTo) {
  testing::TempDir outside;
  const std::string kept = outside.Write("kept", "keep me");
  testing::TempDir dir;
  const std::string root = dir.path() + "/tree";
  ASSERT_TRUE(MakeDirectories(root + "/x/y").ok());
  std::ofstream(root + "/x/y/file") << "data";
  ASSERT_EQ(symlink(outside.path().c_str(), (root + "/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(root).ok());
  EXPECT_NE(access(root.c_str(), F_OK), 0);
  EXPECT_EQ(access(kept.c_str(), F_OK), 0);
  EXPECT_TRUE(RemoveTree(root).ok());  // already gone
}

TEST(DirectoriesTest, BaseNameAndParentDirectory) {
  EXPECT_EQ(BaseName("a/b/c.tar"), "c.tar");
  EXPECT_EQ(BaseName("c.tar"), "c.tar");
  EXPECT_EQ(BaseName("dir/"), "");
  EXPECT_EQ(ParentDirectory("a/b/c.tar"), "a/b");
  EXPECT_EQ(ParentDirectory("c.tar"), "");
  EXPECT_EQ(ParentDirectory("/c.tar"), "/");
}

}  // namespace
}  // namespace wds
