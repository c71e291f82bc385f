// Tests for IndexedShard: random access to a shard's samples, local (from its
// sidecar or a header scan) or remote (ranged requests), and every refusal.
#include "wds/tar/indexed_shard.h"

#include <unistd.h>

#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/index_lookup.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"
#include "wds/wds.h"

namespace wds {
namespace {

using testing::Compression;
using ::testing::HasSubstr;
using testing::MakeTar;
using testing::TarEntry;
using testing::TarFormat;
using testing::TempDir;
using ::wds::testing::FaultPlan;
using ::wds::testing::FaultRequest;
using ::wds::testing::FaultServer;

std::vector<TarEntry> Entries() {
  return {
      {"__meta__", "m"},    {"a.jpg", "jpeg"}, {"a.seg.PNG", std::string(700, 'p')},
      {"noext", "skipped"}, {"dir", "", 'd'},  {std::string(130, 'd') + "/b.txt", "long name"},
      {"c.cls", "1"},       {"c.txt", ""},     {"x.y/d.json", std::string(5000, 'j')},
  };
}

// PipelineSamples is what a WebDataset pipeline yields for `url`.
std::vector<Sample> PipelineSamples(const std::string& url) {
  Pipeline pipeline = WebDataset(std::vector<std::string>{url}).value();
  Loader loader(pipeline, {.workers = 1});
  std::vector<Sample> samples;
  for (const Sample& s : loader) samples.push_back(s);
  return samples;
}

// ExpectSameSample compares every field; __url__ with `url` when given.
void ExpectSameSample(const Sample& got, const Sample& want, std::string_view url = {}) {
  ASSERT_EQ(got.size(), want.size()) << want.key();
  for (size_t f = 0; f < want.size(); ++f) {
    EXPECT_EQ(got[f].first, want[f].first);
    if (!url.empty() && got[f].first == kUrlField) {
      EXPECT_EQ(testing::FieldText(got, got[f].first), url);
      continue;
    }
    EXPECT_EQ(testing::FieldText(got, got[f].first), testing::FieldText(want, want[f].first));
  }
}

TEST(IndexedShardTest, ReadsEverySampleAsThePipelineYieldsIt) {
  TempDir dir;
  for (TarFormat format : {TarFormat::kUstar, TarFormat::kPax, TarFormat::kGnu}) {
    std::vector<TarEntry> entries = Entries();
    if (format == TarFormat::kUstar) entries[5].name = "d/b.txt";
    const std::string path = dir.Write("s.tar", MakeTar(entries, format));
    std::vector<Sample> want = PipelineSamples(path);
    ASSERT_EQ(want.size(), 4u);
    absl::StatusOr<std::unique_ptr<IndexedShard>> shard = IndexedShard::Open(path);
    ASSERT_TRUE(shard.ok()) << shard.status();
    ASSERT_EQ((*shard)->size(), 4);
    // Backwards, so that no read depends on the one before.
    for (int64_t i = 3; i >= 0; --i) {
      absl::StatusOr<Sample> got = (*shard)->Read(i);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ((*shard)->Key(i), want[static_cast<size_t>(i)].key());
      ExpectSameSample(*got, want[static_cast<size_t>(i)]);
    }
    EXPECT_EQ((*shard)->Key(2), "c");
    EXPECT_EQ((*shard)->Key(3), "x.y/d");
  }
}

TEST(IndexedShardTest, AFieldRepeatedInASampleIsNamedAsThePipelineNamesIt) {
  TempDir dir;
  const std::string path =
      dir.Write("s.tar", MakeTar({{"a.TXT", "1"}, {"a.txt", "2"}}, TarFormat::kUstar));
  absl::StatusOr<Sample> s = IndexedShard::Open(path).value()->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            path + ": duplicate field 'txt' in sample a (member a.txt at offset 1024)");
}

TEST(IndexedShardTest, ReadMemberFillsTheCallersMemory) {
  TempDir dir;
  const std::string path = dir.Write("s.tar", MakeTar(Entries()));
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open("file:" + path).value();
  EXPECT_EQ(shard->url(), "file:" + path);
  const IndexMember& m = shard->index().samples[0].members[1];
  EXPECT_EQ(m.field, "seg.PNG");
  std::string dest(static_cast<size_t>(m.size), '\0');
  ASSERT_TRUE(shard->ReadMember(0, 1, dest.data()).ok());
  EXPECT_EQ(dest, std::string(700, 'p'));
}

TEST(IndexedShardTest, TakesTheSidecarWithoutScanning) {
  TempDir dir;
  const std::string path = dir.Write("s.tar", MakeTar(Entries()));
  ShardIndex index = ScanShard(path).value();
  index.samples.resize(2);  // a scan would find 4
  ASSERT_TRUE(index.Save(IndexPath(path)).ok());
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  EXPECT_EQ(shard->size(), 2);
  EXPECT_EQ(testing::FieldText(shard->Read(1).value(), "txt"), "long name");
}

TEST(IndexedShardTest, ASidecarWithoutNamesIsReplacedByAScan) {
  TempDir dir;
  const std::string path = dir.Write("s.tar", MakeTar(Entries()));
  ShardIndex index = ScanShard(path).value();
  std::ofstream(IndexPath(path)) << "v1.1 1\njpg " << index.samples[0].members[0].offset << " 4\n";
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  ASSERT_EQ(shard->size(), 4);
  EXPECT_EQ(shard->Key(0), "a");
}

TEST(IndexedShardTest, ASidecarPastTheEndOfTheShardIsRefused) {
  TempDir dir;
  const std::string tar = MakeTar(Entries());
  const std::string path = dir.Write("s.tar", tar);
  ASSERT_TRUE(ScanShard(path).value().Save(IndexPath(path)).ok());
  dir.Write("s.tar", tar.substr(0, 2048));
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard = IndexedShard::Open(path);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(IndexPath(path) + ": member "));
  EXPECT_THAT(shard.status().message(), HasSubstr("lies outside " + path));
}

