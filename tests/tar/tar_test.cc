// Tests for the tar layer: TarReader (libarchive), member-name splitting and
// TarSamples grouping, on tars from libarchive's writer, GNU tar and Python's
// tarfile, and on every kind of broken input under each error handler.
#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shards/shard_streams.h"
#include "tar/tar_samples.h"
#include "util/test_util.h"
#include "wds/base/error_kind.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/io/open_ahead.h"
#include "wds/internal/tar/tar_grouping.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::wds::testing::Compression;
using ::wds::testing::FieldText;
using ::wds::testing::Keys;
using ::wds::testing::MakeTar;
using ::wds::testing::RunShell;
using ::wds::testing::TarEntry;
using ::wds::testing::TarFormat;
using ::wds::testing::TempDir;

std::string Message(const absl::Status& status) { return std::string(ToStd(status.message())); }

std::string RandomBytes(size_t size, uint32_t seed = 42) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// kZstdMagic and kGzipMagic stand apart from the names they begin, which a
// hex escape would swallow ("\xfdabc" is one escape).
constexpr char kZstdMagic[] = "\x28\xb5\x2f\xfd";
constexpr char kGzipMagic[] = "\x1f\x8b";

// ---------------------------------------------------------------------------
// TarReader over in-memory streams.

struct Members {
  std::vector<TarMember> members;
  absl::Status status;  // ok when the reader reached the end
};

Members ReadMembers(std::unique_ptr<ByteStream> stream, TarReaderOptions options = {}) {
  Members out;
  absl::StatusOr<std::unique_ptr<TarReader>> reader = TarReader::Open(std::move(stream), options);
  if (!reader.ok()) {
    out.status = reader.status();
    return out;
  }
  while (true) {
    absl::StatusOr<std::optional<TarMember>> member = (*reader)->Next();
    if (!member.ok()) {
      out.status = member.status();
      return out;
    }
    if (!member->has_value()) return out;
    out.members.push_back(std::move(**member));
  }
}

Members ReadMembers(const std::string& data, absl::Status finish = absl::OkStatus()) {
  return ReadMembers(MemoryStream("mem://shard", data, std::move(finish)));
}

// RawHeader is a ustar header of type `type`; its size field uses the
// base-256 encoding that GNU tar writes for sizes beyond 8 GiB.
std::string RawHeader(std::string_view name, uint64_t size, char type = '0') {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), name.size());
  std::memcpy(&h[100], "0000644", 7);
  std::memcpy(&h[108], "0000000", 7);
  std::memcpy(&h[116], "0000000", 7);
  h[124] = static_cast<char>(0x80);
  for (int i = 0; i < 8; ++i) h[128 + i] = static_cast<char>(size >> (56 - 8 * i));
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = type;
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (char c : h) sum += static_cast<unsigned char>(c);
  std::snprintf(&h[148], 8, "%06o", sum);
  return h;
}

std::string PadToBlock(std::string data) {
  data.resize((data.size() + 511) / 512 * 512, '\0');
  return data;
}

// PaxTar is a one-member tar whose name is given by a pax "path" record, as
// any bytes (libarchive's writer refuses names the C locale cannot show).
std::string PaxTar(const std::string& path, const std::string& data) {
  std::string record = " path=" + path + "\n";
  size_t length = record.size() + 1;
  while (std::to_string(length).size() + record.size() != length) ++length;
  record = std::to_string(length) + record;
  return RawHeader("PaxHeaders/x", record.size(), 'x') + PadToBlock(record) +
         RawHeader("placeholder", data.size()) + PadToBlock(data) + std::string(1024, '\0');
}

std::vector<std::string> Names(const std::vector<TarMember>& members) {
  std::vector<std::string> names;
  for (const TarMember& m : members) names.push_back(m.name);
  return names;
}

std::vector<std::string> Contents(const std::vector<TarMember>& members) {
  std::vector<std::string> contents;
  for (const TarMember& m : members) contents.emplace_back(m.data.view());
  return contents;
}

// UstarTar has a fixed layout: one 512-byte header per member, then its data
// padded to 512 bytes (MakeTar's pax adds extended headers).
std::string UstarTar(const std::vector<TarEntry>& entries) {
  return MakeTar(entries, TarFormat::kUstar);
}

// ThreeMembers: 1000 + 1 + 600 bytes, so with plain headers the members
// start at offsets 0, 1536 and 2560 and the data ends at 3584.
std::vector<TarEntry> ThreeMembers() {
  return {{"a.bin", std::string(1000, 'a')}, {"a.cls", "7"}, {"b.bin", std::string(600, 'b')}};
}

TEST(TarReaderTest, ReadsRegularMembersInOrderWithOffsets) {
  Members r = ReadMembers(UstarTar(ThreeMembers()));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
  EXPECT_THAT(Contents(r.members), ElementsAre(std::string(1000, 'a'), "7", std::string(600, 'b')));
  ASSERT_EQ(r.members.size(), 3u);
  EXPECT_EQ(r.members[0].offset, 0);
  EXPECT_EQ(r.members[1].offset, 1536);
  EXPECT_EQ(r.members[2].offset, 2560);
}

TEST(TarReaderTest, GnuLongNames) {
  const std::string name = std::string(300, 'n') + ".jpg";
  Members r = ReadMembers(MakeTar({{name, "x"}, {"b.txt", "y"}}, TarFormat::kGnu));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre(name, "b.txt"));
  EXPECT_THAT(Contents(r.members), ElementsAre("x", "y"));
}

TEST(TarReaderTest, PaxLongNamesAndOffsetOfTheirExtendedHeader) {
  const std::string name = "dir/" + std::string(300, 'p') + ".seg.png";
  const std::string tar = MakeTar({{"a.txt", "1"}, {name, "xyz"}}, TarFormat::kPax);
  Members r = ReadMembers(tar);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.txt", name));
  EXPECT_EQ(r.members[1].data.view(), "xyz");
  // The offset is that of the member's first header block: its pax extended
  // header (type 'x'), not the ustar header after it.
  const int64_t offset = r.members[1].offset;
  ASSERT_GT(offset, 0);
  ASSERT_EQ(offset % 512, 0);
  EXPECT_EQ(tar[static_cast<size_t>(offset) + 156], 'x');
}

TEST(TarReaderTest, UstarPrefixNames) {
  const std::string name = std::string(120, 'd') + "/file.name.jpg";
  Members r = ReadMembers(MakeTar({{name, "u"}}, TarFormat::kUstar));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre(name));
}

