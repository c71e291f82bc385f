// Tests for TarWriter: member layout, reproducibility, compression, errors, and
// independent readers (GNU tar, Python's tarfile).
#include "wds/tar_writer.h"

#include <archive.h>
#include <archive_entry.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::RunShell;
using testing::TempDir;

struct ReadMember {
  std::string name;
  std::string data;
  int mode;
  int64_t mtime;
  std::string uname;
  bool operator==(const ReadMember& o) const {
    return name == o.name && data == o.data && mode == o.mode && mtime == o.mtime &&
           uname == o.uname;
  }
};

// ReadAll lists a tar's members with libarchive, independently of TarReader.
std::vector<ReadMember> ReadAll(const std::string& path) {
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  archive_read_support_filter_all(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 65536), ARCHIVE_OK);
  std::vector<ReadMember> out;
  archive_entry* e;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    std::string data(static_cast<size_t>(archive_entry_size(e)), '\0');
    archive_read_data(a, data.data(), data.size());
    out.push_back({archive_entry_pathname(e), data, static_cast<int>(archive_entry_perm(e)),
                   archive_entry_mtime(e), archive_entry_uname(e)});
  }
  archive_read_free(a);
  return out;
}

Sample MakeSample(std::string key) {
  Sample s;
  s.Set("__key__", std::move(key));
  s.Set("__url__", std::string("ignored"));
  s.Set("txt", std::string("hello"));
  s.Set("cls", int64_t{7});
  s.Set("jpg", Buffer::Copy(std::string("\xff\xd8\x00\x01", 4)));
  return s;
}

TEST(TarWriterTest, WritesFieldsSortedAsKeyDotFieldWithFixedAttributes) {
  TempDir dir;
  std::string path = dir.path() + "/a.tar";
  auto w = TarWriter::Create(path, {.mtime = 1234});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Write(MakeSample("dir/s1")).ok());
  ASSERT_TRUE((*w)->WriteMember("extra.bin", "xyz").ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->bytes_written(), 5 + 1 + 4 + 3);
  EXPECT_THAT(ReadAll(path),
              ElementsAre(ReadMember{"dir/s1.cls", "7", 0444, 1234, "bigdata"},
                          ReadMember{"dir/s1.jpg", std::string("\xff\xd8\x00\x01", 4), 0444, 1234,
                                     "bigdata"},
                          ReadMember{"dir/s1.txt", "hello", 0444, 1234, "bigdata"},
                          ReadMember{"extra.bin", "xyz", 0444, 1234, "bigdata"}));
}

TEST(TarWriterTest, SameSamplesGiveIdenticalBytes) {
  TempDir dir;
  for (const char* name : {"/a.tar", "/b.tar"}) {
    auto w = TarWriter::Create(dir.path() + name);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Write(MakeSample(std::to_string(i))).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::string a = ReadFile(dir.path() + "/a.tar");
  EXPECT_EQ(a, ReadFile(dir.path() + "/b.tar"));
  EXPECT_EQ(a.size() % 512, 0u);
}

TEST(TarWriterTest, GzipAndZstdOutputIsCompressedAndReadable) {
  TempDir dir;
  struct Case {
    TarCompression compression;
    std::string magic;
  };
  for (const Case& c :
       {Case{TarCompression::kGzip, "\x1f\x8b"}, Case{TarCompression::kZstd, "\x28\xb5\x2f\xfd"}}) {
    std::string path = dir.path() + "/c.tar";
    auto w = TarWriter::Create(path, {.compression = c.compression, .level = 3});
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write(MakeSample("k")).ok());
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ(ReadFile(path).substr(0, c.magic.size()), c.magic);
    EXPECT_EQ(ReadAll(path).size(), 3u);
  }
}

TEST(TarWriterTest, SampleWithoutKeyIsInvalidArgument) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  Sample s;
  s.Set("txt", std::string("x"));
  absl::Status status = (*w)->Write(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("a.tar: sample has no __key__"));
}

TEST(TarWriterTest, ArrayFieldIsInvalidArgumentNamingIt) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  Sample s;
  s.Set("__key__", std::string("k"));
  s.Set("img", Array::Allocate(DType::kUInt8, {2, 2}));
  absl::Status status = (*w)->Write(s);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("sample k: field img is an array"));
}

TEST(TarWriterTest, UncreatableFileIsAnErrorNamingThePath) {
  // The system's reason decides the code: here no such directory.
  auto w = TarWriter::Create("/nonexistent-dir/x/a.tar");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("No such file or directory"));
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("/nonexistent-dir/x/a.tar"));
}

TEST(TarWriterTest, WriteAfterCloseIsFailedPrecondition) {
  TempDir dir;
  auto w = TarWriter::Create(dir.path() + "/a.tar");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->WriteMember("a.txt", "x").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TarWriterTest, GnuTarAndPythonTarfileReadTheOutput) {
  TempDir dir;
  std::string path = dir.path() + "/a.tar";
  auto w = TarWriter::Create(path);
  ASSERT_TRUE(w.ok());
  std::string long_key(150, 'k');  // needs a pax header
  ASSERT_TRUE((*w)->Write(MakeSample(long_key)).ok());
  ASSERT_TRUE((*w)->Close().ok());
  std::string listing = dir.path() + "/list.txt";
  ASSERT_EQ(RunShell("tar -tf " + path + " > " + listing), 0);
  EXPECT_EQ(ReadFile(listing), long_key + ".cls\n" + long_key + ".jpg\n" + long_key + ".txt\n");
  std::string py = dir.path() + "/py.txt";
  ASSERT_EQ(RunShell("/usr/bin/python3 -c 'import tarfile,sys; t=tarfile.open(sys.argv[1]); "
                     "print(\",\".join(m.name[-3:]+\"=\"+str(m.size) for m in t))' " +
                     path + " > " + py),
            0);
  EXPECT_EQ(ReadFile(py), "cls=1,jpg=4,txt=5\n");
}

}  // namespace
}  // namespace wds