TEST(IndexedShardTest, ReadsASidecarWhoseNamesTarEscaped) {
  // DALI's wds2idx copies names from `tar --list`: in the C locale every
  // non-ASCII byte is an octal escape, in any locale a backslash is doubled.
  TempDir dir;
  const std::string path = dir.Write(
      "s.tar", MakeTar({{"caf\xc3\xa9.jpg", "jpeg"}, {"b\\s.txt", "text"}}, TarFormat::kUstar));
  dir.Write("s.tar.idx", "v1.2 2\njpg 512 4 caf\\303\\251.jpg\ntxt 1536 4 b\\\\s.txt\n");
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  ASSERT_EQ(shard->size(), 2);
  EXPECT_EQ(shard->Key(0), "caf\xc3\xa9");
  EXPECT_EQ(shard->Key(1), "b\\s");
  std::vector<Sample> want = PipelineSamples(path);
  ASSERT_EQ(want.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) ExpectSameSample(shard->Read(i).value(), want[i], path);
}

TEST(IndexedShardTest, ASidecarOfAnotherVersionFailsTheReadNamingTheMember) {
  TempDir dir;
  std::vector<TarEntry> entries = Entries();
  const std::string path = dir.Write("s.tar", MakeTar(entries));
  ASSERT_TRUE(ScanShard(path).value().Save(IndexPath(path)).ok());
  entries[1].data = "jpeg, rewritten";  // same places, another size
  dir.Write("s.tar", MakeTar(entries));
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  absl::StatusOr<Sample> s = shard->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.status().message(),
              HasSubstr(path + ": the tar header before member a.jpg at offset "));
  EXPECT_THAT(s.status().message(), HasSubstr("is not that member's (4 bytes)"));
  // Another member's bytes in the place of a header fail its checksum.
  ShardIndex moved = ScanShard(path).value();
  moved.samples[1].members[0].offset += 512;
  ASSERT_TRUE(moved.Save(IndexPath(path)).ok());
  shard = IndexedShard::Open(path).value();
  s = shard->Read(1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(),
              HasSubstr("the tar header before member " + std::string(130, 'd') + "/b.txt"));
}

TEST(IndexedShardTest, ASidecarOfSamplesReorderedFailsTheRead) {
  TempDir dir;
  const std::string path = dir.Write(
      "s.tar", MakeTar({{"a.cls", "1"}, {"a.txt", "alpha"}, {"b.cls", "2"}, {"b.txt", "bravo"}}));
  ASSERT_TRUE(ScanShard(path).value().Save(IndexPath(path)).ok());
  dir.Write("s.tar",
            MakeTar({{"b.cls", "2"}, {"b.txt", "bravo"}, {"a.cls", "1"}, {"a.txt", "alpha"}}));
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  for (int64_t i : {0, 1}) {
    absl::StatusOr<Sample> s = shard->Read(i);
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.status().message(), HasSubstr(std::string("the tar header before member ") +
                                                (i == 0 ? "a" : "b") + ".cls at offset"));
  }
}