TEST(TarReaderTest, NonAsciiPaxNameKeepsItsUtf8Bytes) {
  // The C locale cannot represent the name; libarchive warns, the bytes stay.
  const std::string name = "caf\xc3\xa9/\xc3\xbc.jpg";
  Members r = ReadMembers(PaxTar(name, "u"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre(name));
}

TEST(TarReaderTest, MemberLargerThanTheReadBuffer) {
  const std::string big = RandomBytes(3 << 20);
  Members r = ReadMembers(MakeTar({{"big.bin", big}, {"after.txt", "tail"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.members.size(), 2u);
  EXPECT_TRUE(r.members[0].data.view() == big);
  EXPECT_EQ(r.members[1].data.view(), "tail");
}

TEST(TarReaderTest, ZeroLengthMembers) {
  Members r = ReadMembers(MakeTar({{"a.txt", ""}, {"a.cls", "1"}, {"b.txt", ""}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Contents(r.members), ElementsAre("", "1", ""));
  EXPECT_EQ(r.members[0].data.size(), 0u);
}

TEST(TarReaderTest, SkipsDirectoriesAndSymlinks) {
  Members r = ReadMembers(MakeTar({{"d", "", 'd'},
                                   {"d/a.txt", "A"},
                                   {"d/link.txt", "a.txt", 'l'},
                                   {"e", "", 'd'},
                                   {"e/b.txt", "B"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("d/a.txt", "e/b.txt"));
}

TEST(TarReaderTest, EmptyArchiveHasNoMembers) {
  Members r = ReadMembers(MakeTar({{"d", "", 'd'}}));
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.members, IsEmpty());
}

class TarReaderCompressionTest : public ::testing::TestWithParam<Compression> {};

TEST_P(TarReaderCompressionTest, DecompressesByContent) {
  // The URL has no suffix: the compression is recognised from the bytes.
  const std::string big = RandomBytes(200000);
  Members r =
      ReadMembers(MakeTar({{"a.bin", big}, {"a.txt", "hello"}}, TarFormat::kPax, GetParam()));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.txt"));
  EXPECT_TRUE(r.members[0].data.view() == big);
  EXPECT_EQ(r.members[1].data.view(), "hello");
}

// The read buffer's size changes how the stream is read, never what: the
// smallest buffer gives every member of every compression byte for byte, and
// so does a read started at the second member (seeked or inflated to).
TEST_P(TarReaderCompressionTest, AnyReadBufferSizeReadsTheSameMembers) {
  const std::string big = RandomBytes(200000);
  const std::string tar =
      MakeTar({{"a.bin", big}, {"a.txt", "hello"}, {"b.txt", "b"}}, TarFormat::kPax, GetParam());
  Members whole = ReadMembers(MemoryStream("mem://shard", tar));
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_EQ(whole.members.size(), 3u);
  for (size_t buffer : {size_t{4096}, size_t{5000}, kDefaultReadBufferSize}) {
    SCOPED_TRACE(buffer);
    Members r = ReadMembers(MemoryStream("mem://shard", tar), {.read_buffer_size = buffer});
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.members.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(r.members[i].name, whole.members[i].name);
      EXPECT_EQ(r.members[i].data_offset, whole.members[i].data_offset);
      EXPECT_TRUE(r.members[i].data.view() == whole.members[i].data.view());
    }
    Members tail =
        ReadMembers(MemoryStream("mem://shard", tar),
                    {.start_offset = whole.members[1].offset, .read_buffer_size = buffer});
    ASSERT_TRUE(tail.status.ok()) << tail.status;
    EXPECT_THAT(Names(tail.members), ElementsAre("a.txt", "b.txt"));
  }
}

// A read from a start offset seeks there in a plain tar, and in one whose
// first bytes look like gzip's magic number too.
TEST(TarReaderTest, FirstMemberNamedLikeGzipMagicIsReadFromAStartOffset) {
  const std::string tar =
      UstarTar({{std::string(kGzipMagic) + "x.txt", "first"}, {"b.txt", "second"}});
  Members r = ReadMembers(MemoryStream("mem://shard", tar), {.start_offset = 1024});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("b.txt"));
  EXPECT_THAT(Contents(r.members), ElementsAre("second"));
  ASSERT_EQ(r.members.size(), 1u);
  EXPECT_EQ(r.members[0].offset, 1024);
}

TEST(TarReaderTest, ReadBufferSizeOutOfBoundsIsInvalidArgument) {
  for (size_t size : {size_t{0}, size_t{4095}, (size_t{1} << 30) + 1}) {
    Members r = ReadMembers(MemoryStream("mem://shard", UstarTar(ThreeMembers())),
                            {.read_buffer_size = size});
    EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << size;
    EXPECT_THAT(
        std::string(r.status.message()),
        HasSubstr(absl::StrCat("read_buffer_size ", size, " is not within 4096 to 1073741824")));
  }
}

TEST_P(TarReaderCompressionTest, TruncatedCompressedStreamIsDataLossAtEveryCut) {
  const std::string data = MakeTar({{"a.bin", RandomBytes(30000)},
                                    {"a.txt", std::string(20000, 't')},
                                    {"b.bin", RandomBytes(30000, 7)}},
                                   TarFormat::kPax, GetParam());
  std::vector<size_t> cuts;
  for (size_t k = 1; k < 16; ++k) cuts.push_back(data.size() * k / 16);
  // The tail: the compressed end-of-archive blocks and the stream's trailer.
  for (size_t back = 1; back <= 48; ++back) cuts.push_back(data.size() - back);
  for (size_t cut : cuts) {
    Members r = ReadMembers(data.substr(0, cut));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss)
        << "cut at " << cut << " of " << data.size() << ": " << r.status;
    EXPECT_THAT(Message(r.status), HasSubstr("mem://shard")) << "cut at " << cut;
    EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable) << "cut at " << cut;
    EXPECT_EQ(ShardUrlOf(r.status), "mem://shard") << "cut at " << cut;
  }
}

TEST_P(TarReaderCompressionTest, CutAfterALongZeroTailIsDataLoss) {
  // Large records (tar -b 2048) leave up to 1 MiB of zeros after the
  // end-of-archive blocks; the stream is still checked to its very end.
  const std::string data =
      Compress(UstarTar(ThreeMembers()) + std::string(1 << 20, '\0'), GetParam());
  ASSERT_TRUE(ReadMembers(data).status.ok());
  for (size_t back : {1, 4, 9, 17}) {
    Members r = ReadMembers(data.substr(0, data.size() - back));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss) << "cut " << back << ": " << r.status;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCompressions, TarReaderCompressionTest,
                         ::testing::Values(Compression::kGzip, Compression::kBzip2,
                                           Compression::kXz, Compression::kZstd));

TEST(TarReaderTest, TruncatedMemberIsDataLossNamingMemberAndOffset) {
  const std::string tar = UstarTar(ThreeMembers());
  Members r = ReadMembers(tar.substr(0, 2560 + 512 + 100));  // 100 bytes into b.bin
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: member b.bin at offset 2560"));
  EXPECT_THAT(Message(r.status), HasSubstr("truncated"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, CutBetweenMembersIsDataLoss) {
  const std::string tar = UstarTar(ThreeMembers());
  Members r = ReadMembers(tar.substr(0, 2560));  // ends right after a.cls
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: truncated"));
  EXPECT_THAT(Message(r.status), HasSubstr("after member a.cls"));
  EXPECT_THAT(Message(r.status), HasSubstr("without an end-of-archive block"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, CutInsideThePaddingOfTheLastMemberIsDataLoss) {
  const std::string tar = UstarTar(ThreeMembers());
  Members r = ReadMembers(tar.substr(0, 2560 + 512 + 600 + 10));
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("after member b.bin"));
}

TEST(TarReaderTest, CutInsideAHeaderIsDataLoss) {
  const std::string tar = UstarTar(ThreeMembers());
  Members r = ReadMembers(tar.substr(0, 2560 + 100));
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: truncated or corrupt tar at offset 2560"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, CorruptHeaderChecksumIsDataLoss) {
  std::string tar = UstarTar(ThreeMembers());
  tar[1536 + 10] ^= 0x55;  // inside the name of a.cls's header
  Members r = ReadMembers(tar);
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("at offset 1536 after member a.bin"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, RandomBytesAreInvalidArgument) {
  Members r = ReadMembers(RandomBytes(4096));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: not a tar archive"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, TextFileIsInvalidArgument) {
  Members r = ReadMembers("hello world\nthis is a text file, not a tar\n");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: not a tar archive"));
}

TEST(TarReaderTest, EmptyStreamIsInvalidArgument) {
  Members r = ReadMembers("");
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(r.status), "mem://shard: not a tar archive (no data)");
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, EmptyStreamReportsItsFinishErrorInstead) {
  absl::Status failed = WithErrorKind(absl::DataLossError("cmd: exit status 22"),
                                      ErrorKind::kCommandFailed, "mem://shard");
  Members r = ReadMembers("", failed);
  EXPECT_EQ(r.status, failed);
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kCommandFailed);
}

TEST(TarReaderTest, PipeCommandFailingWithoutOutputIsItsExitStatus) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl("pipe:echo gone >&2; exit 22");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Members r = ReadMembers(std::move(*stream));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Message(r.status),
            "pipe:echo gone >&2; exit 22: command failed with exit status 22 (its output may be "
            "incomplete); stderr: gone\n");
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kCommandFailed);
}

TEST(TarReaderTest, CompressedTextIsInvalidArgument) {
  TempDir dir;
  const std::string path = dir.Write("text", std::string(5000, 'z'));
  ASSERT_EQ(RunShell("gzip -n " + path), 0);
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(path + ".gz");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Members r = ReadMembers(std::move(*stream));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status), HasSubstr(path + ".gz: not a tar archive"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
  EXPECT_EQ(ShardUrlOf(r.status), path + ".gz");
}

// CorruptGzip overwrites part of the deflate data of a tar.gz.
std::string CorruptGzip(std::string gz) {
  for (size_t i = 20; i < 60; ++i) gz[i] = '\xff';
  return gz;
}

TEST(TarReaderTest, CorruptGzipIsDataLoss) {
  const std::string gz = MakeTar(ThreeMembers(), TarFormat::kPax, Compression::kGzip);
  Members r = ReadMembers(CorruptGzip(gz));
  EXPECT_THAT(r.members, IsEmpty());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: corrupt gzip data at compressed offset"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kShardUnreadable);
}

TEST(TarReaderTest, CorruptStoredGzipBlockIsCaughtByTheChecksum) {
  // Random bytes are stored uncompressed: changing them breaks no deflate
  // code, only the member's CRC-32, which is checked at its end.
  const std::string big = RandomBytes(300000);
  std::string gz = MakeTar({{"a.bin", big}, {"b.bin", big}}, TarFormat::kPax, Compression::kGzip);
  for (size_t i = gz.size() * 3 / 4; i < gz.size() * 3 / 4 + 64; ++i) gz[i] = '\x00';
  Members r = ReadMembers(gz);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss) << r.status;
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: corrupt gzip data at compressed offset"));
  EXPECT_THAT(Message(r.status), HasSubstr("incorrect data check"));
}

TEST(TarReaderTest, WithoutDataMembersCarrySizesAndDataOffsets) {
  Members r =
      ReadMembers(MemoryStream("mem://shard", UstarTar(ThreeMembers())), {.read_data = false});
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.members.size(), 3u);
  const std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> expected = {
      {"a.bin", 0, 512, 1000}, {"a.cls", 1536, 2048, 1}, {"b.bin", 2560, 3072, 600}};
  for (size_t i = 0; i < 3; ++i) {
    const TarMember& m = r.members[i];
    EXPECT_EQ(std::make_tuple(m.name, m.offset, m.data_offset, m.size), expected[i]);
    EXPECT_TRUE(m.data.empty()) << m.name;
  }
}

TEST(TarReaderTest, WithDataMembersCarryTheSameOffsetsAndSizes) {
  Members r = ReadMembers(UstarTar(ThreeMembers()));
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.members.size(), 3u);
  EXPECT_EQ(r.members[1].data_offset, 2048);
  EXPECT_EQ(r.members[2].size, 600);
  EXPECT_EQ(r.members[2].data.size(), 600u);
}