TEST(IndexedShardTest, ASidecarWhoseMembersOverflowIsRefused) {
  TempDir dir;
  const std::string path = dir.Write("s.tar", MakeTar(Entries()));
  for (int64_t offset : {int64_t{512}, INT64_MAX - 511}) {
    std::ofstream(IndexPath(path))
        << "v1.2 1\njpg " << offset << " " << (offset == 512 ? INT64_MAX - 100 : 4) << " a.jpg\n";
    absl::StatusOr<std::unique_ptr<IndexedShard>> shard = IndexedShard::Open(path);
    ASSERT_FALSE(shard.ok());
    EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(shard.status().message(), HasSubstr("lies outside " + path));
  }
}

// UstarHeader is a ustar header block for `name` announcing `size` bytes.
std::string UstarHeader(const std::string& name, int64_t size, char type = '0') {
  std::string h(512, '\0');
  auto put = [&h](size_t at, const std::string& text) { h.replace(at, text.size(), text); };
  char octal[16];
  std::snprintf(octal, sizeof octal, "%011llo", static_cast<unsigned long long>(size));
  put(0, name);
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  put(124, octal);
  put(136, "00000000000");
  h[156] = type;
  put(257, "ustar");
  put(263, "00");
  put(148, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(octal, sizeof octal, "%06o", sum);
  put(148, octal);
  h[154] = '\0';
  return h;
}

std::string Padded(std::string data) {
  return data + std::string((512 - data.size() % 512) % 512, '\0');
}

TEST(IndexedShardTest, AMemberEmptiedSinceTheSidecarFailsTheRead) {
  TempDir dir;
  const std::string path = dir.Write(
      "s.tar", MakeTar({{"a.txt", std::string(600, 'A')}, {"b.txt", std::string(600, 'B')}}));
  ASSERT_TRUE(ScanShard(path).value().Save(IndexPath(path)).ok());
  dir.Write("s.tar", MakeTar({{"a.txt", ""}, {"b.txt", std::string(600, 'B')}}));
  absl::StatusOr<Sample> s = IndexedShard::Open(path).value()->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("the tar header before member a.txt"));
}

TEST(IndexedShardTest, NamesOfEveryHeaderLayout) {
  TempDir dir;
  // POSIX ustar: a name split into prefix and name.
  const std::string long_dir(90, 'd');
  const std::string split = long_dir + "/" + std::string(40, 'n') + ".txt";
  std::string ustar = UstarHeader(std::string(40, 'n') + ".txt", 4);
  ustar.replace(345, long_dir.size(), long_dir);
  // GNU: bytes 345.. are times, not a prefix.
  std::string gnu = UstarHeader("g.txt", 4);
  gnu.replace(257, 8, std::string("ustar  \0", 8));
  gnu.replace(345, 11, "14567123456");
  for (std::string* h : {&ustar, &gnu}) {  // checksums again
    h->replace(148, 8, "        ");
    unsigned sum = 0;
    for (unsigned char c : *h) sum += c;
    char octal[8];
    std::snprintf(octal, sizeof octal, "%06o", sum);
    h->replace(148, 7, std::string(octal, 6) + '\0');
  }
  const std::string path =
      dir.Write("h.tar", ustar + Padded("data") + gnu + Padded("gnu!") + std::string(1024, '\0'));
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(path).value();
  ASSERT_EQ(shard->size(), 2);
  EXPECT_EQ(shard->Key(0), split.substr(0, split.size() - 4));
  EXPECT_EQ(testing::FieldText(shard->Read(0).value(), "txt"), "data");
  EXPECT_EQ(testing::FieldText(shard->Read(1).value(), "txt"), "gnu!");
}

TEST(IndexedShardTest, AFirstMemberNamedLikeAMagicNumberIsATar) {
  TempDir dir;
  // The last three begin with a whole magic number (zstd's, bzip2's stream
  // header, gzip's), enough for a reader that sniffed first: the scan too
  // must see the header.
  for (const std::string& name :
       {std::string("BZh_0001.jpg"), std::string("]x.jpg"),
        std::string("\x28\xb5\x2f\xfd") + "abc.jpg", std::string("BZh91AY&SY.jpg"),
        std::string("\x1f\x8b") + "x.jpg"}) {
    const std::string path = dir.Write("m.tar", MakeTar({{name, "bytes"}}, TarFormat::kUstar));
    absl::StatusOr<std::unique_ptr<IndexedShard>> shard = IndexedShard::Open(path);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(testing::FieldText((*shard)->Read(0).value(), "jpg"), "bytes");
  }
}

TEST(IndexedShardTest, CompressedShardsAreRefusedNamingTheCompression) {
  TempDir dir;
  const std::pair<Compression, std::string> cases[] = {{Compression::kGzip, "gzip"},
                                                       {Compression::kBzip2, "bzip2"},
                                                       {Compression::kXz, "xz"},
                                                       {Compression::kZstd, "zstd"}};
  for (const auto& [compression, name] : cases) {
    const std::string path =
        dir.Write("s.tar." + name, MakeTar(Entries(), TarFormat::kPax, compression));
    absl::StatusOr<std::unique_ptr<IndexedShard>> shard = IndexedShard::Open(path);
    ASSERT_FALSE(shard.ok()) << name;
    EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(shard.status().message(), path + ": a " + name +
                                            "-compressed tar; random access needs an "
                                            "uncompressed one");
  }
}

TEST(IndexedShardTest, WhatCannotBeOpenedIsNamed) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard =
      IndexedShard::Open(dir.path() + "/missing.tar");
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(shard.status().message(), HasSubstr(dir.path() + "/missing.tar: cannot open"));

  shard = IndexedShard::Open(dir.path());
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().message(), dir.path() + ": random access needs a regular file");

  shard = IndexedShard::Open("https://example.com/s.tar");
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shard.status().message(), HasSubstr("https://example.com/s.tar: random access"));

  const std::string text = dir.Write("notes.tar", std::string(1024, 'x'));
  shard = IndexedShard::Open(text);
  ASSERT_FALSE(shard.ok());
  EXPECT_THAT(shard.status().message(), HasSubstr(text));

  const std::string tar = MakeTar(Entries());
  const std::string cut = dir.Write("cut.tar", tar.substr(0, 1536));
  shard = IndexedShard::Open(cut);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(cut));
}

TEST(IndexedShardTest, IndexesOutsideTheShardAreOutOfRange) {
  TempDir dir;
  std::unique_ptr<IndexedShard> shard =
      IndexedShard::Open(dir.Write("s.tar", MakeTar(Entries()))).value();
  for (int64_t i : {int64_t{-1}, int64_t{4}}) {
    absl::StatusOr<Sample> s = shard->Read(i);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(s.status().message(), shard->url() + ": sample " + std::to_string(i) + " of 4");
  }
  char byte;
  absl::Status s = shard->ReadMember(2, 2, &byte);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(), shard->url() + ": member 2 of sample 2, which has 2");
}