TEST(TarReaderTest, WithoutDataSkipsMemberDataInsteadOfReadingIt) {
  const std::string big = RandomBytes(4 << 20);
  const std::string tar = UstarTar({{"a.bin", big}, {"b.bin", big}, {"c.bin", big}});
  int64_t read = 0;
  int64_t skipped = 0;
  Members r = ReadMembers(
      std::make_unique<testing::CountingStream>(MemoryStream("mem://shard", tar), &read, &skipped),
      {.read_data = false});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "b.bin", "c.bin"));
  EXPECT_EQ(read + skipped, static_cast<int64_t>(tar.size()));
  EXPECT_LT(read, static_cast<int64_t>(tar.size()) / 2);
}

TEST(TarReaderTest, WantSkipsTheDataOfTheMembersItRefuses) {
  const std::string big = RandomBytes(4 << 20);
  const std::string tar = UstarTar({{"a.bin", big}, {"a.txt", "A"}, {"b.bin", big}});
  int64_t read = 0;
  int64_t skipped = 0;
  std::vector<std::string> asked;
  TarReaderOptions options;
  options.want = [&](std::string_view name) {
    asked.emplace_back(name);
    return name != "a.bin";
  };
  Members r = ReadMembers(
      std::make_unique<testing::CountingStream>(MemoryStream("mem://shard", tar), &read, &skipped),
      options);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(asked, ElementsAre("a.bin", "a.txt", "b.bin"));
  ASSERT_THAT(Names(r.members), ElementsAre("a.bin", "a.txt", "b.bin"));
  EXPECT_TRUE(r.members[0].data.empty());
  EXPECT_EQ(r.members[0].size, 4 << 20);
  EXPECT_EQ(r.members[1].data.view(), "A");
  EXPECT_EQ(r.members[2].data.view(), big);
  EXPECT_EQ(read + skipped, static_cast<int64_t>(tar.size()));
  EXPECT_LT(read, static_cast<int64_t>(tar.size()) * 2 / 3);
}

TEST(TarReaderTest, WithoutDataATruncatedMemberIsDataLossNamingIt) {
  const std::string tar = UstarTar(ThreeMembers());
  Members r =
      ReadMembers(MemoryStream("mem://shard", tar.substr(0, 3072 + 300)), {.read_data = false});
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: member b.bin at offset 2560: truncated"));
}

TEST(TarReaderTest, WithoutDataGzipChecksumsAreStillChecked) {
  const std::string big = RandomBytes(300000);
  std::string gz = MakeTar({{"a.bin", big}, {"b.bin", big}}, TarFormat::kPax, Compression::kGzip);
  for (size_t i = gz.size() * 3 / 4; i < gz.size() * 3 / 4 + 64; ++i) gz[i] = '\x00';
  Members r = ReadMembers(MemoryStream("mem://shard", gz), {.read_data = false});
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss) << r.status;
  EXPECT_THAT(Message(r.status), HasSubstr("incorrect data check"));
}

TEST(TarReaderTest, ConcatenatedGzipMembersAreOneStream) {
  const std::string tar = UstarTar(ThreeMembers());
  TempDir dir;
  const std::string path = dir.Write("t.tar", tar);
  ASSERT_EQ(RunShell("head -c 2000 " + path + " | gzip -n > " + path + ".gz && tail -c +2001 " +
                     path + " | gzip -n >> " + path + ".gz"),
            0);
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = OpenUrl(path + ".gz");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Members r = ReadMembers(std::move(*stream));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
}

TEST(TarReaderTest, FinishErrorAfterACompleteTarIsReturnedAfterTheMembers) {
  Members r = ReadMembers(UstarTar(ThreeMembers()), absl::DataLossError("cmd: exit status 1"));
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Message(r.status), "cmd: exit status 1");
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kUnspecified);  // the stream's, not the reader's
}

// EventStream serves `data` in small reads, fails once `fail_at` bytes were
// served (if set), and records whether Finish came after the
// last byte was read.
class EventStream : public ByteStream {
 public:
  EventStream(std::string data, std::optional<size_t> fail_at, bool* finished_at_end)
      : data_(std::move(data)), fail_at_(fail_at), finished_at_end_(finished_at_end) {}
  absl::StatusOr<size_t> Read(void* buffer, size_t size) override {
    if (fail_at_.has_value() && position_ >= *fail_at_) {
      absl::Status error = absl::UnavailableError("mem://flaky: connection reset");
      error.SetPayload("wds-test/origin", absl::Cord("flaky stream"));
      return error;
    }
    size_t n = std::min({size, data_.size() - position_, size_t{1000},
                         fail_at_.value_or(data_.size()) - position_});
    std::memcpy(buffer, data_.data() + position_, n);
    position_ += n;
    return n;
  }
  absl::Status Finish() override {
    *finished_at_end_ = position_ == data_.size();
    return absl::OkStatus();
  }
  const std::string& url() const override { return url_; }

 private:
  std::string url_ = "mem://flaky";
  std::string data_;
  std::optional<size_t> fail_at_;
  size_t position_ = 0;
  bool* finished_at_end_;
};

TEST(TarReaderTest, StreamErrorKeepsItsCodeAndPayloadsAndSaysWhere) {
  bool finished = false;
  Members r = ReadMembers(std::make_unique<EventStream>(UstarTar(ThreeMembers()), 3500, &finished));
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(r.status),
              HasSubstr("mem://flaky: connection reset (member b.bin at offset 2560)"));
  // What the opener attached for its callers (the Python bindings' URL and
  // errno) survives the reader.
  EXPECT_EQ(r.status.GetPayload("wds-test/origin"), absl::Cord("flaky stream"));
  EXPECT_EQ(ErrorKindOf(r.status), ErrorKind::kUnspecified);
  EXPECT_FALSE(finished);
}

TEST(TarReaderTest, TrailingBytesAreDrainedBeforeFinish) {
  bool finished_at_end = false;
  const std::string gz = MakeTar(ThreeMembers(), TarFormat::kPax, Compression::kGzip) +
                         std::string(100000, 'x');  // gzip(1) ignores trailing garbage too
  Members r = ReadMembers(std::make_unique<EventStream>(gz, std::nullopt, &finished_at_end));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.bin", "a.cls", "b.bin"));
  EXPECT_TRUE(finished_at_end);
}

TEST(TarReaderTest, ConcatenatedTarsAreReadWhole) {
  const std::string tar = MakeTar({{"a.txt", "A"}}) + MakeTar({{"b.txt", "B"}});
  Members r = ReadMembers(tar);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Names(r.members), ElementsAre("a.txt", "b.txt"));
}

TEST(TarReaderTest, GarbageAfterTheEndOfArchiveIsDataLoss) {
  Members r = ReadMembers(MakeTar({{"a.txt", "A"}}) + RandomBytes(1024));
  EXPECT_THAT(Names(r.members), ElementsAre("a.txt"));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(r.status), HasSubstr("mem://shard: truncated or corrupt tar at offset"));
}

TEST(TarReaderTest, MemberAboveMaxMemberSizeIsResourceExhaustedBeforeAllocating) {
  // A header claiming 1 TiB (GNU base-256 size), with 4 KiB of data behind it.
  const std::string tar = UstarTar({{"a.txt", "A"}}).substr(0, 1024) +
                          RawHeader("huge.bin", uint64_t{1} << 40) + std::string(4096, 'h');
  for (bool read_data : {true, false}) {
    Members r = ReadMembers(MemoryStream("mem://shard", tar), {.read_data = read_data});
    EXPECT_THAT(Names(r.members), ElementsAre("a.txt"));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(Message(r.status),
                HasSubstr("mem://shard: member huge.bin at offset 1024 is 1099511627776 bytes, "
                          "more than max_member_size 1073741824"));
  }
}

TEST(TarReaderTest, MaxMemberSizeIsAnOption) {
  const std::string tar = UstarTar({{"a.txt", "A"}, {"b.bin", std::string(5000, 'b')}});
  Members small = ReadMembers(MemoryStream("mem://shard", tar), {.max_member_size = 4999});
  EXPECT_THAT(Names(small.members), ElementsAre("a.txt"));
  EXPECT_THAT(Message(small.status), HasSubstr("b.bin at offset 1024 is 5000 bytes, more than "
                                               "max_member_size 4999"));
  Members enough = ReadMembers(MemoryStream("mem://shard", tar), {.max_member_size = 5000});
  EXPECT_TRUE(enough.status.ok()) << enough.status;
  EXPECT_THAT(Names(enough.members), ElementsAre("a.txt", "b.bin"));
}

TEST(TarReaderTest, EndAndErrorsAreSticky) {
  absl::StatusOr<std::unique_ptr<TarReader>> ok =
      TarReader::Open(MemoryStream("mem://a", MakeTar({{"a.txt", "A"}})));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE((*ok)->Next()->has_value());
  EXPECT_FALSE((*ok)->Next()->has_value());
  EXPECT_FALSE((*ok)->Next()->has_value());
  EXPECT_EQ((*ok)->url(), "mem://a");

  absl::StatusOr<std::unique_ptr<TarReader>> bad = TarReader::Open(MemoryStream("mem://b", "junk"));
  ASSERT_TRUE(bad.ok());
  absl::Status first = (*bad)->Next().status();
  EXPECT_EQ(first.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*bad)->Next().status(), first);
}

// ---------------------------------------------------------------------------
// Member names.

std::optional<std::pair<std::string, std::string>> Split(std::string_view name) {
  std::optional<MemberName> kf = SplitMemberName(name);
  if (!kf.has_value()) return std::nullopt;
  return std::make_pair(std::string(kf->key), std::string(kf->field));
}