TEST(IndexedShardTest, ThreadsReadOneShardTogether) {
  TempDir dir;
  std::vector<TarEntry> entries;
  for (int i = 0; i < 200; ++i) {
    entries.push_back({"k" + std::to_string(i) + ".bin", std::string(100 + i * 37, 'a' + i % 26)});
  }
  std::unique_ptr<IndexedShard> shard =
      IndexedShard::Open(dir.Write("s.tar", MakeTar(entries))).value();
  ASSERT_EQ(shard->size(), 200);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 200; i += 2) {  // pairs of threads read the same samples
        absl::StatusOr<Sample> s = shard->Read(i);
        if (!s.ok() || testing::FieldText(*s, "bin") != entries[static_cast<size_t>(i)].data) {
          ++wrong[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// --- Remote shards: ranged requests

class RemoteIndexedShardTest : public ::testing::Test {
 protected:
  // Put serves `tar` as /s.tar, with its sidecar when `sidecar`; returns the URL.
  std::string Put(const std::string& tar, bool sidecar, const std::string& etag = "\"v1\"") {
    const std::string local = dir_.Write("local.tar", tar);
    server_.Put("/s.tar", tar, etag);
    if (sidecar) server_.Put("/s.tar.idx", ScanShard(local).value().ToText().value());
    return server_.Url("/s.tar");
  }
  absl::StatusOr<std::unique_ptr<IndexedShard>> Open(const std::string& url) {
    return IndexedShard::Open(url, opener_);
  }
  // CachedOptions are the opener's options with a cache directory.
  RemoteOptions CachedOptions() const {
    RemoteOptions o = testing::FastRemoteOptions();
    o.cache_dir = dir_.path() + "/cache";
    return o;
  }
  // Ranges lists the Range headers of requests [from, to) for /s.tar.
  std::vector<std::string> Ranges(size_t from) const {
    std::vector<std::string> ranges;
    std::vector<FaultRequest> log = server_.log();
    for (size_t r = from; r < log.size(); ++r) {
      if (log[r].target == "/s.tar") ranges.push_back(log[r].headers["range"]);
    }
    return ranges;
  }

  TempDir dir_;
  FaultServer server_;
  RemoteOpener opener_{testing::FastRemoteOptions()};
};

TEST_F(RemoteIndexedShardTest, ReadsEverySampleAsThePipelineYieldsItOneRequestEach) {
  for (TarFormat format : {TarFormat::kUstar, TarFormat::kPax, TarFormat::kGnu}) {
    std::vector<TarEntry> entries = Entries();
    if (format == TarFormat::kUstar) entries[5].name = "d/b.txt";
    const std::string tar = MakeTar(entries, format);
    const std::string url = Put(tar, true);
    std::vector<Sample> want = PipelineSamples(dir_.path() + "/local.tar");
    const size_t before = server_.log().size();
    absl::StatusOr<std::unique_ptr<IndexedShard>> shard = Open(url);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_TRUE((*shard)->remote());
    ASSERT_EQ((*shard)->size(), 4);
    // The first block, then the sidecar.
    ASSERT_EQ(server_.log().size(), before + 2);
    EXPECT_EQ(server_.log()[before].headers["range"], "bytes=0-511");
    EXPECT_EQ(server_.log()[before + 1].target, "/s.tar.idx");
    for (int64_t i = 3; i >= 0; --i) {
      absl::StatusOr<Sample> got = (*shard)->Read(i);
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectSameSample(*got, want[static_cast<size_t>(i)], url);
    }
    const std::vector<std::string> ranges = Ranges(before + 2);
    ASSERT_EQ(ranges.size(), 4u);
    // Sample 0 runs from its first member's header to its last member's data.
    const IndexSample& first = (*shard)->index().samples[0];
    EXPECT_EQ(ranges[3], Cat("bytes=", first.members.front().offset - 512, "-",
                             first.members.back().offset + first.members.back().size - 1));
    for (size_t r = before + 3; r < server_.log().size(); ++r) {
      EXPECT_EQ(server_.log()[r].headers["if-match"], "\"v1\"");
    }
  }
  EXPECT_EQ(server_.connections(), 1);
}

TEST_F(RemoteIndexedShardTest, WithoutASidecarTheShardIsScannedOnce) {
  const std::string url = Put(MakeTar(Entries()), false);
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard = Open(url);
  ASSERT_TRUE(shard.ok()) << shard.status();
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1].target, "/s.tar.idx");  // 404
  EXPECT_EQ(log[2].target, "/s.tar");
  EXPECT_EQ(log[2].headers.count("range"), 0u);
  ASSERT_EQ((*shard)->size(), 4);
  EXPECT_EQ(testing::FieldText((*shard)->Read(3).value(), "json"), std::string(5000, 'j'));
}

TEST_F(RemoteIndexedShardTest, ReadMemberAsksForThatMemberAlone) {
  const std::string url = Put(MakeTar(Entries()), true);
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  const IndexMember& m = shard->index().samples[0].members[1];
  std::string dest(700, '\0');
  const size_t before = server_.log().size();
  ASSERT_TRUE(shard->ReadMember(0, 1, dest.data()).ok());
  EXPECT_EQ(dest, std::string(700, 'p'));
  EXPECT_EQ(Ranges(before),
            std::vector<std::string>{Cat("bytes=", m.offset - 512, "-", m.offset + m.size - 1)});
}

TEST_F(RemoteIndexedShardTest, MembersFarApartAreReadByRequestsOfTheirOwn) {
  // A metadata member between a sample's members leaves a gap; the sample is
  // still one, as the pipeline groups it.
  const std::string big(static_cast<size_t>(IndexedShard::kMaxGap) + 1, 'm');
  const std::string url =
      Put(MakeTar({{"a.txt", "x"}, {"__big__", big}, {"a.cls", "1"}, {"b.txt", "y"}}), true);
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  ASSERT_EQ(shard->size(), 2);
  const size_t before = server_.log().size();
  absl::StatusOr<Sample> a = shard->Read(0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(testing::FieldText(*a, "txt"), "x");
  EXPECT_EQ(testing::FieldText(*a, "cls"), "1");
  EXPECT_EQ(Ranges(before).size(), 2u);
  EXPECT_EQ(server_.body_bytes() < static_cast<int64_t>(big.size()) + 10'000, true);
}

TEST_F(RemoteIndexedShardTest, AShardReplacedAfterItWasOpenedIsAborted) {
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true);
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  ASSERT_TRUE(shard->Read(0).ok());
  server_.Put("/s.tar", tar, "\"v2\"");  // the same bytes, another version
  absl::StatusOr<Sample> s = shard->Read(1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kAborted);
  const IndexMember& m = shard->index().samples[1].members[0];
  EXPECT_EQ(s.status().message(),
            Cat(url, ": member ", m.name, " at offset ", m.offset,
                ": the object changed since it was first read (HTTP 412 to a request for bytes ",
                m.offset - 512, "-", m.offset + m.size - 1, " with If-Match: \"v1\")"));
}

TEST_F(RemoteIndexedShardTest, WeakEtagsPinTheVersionByLastModified) {
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true, "W/\"w1\"");
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  EXPECT_EQ(shard->version().etag, "W/\"w1\"");
  EXPECT_EQ(shard->version().last_modified, "Tue, 15 Nov 1994 12:45:26 GMT");
  EXPECT_EQ(shard->version().size, static_cast<int64_t>(tar.size()));
  ASSERT_TRUE(shard->Read(0).ok());
  EXPECT_EQ(server_.log().back().headers["if-unmodified-since"], "Tue, 15 Nov 1994 12:45:26 GMT");
  server_.Put("/s.tar", tar, "W/\"w2\"", "Wed, 16 Nov 1994 12:45:26 GMT");
  absl::StatusOr<Sample> s = shard->Read(1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.status().message(), HasSubstr("with If-Unmodified-Since: Tue, 15 Nov 1994"));
}

TEST_F(RemoteIndexedShardTest, AReplacementIsCaughtWhenTheServerIgnoresThePreconditions) {
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true, "W/\"w1\"");
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.ignore_if_match = true}; });
  // An older time (a copy that kept its source's) passes If-Unmodified-Since.
  server_.Put("/s.tar", tar, "W/\"w1\"", "Mon, 14 Nov 1994 12:45:26 GMT");
  absl::StatusOr<Sample> s = shard->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.status().message(),
              HasSubstr("the object changed since it was first read (Last-Modified Tue, 15 Nov "
                        "1994 12:45:26 GMT became Mon, 14 Nov 1994 12:45:26 GMT)"));
  // Another weak ETag, the same time.
  server_.Put("/s.tar", tar, "W/\"w2\"");
  EXPECT_THAT(shard->Read(0).status().message(), HasSubstr("(ETag W/\"w1\" became W/\"w2\")"));
  // Another size, no validator at all.
  std::string longer = tar + std::string(1024, '\0');
  server_.Put("/s.tar", longer, "W/\"w1\"");
  EXPECT_THAT(shard->Read(0).status().message(),
              HasSubstr(Cat("(size ", tar.size(), " became ", longer.size(), ")")));
}