using KF = std::pair<std::string, std::string>;

TEST(SplitMemberNameTest, SplitsAtTheFirstDotOfTheBasename) {
  EXPECT_EQ(Split("a.jpg"), KF("a", "jpg"));
  EXPECT_EQ(Split("dir/a.seg.png"), KF("dir/a", "seg.png"));
  EXPECT_EQ(Split("/a.b"), KF("/a", "b"));
  EXPECT_EQ(Split("a b.c d"), KF("a b", "c d"));
  EXPECT_EQ(Split("A/B.JPG"), KF("A/B", "JPG"));  // lower-casing is the grouper's job
  EXPECT_EQ(Split("n01440764/n01440764_10026.JPEG"), KF("n01440764/n01440764_10026", "JPEG"));
}

TEST(SplitMemberNameTest, DotsInDirectoryNames) {
  EXPECT_EQ(Split("dir.x/a.b.c"), KF("dir.x/a", "b.c"));
  EXPECT_EQ(Split("a/b.c/d.e"), KF("a/b.c/d", "e"));
}

TEST(SplitMemberNameTest, NoDotInTheBasenameIsNoSplit) {
  EXPECT_EQ(Split("a/b"), std::nullopt);
  EXPECT_EQ(Split("a.b/c"), std::nullopt);
  EXPECT_EQ(Split("a/b/c"), std::nullopt);
  EXPECT_EQ(Split("abc"), std::nullopt);
  EXPECT_EQ(Split(""), std::nullopt);
}

TEST(SplitMemberNameTest, TrailingAndDoubleDots) {
  EXPECT_EQ(Split("a."), KF("a", ""));
  EXPECT_EQ(Split("a/."), KF("a/", ""));
  EXPECT_EQ(Split("a..b"), KF("a", ".b"));
  EXPECT_EQ(Split(".."), std::nullopt);
}

// The reference's regex backtracks into the directory part when the basename
// starts with a dot; these pin its exact results.
TEST(SplitMemberNameTest, LeadingDotBasenameFollowsTheReferenceRegex) {
  EXPECT_EQ(Split(".hidden"), std::nullopt);
  EXPECT_EQ(Split("dir/.hidden"), KF("dir/", "hidden"));
  EXPECT_EQ(Split("x.y/dir/.hidden"), KF("x.y/dir/", "hidden"));
  EXPECT_EQ(Split("x/dir.z/.hidden"), std::nullopt);
  EXPECT_EQ(Split("dir//.hidden"), KF("dir//", "hidden"));
  EXPECT_EQ(Split("/.hidden"), KF("/", "hidden"));
}

TEST(SplitMemberNameTest, NewlinesFollowTheReferenceRegex) {
  // Python's '.' does not match a newline, '[^.]' and '[^/]' do.
  EXPECT_EQ(Split("nl\nx/a.b"), KF("nl\nx/a", "b"));
  EXPECT_EQ(Split("x\ny/.h"), KF("x\ny/", "h"));
  EXPECT_EQ(Split("a.b\n"), KF("a", "b\n"));
}

TEST(IsWritableKeyTest, BasenameMustBeNonEmptyAndDotFree) {
  for (std::string_view key : {"a", "dir/a", "dir.x/a", "a b", "/a", "a/b/c"}) {
    EXPECT_TRUE(IsWritableKey(key)) << key;
    // What the writers accept reads back under the same key.
    EXPECT_EQ(Split(std::string(key) + ".seg.jpg"), KF(std::string(key), "seg.jpg")) << key;
  }
  for (std::string_view key : {"", "a.b", "dir/a.b", "dir/", "/", ".hidden", "dir/.hidden", "a."}) {
    EXPECT_FALSE(IsWritableKey(key)) << key;
  }
}

TEST(IsMetadataNameTest, TopLevelDunderNames) {
  EXPECT_TRUE(IsMetadataName("__key__"));
  EXPECT_TRUE(IsMetadataName("__"));
  EXPECT_TRUE(IsMetadataName("___"));
  EXPECT_TRUE(IsMetadataName("____"));
  EXPECT_TRUE(IsMetadataName("__x__\n"));
  EXPECT_FALSE(IsMetadataName("__x__.json"));
  EXPECT_FALSE(IsMetadataName("__a__b"));
  EXPECT_FALSE(IsMetadataName("__x"));
  EXPECT_FALSE(IsMetadataName("x__"));
  EXPECT_FALSE(IsMetadataName("a.jpg"));
}

TEST(IsMetadataNameTest, DunderDirectories) {
  EXPECT_TRUE(IsMetadataName("__x__/y.jpg"));
  EXPECT_TRUE(IsMetadataName("__x__/"));
  EXPECT_TRUE(IsMetadataName("____/x"));
  EXPECT_TRUE(IsMetadataName("__x__y__/z"));
  EXPECT_FALSE(IsMetadataName("__/x"));
  EXPECT_FALSE(IsMetadataName("__a/b__/c"));
  EXPECT_FALSE(IsMetadataName("a/__x__"));
  EXPECT_FALSE(IsMetadataName("a/__x__/b.c"));
}

// ---------------------------------------------------------------------------
// ShardSampleReader.

struct Grouped {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> fields;
  std::vector<std::string> skipped;
  absl::Status status;
};

Grouped ReadGrouped(const std::string& tar, std::function<bool(const TarMember&)> on_skipped = {}) {
  Grouped out;
  ShardSampleReaderOptions options;
  options.on_skipped = [&out, on_skipped](const TarMember& m) {
    out.skipped.push_back(m.name);
    return on_skipped ? on_skipped(m) : true;
  };
  absl::StatusOr<std::unique_ptr<ShardSampleReader>> reader =
      ShardSampleReader::Open(MemoryStream("mem://shard", tar), std::move(options));
  if (!reader.ok()) {
    out.status = reader.status();
    return out;
  }
  while (true) {
    absl::StatusOr<std::optional<GroupedSample>> s = (*reader)->Next();
    if (!s.ok() || !s->has_value()) {
      out.status = s.status();
      return out;
    }
    out.keys.push_back((*s)->key);
    out.fields.emplace_back();
    for (const SampleMember& m : (*s)->members) out.fields.back().push_back(m.field);
  }
}

TEST(ShardSampleReaderTest, GroupsConsecutiveKeysKeepingFieldCaseAndRepeats) {
  Grouped g = ReadGrouped(
      MakeTar({{"a.JPG", "1"}, {"a.cls", "2"}, {"a.cls", "3"}, {"d/b.x.y", "4"}, {"a.txt", "5"}}));
  ASSERT_TRUE(g.status.ok()) << g.status;
  EXPECT_THAT(g.keys, ElementsAre("a", "d/b", "a"));
  EXPECT_THAT(g.fields, ElementsAre(ElementsAre("JPG", "cls", "cls"), ElementsAre("x.y"),
                                    ElementsAre("txt")));
}

TEST(ShardSampleReaderTest, SkippedMembersAreReportedAndMayEndTheShard) {
  const std::string tar =
      MakeTar({{"a.cls", "1"}, {"__meta__", "m"}, {"README", "r"}, {"b.cls", "2"}, {"c.cls", "3"}});
  Grouped all = ReadGrouped(tar);
  ASSERT_TRUE(all.status.ok()) << all.status;
  EXPECT_THAT(all.keys, ElementsAre("a", "b", "c"));
  EXPECT_THAT(all.skipped, ElementsAre("__meta__", "README"));
  Grouped stopped = ReadGrouped(tar, [](const TarMember& m) { return m.name != "README"; });
  ASSERT_TRUE(stopped.status.ok()) << stopped.status;
  EXPECT_THAT(stopped.keys, IsEmpty());  // a's sample was still open when README ended it
  EXPECT_THAT(stopped.skipped, ElementsAre("__meta__", "README"));
}

TEST(ShardSampleReaderTest, ErrorInAnotherKeyComesAfterTheCompletedSample) {
  const std::string tar = UstarTar(ThreeMembers());
  Grouped g = ReadGrouped(tar.substr(0, 3072 + 100));  // b.bin's data is cut
  EXPECT_THAT(g.keys, ElementsAre("a"));
  EXPECT_EQ(g.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(g.status), HasSubstr("member b.bin at offset 2560"));
}

TEST(ShardSampleReaderTest, ErrorInItsOwnKeyDropsTheSample) {
  const std::string tar = UstarTar(ThreeMembers());
  Grouped g = ReadGrouped(tar.substr(0, 2048 - 100));  // a.cls's header is cut
  EXPECT_THAT(g.keys, IsEmpty());
  EXPECT_EQ(g.status.code(), absl::StatusCode::kDataLoss);
}

// ---------------------------------------------------------------------------
// TarSamples.

class ListUrls : public UrlStream {
 public:
  explicit ListUrls(std::vector<std::string> urls, absl::Status then = absl::OkStatus())
      : urls_(std::move(urls)), then_(std::move(then)) {}
  absl::StatusOr<std::optional<ShardSlice>> Next() override {
    if (next_ < urls_.size()) return ShardSlice{urls_[next_++]};
    if (!then_.ok()) return then_;
    return std::nullopt;
  }

 private:
  std::vector<std::string> urls_;
  absl::Status then_;
  size_t next_ = 0;
};