TEST_F(RemoteIndexedShardTest, ASidecarPastTheEndOfTheShardIsRefused) {
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true);
  server_.Put("/s.tar", tar.substr(0, 2048));
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard = Open(url);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shard.status().message(), HasSubstr(url + ".idx: member "));
  EXPECT_THAT(shard.status().message(), HasSubstr("lies outside " + url +
                                                  " (2048 bytes); is the sidecar from another "
                                                  "version?"));
}

TEST_F(RemoteIndexedShardTest, TheSidecarOfAUrlWithAQueryKeepsTheQueryAtItsEnd) {
  const std::string tar = MakeTar(Entries());
  const std::string local = dir_.Write("local.tar", tar);
  server_.Put("/s.tar?v=1", tar);
  server_.Put("/s.tar.idx?v=1", ScanShard(local).value().ToText().value());
  std::unique_ptr<IndexedShard> shard = Open(server_.Url("/s.tar?v=1")).value();
  EXPECT_EQ(server_.log()[1].target, "/s.tar.idx?v=1");
  EXPECT_EQ(server_.log().size(), 2u);  // no scan
  EXPECT_EQ(testing::FieldText(shard->Read(2).value(), "cls"), "1");
  EXPECT_EQ(SidecarUrl("s3://b/a.tar#x"), "s3://b/a.tar.idx#x");
  EXPECT_EQ(SidecarUrl("/data/odd?name.tar"), "/data/odd?name.tar.idx");  // a local name
}

TEST_F(RemoteIndexedShardTest, TheIndexIsKeptInTheCacheForTheShardsVersionAndNothingElseIsRead) {
  const RemoteOptions o = CachedOptions();
  const RemoteOpener cached(o);
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, false);
  {
    // A reader that fills the cache with the whole shard: a copy that may be
    // of another version, which neither the index nor the samples come from.
    std::unique_ptr<ByteStream> stream = cached.AsOpener()(url).value();
    char buffer[4096];
    while (stream->Read(buffer, sizeof buffer).value() > 0) {
    }
  }
  ASSERT_EQ(server_.log().size(), 1u);
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(url, cached).value();
  ASSERT_TRUE(shard->Read(0).ok());
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 5u);  // then: first block, sidecar (404), scan, sample 0
  EXPECT_EQ(log[1].headers["range"], "bytes=0-511");
  EXPECT_EQ(log[2].target, "/s.tar.idx");
  EXPECT_EQ(log[3].headers.count("range"), 0u);
  EXPECT_THAT(log[4].headers["range"], ::testing::StartsWith("bytes="));

  // Another process of the machine (an opener of its own): the first block
  // tells the version, whose index the cache keeps.
  const RemoteOpener other(o);
  std::unique_ptr<IndexedShard> again = IndexedShard::Open(url, other).value();
  ASSERT_EQ(server_.log().size(), 6u);
  EXPECT_EQ(server_.log()[5].headers["range"], "bytes=0-511");
  EXPECT_EQ(again->index().ToText().value(), shard->index().ToText().value());
  EXPECT_EQ(again->version().etag, "\"v1\"");
  for (int64_t i = 0; i < 4; ++i) {
    ExpectSameSample(again->Read(i).value(), shard->Read(i).value(), url);
  }

  // A new version of the shard is indexed anew, and its index kept.
  std::vector<TarEntry> entries = Entries();
  entries.push_back({"e.txt", "new"});
  server_.Put("/s.tar", MakeTar(entries), "\"v2\"");
  const size_t before = server_.log().size();
  std::unique_ptr<IndexedShard> v2 = IndexedShard::Open(url, other).value();
  EXPECT_EQ(v2->size(), 5);
  EXPECT_EQ(server_.log().size(), before + 3);  // first block, sidecar (404), scan
  EXPECT_EQ(IndexedShard::Open(url, cached).value()->size(), 5);
  EXPECT_EQ(server_.log().size(), before + 4);
  EXPECT_EQ(testing::FieldText(v2->Read(4).value(), "txt"), "new");
}

TEST_F(RemoteIndexedShardTest, AKeptIndexThatProvesWrongIsDroppedAndTheSidecarAskedForAgain) {
  const RemoteOptions o = CachedOptions();
  const RemoteOpener cached(o);
  // The sidecar of another shard with the same sizes, which the first
  // opening keeps.
  const std::string url = Put(MakeTar(Entries()), true);
  std::vector<TarEntry> other = Entries();
  other[1].name = "z.jpg";
  const std::string right = MakeTar(other);
  server_.Put("/s.tar", right);
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(url, cached).value();
  const std::string kept = Cat(o.cache_dir, "/", testing::Sha256(Cat("index of ", url)));
  ASSERT_TRUE(std::ifstream(kept).good());
  absl::StatusOr<Sample> s = shard->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.status().message(), HasSubstr("is the index from another version of the shard?"));
  EXPECT_FALSE(std::ifstream(kept).good());
  // The sidecar mended on the server is what the next opening reads.
  server_.Put("/s.tar.idx", ScanShard(dir_.Write("right.tar", right)).value().ToText().value());
  const size_t before = server_.log().size();
  std::unique_ptr<IndexedShard> mended = IndexedShard::Open(url, cached).value();
  ASSERT_EQ(server_.log().size(), before + 2);
  EXPECT_EQ(server_.log()[before + 1].target, "/s.tar.idx");
  EXPECT_EQ(testing::FieldText(mended->Read(0).value(), "jpg"), "jpeg");
  EXPECT_EQ(mended->Key(0), "z");
  EXPECT_TRUE(std::ifstream(kept).good());
}

TEST_F(RemoteIndexedShardTest, AKeptIndexThatCannotBeReadOrLiesOutsideTheShardIsAskedForAgain) {
  const RemoteOptions o = CachedOptions();
  const RemoteOpener cached(o);
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true);
  const std::string want = IndexedShard::Open(url, cached).value()->index().ToText().value();
  const std::string kept = Cat(o.cache_dir, "/", testing::Sha256(Cat("index of ", url)));
  const std::string version = testing::ReadFile(kept).substr(0, testing::ReadFile(kept).find('\n'));
  for (const std::string& bad :
       {std::string("not an index\n"), Cat("v1.2 1\n", "jpg ", tar.size(), " 4 a.jpg\n")}) {
    std::ofstream(kept, std::ios::trunc) << version << "\n" << bad;
    const size_t before = server_.log().size();
    std::unique_ptr<IndexedShard> shard = IndexedShard::Open(url, cached).value();
    ASSERT_EQ(server_.log().size(), before + 2) << bad;  // first block, sidecar
    EXPECT_EQ(shard->index().ToText().value(), want);
    EXPECT_EQ(testing::ReadFile(kept), Cat(version, "\n", want));
  }
}