Opener MemoryOpener(std::map<std::string, std::string> shards) {
  auto shared = std::make_shared<const std::map<std::string, std::string>>(std::move(shards));
  return [shared](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    auto it = shared->find(std::string(url));
    if (it == shared->end()) return absl::NotFoundError(Cat(url, ": no such shard"));
    return MemoryStream(it->first, it->second);
  };
}

struct Outcome {
  std::vector<Sample> samples;
  absl::Status status;  // ok at a clean end
};

Outcome ReadSamples(SampleStream& stream) {
  Outcome out;
  while (true) {
    SampleResult item = stream.Next();
    if (!item.ok()) {
      out.status = item.status();
      return out;
    }
    if (!item->has_value()) return out;
    out.samples.push_back(std::move(**item));
  }
}

Outcome ReadShards(std::map<std::string, std::string> shards, std::vector<std::string> urls,
                   Handler handler = Handler::kReraise, WorkerContext ctx = {}) {
  std::unique_ptr<SampleStream> stream = TarSamples(std::make_unique<ListUrls>(std::move(urls)),
                                                    MemoryOpener(std::move(shards)), handler, ctx);
  return ReadSamples(*stream);
}

Outcome ReadOne(const std::string& tar) { return ReadShards({{"s.tar", tar}}, {"s.tar"}); }

std::vector<std::string> FieldNames(const Sample& sample) {
  std::vector<std::string> names;
  for (const auto& [name, value] : sample) names.push_back(name);
  return names;
}

TEST(TarSamplesTest, GroupsConsecutiveMembersInTarOrder) {
  Outcome r = ReadOne(MakeTar(
      {{"a.jpg", "J1"}, {"a.cls", "1"}, {"a.json", "{}"}, {"b.cls", "2"}, {"b.jpg", "J2"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "cls", "json"));
  EXPECT_THAT(FieldNames(r.samples[1]), ElementsAre("__key__", "__url__", "cls", "jpg"));
  EXPECT_EQ(*r.samples[0].GetString("__key__"), "a");
  EXPECT_EQ(*r.samples[0].GetString("__url__"), "s.tar");
  EXPECT_EQ(r.samples[0].GetBytes("jpg")->view(), "J1");
  EXPECT_EQ(r.samples[0].GetBytes("json")->view(), "{}");
  EXPECT_EQ(r.samples[1].GetBytes("cls")->view(), "2");
}

TEST(TarSamplesTest, FieldBuffersAreNotShared) {
  Outcome r = ReadOne(MakeTar({{"a.jpg", "J1"}, {"a.cls", "1"}}));
  ASSERT_EQ(r.samples.size(), 1u);
  // The sample holds the only reference to each member's storage.
  EXPECT_EQ(r.samples[0].GetBytes("jpg")->use_count(), 1);
}

TEST(TarSamplesTest, KeyWithDotInDirectory) {
  Outcome r = ReadOne(MakeTar({{"dir.x/a.b.c", "1"}, {"dir.x/a.jpg", "2"}}));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].key(), "dir.x/a");
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "b.c", "jpg"));
}

TEST(TarSamplesTest, UpperCaseExtensionsAreLowerCasedKeysKeepCase) {
  Outcome r = ReadOne(MakeTar({{"Dir/ImG.JPG", "1"}, {"Dir/ImG.Seg.PNG", "2"}}));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_EQ(r.samples[0].key(), "Dir/ImG");
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "seg.png"));
}

TEST(TarSamplesTest, UpperAndLowerCaseOfOneFieldAreDuplicates) {
  Outcome r = ReadOne(MakeTar({{"a.jpg", "1"}, {"a.JPG", "2"}}));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status), HasSubstr("duplicate field 'jpg' in sample a (member a.JPG"));
}

TEST(TarSamplesTest, NamesWithoutDotAreSkipped) {
  Outcome r =
      ReadOne(MakeTar({{"README", "x"}, {"a.jpg", "1"}, {"dir/noext", "y"}, {"a.cls", "2"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a"));
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "cls"));
}

TEST(TarSamplesTest, MetadataNamesAreSkipped) {
  Outcome r = ReadOne(MakeTar({{"__meta__", "m"},
                               {"__index__/a.json", "i"},
                               {"a.jpg", "1"},
                               {"__info__", "n"},
                               {"a.cls", "2"},
                               {"__x__.json", "kept: not a metadata name"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "__x__"));
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "cls"));
}

TEST(TarSamplesTest, MemberNamedLikeAMetadataFieldIsADuplicate) {
  Outcome r = ReadOne(MakeTar({{"a.jpg", "1"}, {"a.__key__", "2"}}));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status), HasSubstr("duplicate field '__key__' in sample a"));
}

TEST(TarSamplesTest, NonAdjacentRepeatedKeyGivesTwoSamples) {
  Outcome r = ReadOne(MakeTar({{"a.jpg", "1"}, {"b.jpg", "2"}, {"a.cls", "3"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b", "a"));
  EXPECT_THAT(FieldNames(r.samples[2]), ElementsAre("__key__", "__url__", "cls"));
}

TEST(TarSamplesTest, SamplesNeverSpanShards) {
  Outcome r =
      ReadShards({{"1.tar", MakeTar({{"a.jpg", "1"}})}, {"2.tar", MakeTar({{"a.cls", "2"}})}},
                 {"1.tar", "2.tar"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg"));
  EXPECT_THAT(FieldNames(r.samples[1]), ElementsAre("__key__", "__url__", "cls"));
  EXPECT_EQ(r.samples[0].url(), "1.tar");
  EXPECT_EQ(r.samples[1].url(), "2.tar");
}

TEST(TarSamplesTest, ZeroLengthMembersGiveEmptyFields) {
  Outcome r = ReadOne(MakeTar({{"a.txt", ""}, {"a.cls", "1"}}));
  ASSERT_EQ(r.samples.size(), 1u);
  ASSERT_NE(r.samples[0].GetBytes("txt"), nullptr);
  EXPECT_TRUE(r.samples[0].GetBytes("txt")->empty());
}

TEST(TarSamplesTest, DirectoriesAndSymlinksAreSkipped) {
  Outcome r = ReadOne(
      MakeTar({{"d", "", 'd'}, {"d/a.jpg", "1"}, {"d/a.txt", "a.jpg", 'l'}, {"d/a.cls", "2"}}));
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "cls"));
}

TEST(TarSamplesTest, LargeMemberIsReadWhole) {
  const std::string big = RandomBytes(3 << 20);
  Outcome r = ReadOne(MakeTar({{"a.bin", big}, {"a.cls", "1"}}));
  ASSERT_EQ(r.samples.size(), 1u);
  EXPECT_TRUE(FieldText(r.samples[0], "bin") == big);
}

TEST(TarSamplesTest, ShardWithoutSamplesYieldsNothingAndTheNextShardIsRead) {
  Outcome r = ReadShards(
      {{"1.tar", MakeTar({{"d", "", 'd'}, {"README", "x"}})}, {"2.tar", MakeTar({{"a.jpg", "1"}})}},
      {"1.tar", "2.tar"});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a"));
}

class TarSamplesFormatTest : public ::testing::TestWithParam<TarFormat> {};

TEST_P(TarSamplesFormatTest, LongNamesGroup) {
  // ustar holds at most 155 + 100 characters split at a '/'.
  const std::string dir = std::string(GetParam() == TarFormat::kUstar ? 120 : 200, 'd');
  Outcome r =
      ReadOne(MakeTar({{dir + "/k.jpg", "1"}, {dir + "/k.cls", "2"}, {"b.jpg", "3"}}, GetParam()));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre(dir + "/k", "b"));
  EXPECT_EQ(FieldText(r.samples[0], "cls"), "2");
}

INSTANTIATE_TEST_SUITE_P(AllFormats, TarSamplesFormatTest,
                         ::testing::Values(TarFormat::kUstar, TarFormat::kPax, TarFormat::kGnu));

class TarSamplesCompressionTest : public ::testing::TestWithParam<Compression> {};

TEST_P(TarSamplesCompressionTest, Groups) {
  Outcome r = ReadOne(
      MakeTar({{"a.jpg", "1"}, {"a.cls", "2"}, {"b.jpg", "3"}}, TarFormat::kPax, GetParam()));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b"));
  EXPECT_EQ(FieldText(r.samples[1], "jpg"), "3");
}

INSTANTIATE_TEST_SUITE_P(AllCompressions, TarSamplesCompressionTest,
                         ::testing::Values(Compression::kNone, Compression::kGzip,
                                           Compression::kBzip2, Compression::kXz,
                                           Compression::kZstd));

// A plain tar's first bytes are its first member's name, which may begin
// like a compressor's magic number; the valid header around it says tar.
// MagicNamedTar holds two samples, the first keyed `key`; ustar, so that no
// extended header comes before the name.
std::string MagicNamedTar(const std::string& key, Compression compression = Compression::kNone) {
  return MakeTar({{key + ".txt", "first"}, {key + ".cls", "1"}, {"b.txt", "second"}},
                 TarFormat::kUstar, compression);
}

void ExpectMagicNamedSamples(const Outcome& r, const std::string& key) {
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre(key, "b"));
  ASSERT_EQ(r.samples.size(), 2u);
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "txt", "cls"));
  EXPECT_EQ(FieldText(r.samples[0], "txt"), "first");
  EXPECT_EQ(FieldText(r.samples[0], "cls"), "1");
  EXPECT_EQ(FieldText(r.samples[1], "txt"), "second");
}

TEST(TarSamplesTest, FirstMemberNamedLikeZstdMagicIsAPlainTar) {
  const std::string key = std::string(kZstdMagic) + "abc";
  ExpectMagicNamedSamples(ReadOne(MagicNamedTar(key)), key);
}

TEST(TarSamplesTest, FirstMemberNamedLikeBzip2MagicIsAPlainTar) {
  // The whole bzip2 stream header: libarchive's bidder checks "1AY&SY" too.
  ExpectMagicNamedSamples(ReadOne(MagicNamedTar("BZh91AY&SY")), "BZh91AY&SY");
}

TEST(TarSamplesTest, FirstMemberNamedLikeGzipMagicIsAPlainTar) {
  const std::string key = std::string(kGzipMagic) + "x";
  ExpectMagicNamedSamples(ReadOne(MagicNamedTar(key)), key);
}

TEST(TarSamplesTest, GzippedTarWhoseFirstMemberIsNamedLikeZstdMagic) {
  // The inflated tar is judged by the same rule as a plain one.
  const std::string key = std::string(kZstdMagic) + "abc";
  ExpectMagicNamedSamples(ReadOne(MagicNamedTar(key, Compression::kGzip)), key);
}

TEST(TarSamplesTest, DuplicateFieldDropsEveryMemberOfTheSample) {
  Outcome r = ReadShards(
      {{"s.tar", MakeTar({{"a.jpg", "1"}, {"a.jpg", "2"}, {"a.cls", "3"}, {"b.jpg", "4"}})}},
      {"s.tar"}, Handler::kIgnoreAndContinue);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("b"));
}

TEST(TarSamplesTest, UrlStreamErrorPassesThroughWhateverTheHandler) {
  auto ctx = WorkerContext{};
  ctx.errors = std::make_shared<ErrorCounters>();
  const absl::Status list_error =
      absl::FailedPreconditionError("8 shards cannot feed 4 ranks x 4 workers");
  std::unique_ptr<SampleStream> stream = TarSamples(
      std::make_unique<ListUrls>(std::vector<std::string>{"1.tar"}, list_error),
      MemoryOpener({{"1.tar", MakeTar({{"a.jpg", "1"}})}}), Handler::kIgnoreAndContinue, ctx);
  Outcome r = ReadSamples(*stream);
  EXPECT_THAT(Keys(r.samples), ElementsAre("a"));
  EXPECT_EQ(r.status, list_error);
  EXPECT_EQ(stream->Next().status(), list_error);  // sticky
  EXPECT_EQ(ctx.errors->Total(), 0);
}

TEST(TarSamplesTest, ErrorsAndEndAreSticky) {
  std::unique_ptr<SampleStream> bad =
      TarSamples(std::make_unique<ListUrls>(std::vector<std::string>{"missing.tar"}),
                 MemoryOpener({}), Handler::kReraise, {});
  absl::Status first = bad->Next().status();
  EXPECT_EQ(first.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bad->Next().status(), first);

  std::unique_ptr<SampleStream> good =
      TarSamples(std::make_unique<ListUrls>(std::vector<std::string>{"1.tar"}),
                 MemoryOpener({{"1.tar", MakeTar({{"a.jpg", "1"}})}}), Handler::kReraise, {});
  EXPECT_TRUE(good->Next()->has_value());
  EXPECT_FALSE(good->Next()->has_value());
  EXPECT_FALSE(good->Next()->has_value());
}

// ---------------------------------------------------------------------------
// Opening remote shards ahead (WebDatasetOptions::open_ahead).

// RecordingOpener serves `shards` from memory and records the URLs it is
// asked for, in order; Wait blocks until `url` was asked for.
class RecordingOpener {
 public:
  explicit RecordingOpener(std::map<std::string, std::string> shards)
      : inner_(MemoryOpener(std::move(shards))) {}

  Opener AsOpener() {
    return [this](std::string_view url) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        calls_.emplace_back(url);
      }
      asked_.notify_all();
      return inner_(url);
    };
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  // Wait is true once `url` was asked for (false after a minute: a hang).
  bool Wait(const std::string& url) {
    std::unique_lock<std::mutex> lock(mu_);
    return asked_.wait_for(lock, std::chrono::minutes(1), [&] {
      return std::find(calls_.begin(), calls_.end(), url) != calls_.end();
    });
  }

 private:
  Opener inner_;
  std::mutex mu_;
  std::condition_variable asked_;
  std::vector<std::string> calls_;
};

std::map<std::string, std::string> ThreeShards(const std::string& prefix) {
  return {{prefix + "0.tar", MakeTar({{"a.cls", "0"}, {"b.cls", "1"}})},
          {prefix + "1.tar", MakeTar({{"c.cls", "2"}, {"d.cls", "3"}})},
          {prefix + "2.tar", MakeTar({{"e.cls", "4"}})}};
}

std::vector<std::string> ShardUrls(const std::string& prefix) {
  return {prefix + "0.tar", prefix + "1.tar", prefix + "2.tar"};
}

TEST(TarSamplesOpenAheadTest, OpensTheNextRemoteShardWhileOneIsRead) {
  const std::string prefix = "https://data.example/";
  RecordingOpener opener(ThreeShards(prefix));
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(),
                 Handler::kReraise, {}, kDefaultMaxMemberSize, nullptr, nullptr, false,
                 /*open_ahead=*/1);
  SampleResult first = stream->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  // Shard 1 is opened while shard 0 is read; shard 2 waits for its turn.
  ASSERT_TRUE(opener.Wait(prefix + "1.tar"));
  EXPECT_THAT(opener.calls(), ElementsAre(prefix + "0.tar", prefix + "1.tar"));
  Outcome rest = ReadSamples(*stream);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_THAT(Keys(rest.samples), ElementsAre("b", "c", "d", "e"));
  EXPECT_EQ(FieldText(rest.samples[1], "__url__"), prefix + "1.tar");
  EXPECT_THAT(opener.calls(), ElementsAre(prefix + "0.tar", prefix + "1.tar", prefix + "2.tar"));
}

TEST(TarSamplesOpenAheadTest, OpensAsManyAsAskedAndReadsTheSameSamples) {
  const std::string prefix = "s3://bucket/";
  for (int ahead : {0, 1, 2, 5}) {
    RecordingOpener opener(ThreeShards(prefix));
    std::unique_ptr<SampleStream> stream =
        TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(),
                   Handler::kReraise, {}, kDefaultMaxMemberSize, nullptr, nullptr, false, ahead);
    SampleResult first = stream->Next();
    ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
    if (ahead >= 1) {
      // The opens ahead run on threads of their own, in any order.
      ASSERT_TRUE(opener.Wait(prefix + "1.tar"));
      if (ahead >= 2) ASSERT_TRUE(opener.Wait(prefix + "2.tar"));
      EXPECT_EQ(opener.calls().size(), std::min<size_t>(3, 1 + ahead)) << "open_ahead " << ahead;
    } else {
      EXPECT_THAT(opener.calls(), ElementsAre(prefix + "0.tar")) << "open_ahead 0";
    }
    Outcome rest = ReadSamples(*stream);
    ASSERT_TRUE(rest.status.ok()) << rest.status;
    EXPECT_THAT(Keys(rest.samples), ElementsAre("b", "c", "d", "e")) << "open_ahead " << ahead;
    EXPECT_EQ(opener.calls().size(), 3u) << "open_ahead " << ahead;  // each shard opened once
  }
}

TEST(TarSamplesOpenAheadTest, AUrlBeingReadOrOpenedAheadWaitsForItsTurn) {
  // A resampled list draws a URL twice in a row: the second is opened in
  // its turn, when a cache holds the first read's complete copy.
  const std::string a = "https://data.example/a.tar", b = "https://data.example/b.tar";
  RecordingOpener opener({{a, MakeTar({{"x.cls", "0"}})}, {b, MakeTar({{"y.cls", "1"}})}});
  std::unique_ptr<SampleStream> stream = TarSamples(
      std::make_unique<ListUrls>(std::vector<std::string>{a, a, b, b}), opener.AsOpener(),
      Handler::kReraise, {}, kDefaultMaxMemberSize, nullptr, nullptr, false, /*open_ahead=*/2);
  SampleResult first = stream->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  ASSERT_TRUE(opener.Wait(b));
  EXPECT_THAT(opener.calls(), ElementsAre(a, b));  // a's second turn is not opened ahead
  Outcome rest = ReadSamples(*stream);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_THAT(Keys(rest.samples), ElementsAre("x", "y", "y"));
  // b's second turn waited for b's first, opened ahead, to be read.
  EXPECT_THAT(opener.calls(), ElementsAre(a, b, a, b));
}

TEST(TarSamplesOpenAheadTest, LocalShardsAndPipesAreOpenedInTurn) {
  for (const std::string prefix : {"", "file:", "pipe:cat "}) {
    RecordingOpener opener(ThreeShards(prefix));
    std::unique_ptr<SampleStream> stream =
        TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(),
                   Handler::kReraise, {}, kDefaultMaxMemberSize, nullptr, nullptr, false, 2);
    ASSERT_TRUE(stream->Next().ok());
    ASSERT_TRUE(stream->Next().ok());
    EXPECT_THAT(opener.calls(), ElementsAre(prefix + "0.tar")) << prefix;
    Outcome rest = ReadSamples(*stream);
    ASSERT_TRUE(rest.status.ok()) << rest.status;
    EXPECT_THAT(Keys(rest.samples), ElementsAre("c", "d", "e"));
  }
}