TEST_F(RemoteIndexedShardTest, AKeptIndexWhoseFirstMemberIsNotTheShardsIsAskedForAgain) {
  const RemoteOptions o = CachedOptions();
  const RemoteOpener cached(o);
  // (ustar: the first block is the first member's header, not a pax record.)
  const std::string tar = MakeTar({{"a.txt", "x"}, {"b.txt", "yy"}}, TarFormat::kUstar);
  const std::string url = Put(tar, true);
  const std::string want = IndexedShard::Open(url, cached).value()->index().ToText().value();
  const std::string kept = Cat(o.cache_dir, "/", testing::Sha256(Cat("index of ", url)));
  const std::string version = testing::ReadFile(kept).substr(0, testing::ReadFile(kept).find('\n'));
  // The index of a shard of the same sizes whose first member is another
  // (a sidecar mended since it was kept, say).
  const std::string other =
      dir_.Write("other.tar", MakeTar({{"c.txt", "x"}, {"b.txt", "yy"}}, TarFormat::kUstar));
  std::ofstream(kept, std::ios::trunc) << version << "\n"
                                       << ScanShard(other).value().ToText().value();
  const size_t before = server_.log().size();
  std::unique_ptr<IndexedShard> shard = IndexedShard::Open(url, cached).value();
  ASSERT_EQ(server_.log().size(), before + 2);  // first block, sidecar
  EXPECT_EQ(shard->index().ToText().value(), want);
  EXPECT_EQ(shard->Key(0), "a");
  EXPECT_EQ(testing::ReadFile(kept), Cat(version, "\n", want));
}

TEST_F(RemoteIndexedShardTest, ACopyForAnotherOpenerAsksForNothingAndKeepsTheVersion) {
  const std::string tar = MakeTar(Entries());
  const std::string url = Put(tar, true);
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  const size_t before = server_.log().size();
  std::unique_ptr<IndexedShard> copy = shard->ForOpener(RemoteOpener(testing::FastRemoteOptions()));
  EXPECT_EQ(server_.log().size(), before);
  EXPECT_EQ(copy->size(), 4);
  EXPECT_EQ(copy->version().etag, "\"v1\"");
  EXPECT_EQ(testing::FieldText(copy->Read(3).value(), "json"), std::string(5000, 'j'));
  server_.Put("/s.tar", tar, "\"v2\"");
  EXPECT_EQ(copy->Read(3).status().code(), absl::StatusCode::kAborted);
}

TEST_F(RemoteIndexedShardTest, ASidecarOfAnotherVersionFailsTheReadNamingTheMember) {
  const std::string url = Put(MakeTar(Entries()), true);
  std::vector<TarEntry> other = Entries();
  other[1].data = "JPEG";  // the same sizes
  other[1].name = "z.jpg";
  server_.Put("/s.tar", MakeTar(other));
  std::unique_ptr<IndexedShard> shard = Open(url).value();
  absl::StatusOr<Sample> s = shard->Read(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  const IndexMember& m = shard->index().samples[0].members[0];
  EXPECT_EQ(s.status().message(),
            Cat(url, ": the tar header before member a.jpg at offset ", m.offset,
                " is not that member's (4 bytes); is the index from another version of the "
                "shard?"));
}

TEST_F(RemoteIndexedShardTest, CompressedShardsAreRefusedNamingTheCompression) {
  server_.Put("/s.tar.gz", testing::Compress(MakeTar(Entries()), Compression::kGzip));
  const std::string url = server_.Url("/s.tar.gz");
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard = Open(url);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.status().message(),
            url + ": a gzip-compressed tar; random access needs an uncompressed one");
}

TEST_F(RemoteIndexedShardTest, WhatCannotBeOpenedIsNamed) {
  const std::string missing = server_.Url("/missing.tar");
  absl::StatusOr<std::unique_ptr<IndexedShard>> shard = Open(missing);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(shard.status().message(), missing + ": HTTP 404 Not Found: 404 Not Found");
  // Shorter than a block, which no tar is.
  server_.Put("/short.tar", std::string(100, '\0'));
  shard = Open(server_.Url("/short.tar"));
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(shard.status().message(),
            server_.Url("/short.tar") +
                ": wrong Content-Range 'bytes 0-99/100' to a request for bytes 0-511");
  // A local path goes to the local Open.
  shard = IndexedShard::Open(dir_.path() + "/none.tar", opener_);
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RemoteIndexedShardTest, ThreadsReadOneShardTogether) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 60; ++i) {
    entries.push_back({"k" + std::to_string(i) + ".bin", std::string(100 + i * 37, 'a' + i % 26)});
  }
  std::unique_ptr<IndexedShard> shard = Open(Put(MakeTar(entries), true)).value();
  ASSERT_EQ(shard->size(), 60);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 60; i += 2) {
        absl::StatusOr<Sample> s = shard->Read(i);
        if (!s.ok() || testing::FieldText(*s, "bin") != entries[static_cast<size_t>(i)].data) {
          ++wrong[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace wds