TEST(TarSamplesOpenAheadTest, AnOpenErrorComesInItsShardsTurn) {
  const std::string prefix = "http://host:8080/";
  std::map<std::string, std::string> shards = ThreeShards(prefix);
  shards.erase(prefix + "1.tar");
  {
    RecordingOpener opener(shards);
    std::unique_ptr<SampleStream> stream =
        TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(),
                   Handler::kReraise, {}, kDefaultMaxMemberSize, nullptr, nullptr, false, 2);
    Outcome r = ReadSamples(*stream);
    EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b"));  // all of shard 0 first
    EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(r.status.message(), HasSubstr(prefix + "1.tar"));
  }
  WorkerContext ctx;
  ctx.errors = std::make_shared<ErrorCounters>();
  RecordingOpener opener(shards);
  std::unique_ptr<SampleStream> stream = TarSamples(
      std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(), Handler::kIgnoreAndContinue,
      ctx, kDefaultMaxMemberSize, nullptr, nullptr, false, 2);
  Outcome r = ReadSamples(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b", "e"));
  EXPECT_EQ(ctx.errors->Total(), 1);
}

TEST(TarSamplesOpenAheadTest, AnOpenErrorThatEndsTheStreamOpensNothingAhead) {
  const std::string prefix = "https://data.example/";
  std::map<std::string, std::string> shards = ThreeShards(prefix);
  shards.erase(prefix + "0.tar");
  for (Handler handler : {Handler::kReraise, Handler::kIgnoreAndStop}) {
    RecordingOpener opener(shards);
    std::unique_ptr<SampleStream> stream =
        TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), opener.AsOpener(), handler, {},
                   kDefaultMaxMemberSize, nullptr, nullptr, false, 2);
    Outcome r = ReadSamples(*stream);
    EXPECT_THAT(r.samples, IsEmpty());
    EXPECT_EQ(r.status.code(),
              handler == Handler::kReraise ? absl::StatusCode::kNotFound : absl::StatusCode::kOk);
    EXPECT_THAT(opener.calls(), ElementsAre(prefix + "0.tar"));
  }
}

TEST(TarSamplesOpenAheadTest, AnOpenDeclinedAheadIsMadeInItsTurnOnTheReadersThread) {
  const std::string prefix = "s3://bucket/";
  std::mutex mu;
  std::vector<std::pair<std::string, bool>> calls;  // (url, on the reader's thread)
  const std::thread::id reader = std::this_thread::get_id();
  Opener served = MemoryOpener(ThreeShards(prefix));
  Opener declining = [&](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    {
      std::lock_guard<std::mutex> lock(mu);
      calls.emplace_back(url, std::this_thread::get_id() == reader);
    }
    EXPECT_EQ(OpeningAhead(), std::this_thread::get_id() != reader);
    if (OpeningAhead()) return OpenInTurn(url);
    return served(url);
  };
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), declining, Handler::kReraise, {},
                 kDefaultMaxMemberSize, nullptr, nullptr, false, 1);
  Outcome r = ReadSamples(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b", "c", "d", "e"));
  using Call = std::pair<std::string, bool>;
  EXPECT_THAT(calls, ElementsAre(Call{prefix + "0.tar", true}, Call{prefix + "1.tar", false},
                                 Call{prefix + "1.tar", true}, Call{prefix + "2.tar", false},
                                 Call{prefix + "2.tar", true}));
  EXPECT_FALSE(IsOpenInTurn(absl::UnavailableError("a server's own 503")));
}

TEST(TarSamplesOpenAheadTest, AForkWaitsForTheOpensInFlight) {
  const std::string prefix = "https://slow.example/";
  absl::Notification entered, answer;
  Opener served = MemoryOpener(ThreeShards(prefix));
  Opener gated = [&](std::string_view url) {
    if (url == prefix + "1.tar") {
      entered.Notify();
      answer.WaitForNotification();
    }
    return served(url);
  };
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)), gated, Handler::kReraise, {},
                 kDefaultMaxMemberSize, nullptr, nullptr, false, 1);
  ASSERT_TRUE(stream->Next().ok());
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Minutes(1)));
  std::atomic<bool> waited{false};
  std::thread fork_handler([&] {
    WaitForAheadOpens();
    waited = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(waited.load());  // shard 1's open is still waiting for its answer
  answer.Notify();
  fork_handler.join();
  EXPECT_TRUE(waited.load());
  Outcome rest = ReadSamples(*stream);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_THAT(Keys(rest.samples), ElementsAre("b", "c", "d", "e"));
}

TEST(TarSamplesOpenAheadTest, TheListsErrorComesAfterItsShards) {
  const std::string prefix = "gs://bucket/";
  const absl::Status list_error = absl::FailedPreconditionError("the list broke");
  RecordingOpener opener(ThreeShards(prefix));
  std::unique_ptr<SampleStream> stream = TarSamples(
      std::make_unique<ListUrls>(ShardUrls(prefix), list_error), opener.AsOpener(),
      Handler::kIgnoreAndContinue, {}, kDefaultMaxMemberSize, nullptr, nullptr, false, 4);
  Outcome r = ReadSamples(*stream);
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(r.status, list_error);
}

// A shard whose server never answers: the stream's end, or its owner's
// interrupt, stops the open (it sees Cancelled) instead of waiting for it.
class StalledOpener {
 public:
  explicit StalledOpener(std::string stalled) : stalled_(std::move(stalled)) {}
  Opener AsOpener(Opener served) {
    return [this, served](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
      if (url != stalled_) return served(url);
      entered_.Notify();
      absl::Status go_on;
      while ((go_on = CheckInterrupt()).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      saw_ = go_on;
      return go_on;
    };
  }
  absl::Notification entered_;
  absl::Status saw_;

 private:
  const std::string stalled_;
};

TEST(TarSamplesOpenAheadTest, DroppingTheStreamStopsAnOpenInProgress) {
  const std::string prefix = "https://slow.example/";
  StalledOpener stalled(prefix + "1.tar");
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)),
                 stalled.AsOpener(MemoryOpener(ThreeShards(prefix))), Handler::kReraise, {},
                 kDefaultMaxMemberSize, nullptr, nullptr, false, 1);
  ASSERT_TRUE(stream->Next().ok());
  ASSERT_TRUE(stalled.entered_.WaitForNotificationWithTimeout(absl::Minutes(1)));
  stream.reset();  // returns: the open was told to stop
  EXPECT_EQ(stalled.saw_.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(stalled.saw_.message(), HasSubstr(prefix + "1.tar"));
}

TEST(TarSamplesOpenAheadTest, TheOwnersInterruptEndsTheWaitForAnOpenAhead) {
  const std::string prefix = "https://slow.example/";
  StalledOpener stalled(prefix + "1.tar");
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(ShardUrls(prefix)),
                 stalled.AsOpener(MemoryOpener(ThreeShards(prefix))), Handler::kIgnoreAndContinue,
                 {}, kDefaultMaxMemberSize, nullptr, nullptr, false, 1);
  ASSERT_TRUE(stream->Next().ok());
  ASSERT_TRUE(stream->Next().ok());
  std::atomic<bool> stop{false};
  ScopedInterruptCheck check([&] {
    return stop.load() ? absl::CancelledError("stopped by its owner") : absl::OkStatus();
  });
  std::thread stopper([&] {
    EXPECT_TRUE(stalled.entered_.WaitForNotificationWithTimeout(absl::Minutes(1)));
    stop = true;  // even when that failed: the reader must not wait forever
  });
  // Waiting for shard 1: a Cancelled ends the stream whatever the handler.
  SampleResult waited = stream->Next();
  stopper.join();
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(waited.status().message(), "stopped by its owner");
}

// ---------------------------------------------------------------------------
// Independent writers, read through OpenUrl.

Outcome ReadFiles(std::vector<std::string> urls, Handler handler = Handler::kReraise,
                  WorkerContext ctx = {}) {
  std::unique_ptr<SampleStream> stream =
      TarSamples(std::make_unique<ListUrls>(std::move(urls)), OpenUrl, handler, ctx);
  return ReadSamples(*stream);
}

// WriteSourceTree lays out files for the external writers: a two-field
// sample, an upper-case extension, a 130-character directory name, a
// directory, a symlink and a hard link (which must all be skipped).
std::string WriteSourceTree(const TempDir& dir) {
  const std::string long_dir = std::string(130, 'L');
  dir.Write("src/a.jpg", "JA");
  dir.Write("src/a.cls", "1");
  dir.Write("src/b.JPG", "JB");
  dir.Write("src/" + long_dir + "/c.seg.txt", "C");
  const std::string src = dir.path() + "/src";
  EXPECT_EQ(RunShell("cd " + src + " && ln -s a.jpg sym.jpg && ln a.cls hard.cls && mkdir e.d"), 0);
  return "a.jpg a.cls b.JPG " + long_dir + "/c.seg.txt sym.jpg hard.cls e.d";
}

void ExpectSourceTreeSamples(const Outcome& r) {
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b", std::string(130, 'L') + "/c"));
  ASSERT_EQ(r.samples.size(), 3u);
  EXPECT_THAT(FieldNames(r.samples[0]), ElementsAre("__key__", "__url__", "jpg", "cls"));
  EXPECT_EQ(FieldText(r.samples[0], "jpg"), "JA");
  EXPECT_EQ(FieldText(r.samples[1], "jpg"), "JB");
  EXPECT_EQ(FieldText(r.samples[2], "seg.txt"), "C");
}

TEST(IndependentWriterTest, GnuTarGnuFormat) {
  TempDir dir;
  const std::string files = WriteSourceTree(dir);
  const std::string tar = dir.path() + "/gnu.tar";
  ASSERT_EQ(RunShell("tar --format=gnu -cf " + tar + " -C " + dir.path() + "/src " + files), 0);
  ExpectSourceTreeSamples(ReadFiles({tar}));
}

TEST(IndependentWriterTest, GnuTarPosixFormatGzipped) {
  TempDir dir;
  const std::string files = WriteSourceTree(dir);
  const std::string tar = dir.path() + "/posix.tgz";
  ASSERT_EQ(RunShell("tar --format=posix -czf " + tar + " -C " + dir.path() + "/src " + files), 0);
  ExpectSourceTreeSamples(ReadFiles({tar}));
}

TEST(IndependentWriterTest, PythonTarfile) {
  const std::string python = "/usr/bin/python3";
  ASSERT_EQ(access(python.c_str(), X_OK), 0)
      << python << " is missing: scripts/deps.sh installs it";
  TempDir dir;
  const std::string files = WriteSourceTree(dir);
  const std::string script = dir.Write("write.py",
                                       "import sys, tarfile\n"
                                       "out, mode, fmt = sys.argv[1], sys.argv[2], sys.argv[3]\n"
                                       "f = getattr(tarfile, fmt)\n"
                                       "with tarfile.open(out, mode, format=f) as t:\n"
                                       "    for name in sys.argv[4:]:\n"
                                       "        t.add(name, recursive=False)\n");
  for (const char* spec : {"w PAX_FORMAT", "w GNU_FORMAT", "w:gz PAX_FORMAT", "w:xz GNU_FORMAT"}) {
    const std::string out = dir.path() + "/py.tar";
    ASSERT_EQ(RunShell("cd " + dir.path() + "/src && " + python + " " + script + " " + out + " " +
                       spec + " " + files),
              0)
        << spec;
    SCOPED_TRACE(spec);
    ExpectSourceTreeSamples(ReadFiles({out}));
  }
}

TEST(IndependentWriterTest, PipeCommandStream) {
  TempDir dir;
  const std::string tar = dir.Write("s.tar", MakeTar({{"a.jpg", "1"}, {"b.jpg", "2"}}));
  Outcome r = ReadFiles({"pipe:cat " + tar});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(Keys(r.samples), ElementsAre("a", "b"));
  EXPECT_EQ(r.samples[0].url(), "pipe:cat " + tar);
}

// ---------------------------------------------------------------------------
// Broken inputs under each handler. Every case reads [good1, BAD, good2];
// good1 holds samples g1, g2 and good2 holds g3.

struct BadCase {
  std::string url;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
  // Samples that come out of BAD before its error, and (under a continue
  // handler) after it.
  std::vector<std::string> before;
  std::vector<std::string> after = {};
};

// BadShardSamples: b1, b2, b3, each a 2000-byte jpg and a one-byte cls, so
// each sample is 3584 bytes of tar and b3.jpg starts at offset 7168.
std::vector<TarEntry> BadShardSamples() {
  std::vector<TarEntry> entries;
  for (char k : {'1', '2', '3'}) {
    entries.push_back({Cat("b", k, ".jpg"), std::string(2000, k)});
    entries.push_back({Cat("b", k, ".cls"), std::string(1, k)});
  }
  return entries;
}

class BadInputTest : public ::testing::TestWithParam<Handler> {
 protected:
  void SetUp() override {
    good1_ = dir_.Write("good1.tar", MakeTar({{"g1.jpg", "x"}, {"g1.cls", "1"}, {"g2.jpg", "y"}}));
    good2_ = dir_.Write("good2.tar", MakeTar({{"g3.jpg", "z"}}));
  }

  void Check(const BadCase& bad) {
    std::vector<std::string> warnings;
    WorkerContext ctx;
    ctx.errors = std::make_shared<ErrorCounters>();
    ctx.warn = [&warnings](std::string_view m) { warnings.emplace_back(m); };
    const Handler handler = GetParam();
    Outcome r = ReadFiles({good1_, bad.url, good2_}, handler, ctx);

    std::vector<std::string> expected = {"g1", "g2"};
    expected.insert(expected.end(), bad.before.begin(), bad.before.end());
    const bool continues =
        handler == Handler::kWarnAndContinue || handler == Handler::kIgnoreAndContinue;
    if (continues) {
      expected.insert(expected.end(), bad.after.begin(), bad.after.end());
      expected.push_back("g3");
    }
    EXPECT_EQ(Keys(r.samples), expected);
    for (const Sample& s : r.samples) {
      if (s.key()[0] == 'b') EXPECT_EQ(s.url(), bad.url);
    }

    if (handler == Handler::kReraise) {
      EXPECT_EQ(r.status.code(), bad.code) << r.status;
      for (const std::string& part : bad.message_parts) {
        EXPECT_THAT(Message(r.status), HasSubstr(part));
      }
    } else {
      EXPECT_TRUE(r.status.ok()) << r.status;
    }
    EXPECT_EQ(ctx.errors->Count("tar", bad.code), 1);
    EXPECT_EQ(ctx.errors->Total(), 1);

    const bool warns = handler == Handler::kWarnAndContinue || handler == Handler::kWarnAndStop;
    if (warns) {
      ASSERT_EQ(warnings.size(), 1u);
      for (const std::string& part : bad.message_parts) EXPECT_THAT(warnings[0], HasSubstr(part));
    } else {
      EXPECT_THAT(warnings, IsEmpty());
    }
  }

  std::string Write(const std::string& name, const std::string& data) {
    return dir_.Write(name, data);
  }

  TempDir dir_;
  std::string good1_;
  std::string good2_;
};

TEST_P(BadInputTest, MissingFile) {
  const std::string path = dir_.path() + "/missing.tar";
  Check({path, absl::StatusCode::kNotFound, {path}, {}});
}

TEST_P(BadInputTest, TruncatedInsideAMember) {
  // b3.jpg belongs to another key, so b2 was complete: it comes out first.
  const std::string path =
      Write("bad.tar", UstarTar(BadShardSamples()).substr(0, 7168 + 512 + 1000));
  Check({path,
         absl::StatusCode::kDataLoss,
         {path + ": member b3.jpg at offset 7168", "truncated"},
         {"b1", "b2"}});
}

TEST_P(BadInputTest, TruncatedBetweenMembers) {
  // Ends right after b2.cls: b2 may have had more members, so it is dropped.
  const std::string path = Write("bad.tar", UstarTar(BadShardSamples()).substr(0, 7168));
  Check({path,
         absl::StatusCode::kDataLoss,
         {path + ": truncated", "after member b2.cls", "end-of-archive"},
         {"b1"}});
}

TEST_P(BadInputTest, NotATar) {
  const std::string path = Write("bad.tar", "just some text\nin a file\n");
  Check({path, absl::StatusCode::kInvalidArgument, {path + ": not a tar archive"}, {}});
}

TEST_P(BadInputTest, EmptyFile) {
  const std::string path = Write("bad.tar", "");
  Check({path, absl::StatusCode::kInvalidArgument, {path + ": not a tar archive"}, {}});
}

TEST_P(BadInputTest, CorruptGzip) {
  const std::string path = Write(
      "bad.tar.gz", CorruptGzip(MakeTar(BadShardSamples(), TarFormat::kPax, Compression::kGzip)));
  Check({path, absl::StatusCode::kDataLoss, {path + ": "}, {}});
}

TEST_P(BadInputTest, TruncatedTarGz) {
  const std::string gz = MakeTar({{"b1.jpg", RandomBytes(200000)}, {"b1.cls", "1"}},
                                 TarFormat::kPax, Compression::kGzip);
  const std::string path = Write("bad.tar.gz", gz.substr(0, gz.size() / 2));
  Check({path,
         absl::StatusCode::kDataLoss,
         {path + ": truncated gzip data", "(member b1.jpg at offset 0)"},
         {}});
}

TEST_P(BadInputTest, DuplicateField) {
  const std::string path = Write("bad.tar", UstarTar({{"b1.jpg", "1"},
                                                      {"b1.cls", "1"},
                                                      {"b2.jpg", "2"},
                                                      {"b2.cls", "2"},
                                                      {"b2.jpg", "2 again"},
                                                      {"b2.txt", "2"},
                                                      {"b3.jpg", "3"}}));
  Check({path,
         absl::StatusCode::kInvalidArgument,
         {path + ": duplicate field 'jpg' in sample b2 (member b2.jpg at offset 4096)"},
         {"b1"},
         {"b3"}});
}

TEST_P(BadInputTest, FailingPipeCommandAfterACompleteTar) {
  const std::string tar = Write("bad.tar", UstarTar(BadShardSamples()));
  const std::string url = "pipe:cat " + tar + "; exit 1";
  // The error comes at the end of the data, while b3 is still being grouped.
  Check({url, absl::StatusCode::kDataLoss, {url, "exit status 1"}, {"b1", "b2"}});
}

INSTANTIATE_TEST_SUITE_P(AllHandlers, BadInputTest,
                         ::testing::Values(Handler::kReraise, Handler::kWarnAndContinue,
                                           Handler::kIgnoreAndContinue, Handler::kWarnAndStop,
                                           Handler::kIgnoreAndStop),
                         [](const ::testing::TestParamInfo<Handler>& info) {
                           return std::string(HandlerName(info.param));
                         });

}  // namespace
}  // namespace wds
