// Tests for shard indexes: header scans, DALI text, wids JSON, sample counts.
#include "wds/tar/shard_index.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/internal/io/atomic_file.h"
#include "wds/internal/io/directories.h"
#include "wds/wds.h"

namespace wds {
namespace {

using testing::Compression;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeTar;
using testing::ReadFile;
using testing::RunShell;
using testing::TarEntry;
using testing::TarFormat;
using testing::TempDir;

std::vector<TarEntry> MixedEntries() {
  return {
      {"__meta__", "m"},    {"a.jpg", "jpeg"}, {"a.seg.PNG", std::string(700, 'p')},
      {"noext", "skipped"}, {"dir", "", 'd'},  {std::string(130, 'd') + "/b.txt", "long"},
      {"c.cls", "1"},       {"c.txt", ""},
  };
}

TEST(ScanShardTest, GroupsMembersAsTheReaderDoes) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries()));
  absl::StatusOr<ShardIndex> index = ScanShard(path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->samples.size(), 3u);
  std::vector<std::string> fields;
  for (const IndexSample& s : index->samples) {
    for (const IndexMember& m : s.members) fields.push_back(m.field);
    fields.push_back("|");
  }
  EXPECT_THAT(fields, ElementsAre("jpg", "seg.PNG", "|", "txt", "|", "cls", "txt", "|"));
  EXPECT_EQ(index->samples[1].members[0].name, std::string(130, 'd') + "/b.txt");
}

TEST(ScanShardTest, OffsetsPointAtEachMembersBytes) {
  TempDir dir;
  for (TarFormat format : {TarFormat::kUstar, TarFormat::kPax, TarFormat::kGnu}) {
    std::vector<TarEntry> entries = MixedEntries();
    if (format == TarFormat::kUstar) entries[5].name = "d/b.txt";
    std::string tar = MakeTar(entries, format);
    std::string path = dir.Write("s.tar", tar);
    absl::StatusOr<ShardIndex> index = ScanShard(path);
    ASSERT_TRUE(index.ok()) << index.status();
    int checked = 0;
    for (const IndexSample& s : index->samples) {
      for (const IndexMember& m : s.members) {
        auto entry = std::find_if(entries.begin(), entries.end(),
                                  [&](const TarEntry& e) { return e.name == m.name; });
        ASSERT_NE(entry, entries.end()) << m.name;
        EXPECT_EQ(m.offset % 512, 0);
        EXPECT_EQ(tar.substr(m.offset, m.size), entry->data) << m.name;
        ++checked;
      }
    }
    EXPECT_EQ(checked, 5);
  }
}

TEST(ScanShardTest, OffsetsAgreeWithPythonTarfile) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries(), TarFormat::kPax));
  std::string out = dir.path() + "/py.txt";
  ASSERT_EQ(
      RunShell("/usr/bin/python3 -c 'import tarfile,sys\nfor m in tarfile.open(sys.argv[1]):\n"
               " if m.isreg() and \".\" in m.name and not m.name.startswith(\"__\"): "
               "print(m.name[-8:], m.offset_data, m.size)' " +
               path + " > " + out),
      0);
  absl::StatusOr<ShardIndex> index = ScanShard(path);
  ASSERT_TRUE(index.ok());
  std::string ours;
  for (const IndexSample& s : index->samples) {
    for (const IndexMember& m : s.members) {
      ours += m.name.substr(m.name.size() > 8 ? m.name.size() - 8 : 0) + " " +
              std::to_string(m.offset) + " " + std::to_string(m.size) + "\n";
    }
  }
  EXPECT_EQ(ours, ReadFile(out));
}

TEST(ScanShardTest, CompressedShardsGiveUncompressedOffsets) {
  TempDir dir;
  absl::StatusOr<ShardIndex> plain = ScanShard(dir.Write("p.tar", MakeTar(MixedEntries())));
  ASSERT_TRUE(plain.ok());
  for (Compression c : {Compression::kGzip, Compression::kZstd, Compression::kBzip2}) {
    std::string path = dir.Write("c.tar", MakeTar(MixedEntries(), TarFormat::kPax, c));
    absl::StatusOr<ShardIndex> index = ScanShard(path);
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ(*index->ToText(), *plain->ToText());
  }
}

TEST(ScanShardTest, PipeUrlIsStreamed) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries()));
  absl::StatusOr<ShardIndex> index = ScanShard("pipe:cat " + path);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples.size(), 3u);
}

TEST(ScanShardTest, FailingPipeIsAnError) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries()));
  absl::StatusOr<ShardIndex> index = ScanShard("pipe:cat " + path + "; exit 3");
  EXPECT_FALSE(index.ok());
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("exit status 3"));
}

TEST(ScanShardTest, TruncatedMemberIsDataLossNamingIt) {
  TempDir dir;
  std::string tar = MakeTar({{"a.txt", "x"}, {"b.bin", std::string(5000, 'b')}}, TarFormat::kUstar);
  std::string path = dir.Write("t.tar", tar.substr(0, 1024 + 512 + 1000));
  absl::StatusOr<ShardIndex> index = ScanShard(path);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("b.bin at offset 1024"));
}

TEST(ScanShardTest, TruncatedGzipIsDataLoss) {
  TempDir dir;
  std::string tar = MakeTar({{"a.bin", std::string(100000, 'a')}, {"b.bin", "b"}}, TarFormat::kPax,
                            Compression::kGzip);
  std::string path = dir.Write("t.tar.gz", tar.substr(0, tar.size() / 2));
  EXPECT_EQ(ScanShard(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ScanShardTest, CorruptGzipChecksumIsDataLossAsForTheLoader) {
  // Stored (incompressible) bytes changed: only the gzip CRC-32 shows it. The
  // counts used to equalize ranks must fail where the loader fails.
  std::string big(300000, '\0');
  uint32_t x = 1;
  for (char& c : big) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  std::string gz = MakeTar({{"a.bin", big}, {"b.bin", big}}, TarFormat::kPax, Compression::kGzip);
  for (size_t i = gz.size() * 3 / 4; i < gz.size() * 3 / 4 + 64; ++i) gz[i] = '\0';
  TempDir dir;
  std::string path = dir.Write("t.tar.gz", gz);
  absl::StatusOr<ShardIndex> index = ScanShard(path);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("incorrect data check"));
  EXPECT_EQ(CountSamples(path).status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{path}, {});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(testing::Drain(*p->Open({})).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ScanShardTest, NotATarIsInvalidArgument) {
  TempDir dir;
  std::string path = dir.Write("x.tar", std::string(4096, 'z'));
  absl::StatusOr<ShardIndex> index = ScanShard(path);
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr(path + ": not a tar archive"));
}

TEST(ScanShardTest, MissingFileIsNotFoundNamingIt) {
  absl::StatusOr<ShardIndex> index = ScanShard("/nonexistent/s.tar");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("/nonexistent/s.tar"));
}

TEST(ScanShardTest, CountMatchesTheReaderOnConsecutiveRepeats) {
  TempDir dir;
  std::string path =
      dir.Write("s.tar", MakeTar({{"a.cls", "1"}, {"b.cls", "2"}, {"a.txt", "x"}, {"a.jpg", "y"}}));
  absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{path}, {});
  ASSERT_TRUE(p.ok());
  WorkerContext ctx;
  auto stream = p->Open(ctx);
  absl::StatusOr<std::vector<Sample>> samples = testing::Drain(*stream);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(*CountSamples(path), static_cast<int64_t>(samples->size()));
  EXPECT_EQ(*CountSamples(path), 3);
}

TEST(ShardIndexTextTest, RendersDaliVersion12) {
  ShardIndex index;
  index.samples.push_back({{{"jpg", 512, 4, "a.jpg"}, {"seg.png", 1536, 700, "a.seg.png"}}});
  index.samples.push_back({{{"cls", 3072, 1, "d/b.cls"}}});
  EXPECT_EQ(*index.ToText(),
            "v1.2 2\njpg 512 4 a.jpg seg.png 1536 700 a.seg.png\ncls 3072 1 d/b.cls\n");
}

TEST(ShardIndexTextTest, NameWithASpaceIsInvalidArgument) {
  ShardIndex index;
  index.samples.push_back({{{"jpg", 512, 4, "my photo.jpg"}}});
  absl::StatusOr<std::string> text = index.ToText();
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(),
            "member 'my photo.jpg' holds a space, which a DALI index cannot carry");
}

// Names as GNU tar's --list prints them (what DALI's wds2idx writes): a
// backslash doubled, control characters escaped, UTF-8 as it is.
TEST(ShardIndexTextTest, NamesAreWrittenAsTarListPrintsThemAndReadBack) {
  ShardIndex index;
  index.samples.push_back({{{"txt", 512, 1, "back\\slash.txt"},
                            {"cls", 1536, 1, "tab\tname.cls"},
                            {"jpg", 2560, 1, "caf\xc3\xa9\x1b.jpg"},
                            {"n\xc3\xb6", 3584, 1, "x\x7f.n\xc3\xb6"}}});
  const std::string text = index.ToText().value();
  EXPECT_EQ(text,
            "v1.2 1\ntxt 512 1 back\\\\slash.txt cls 1536 1 tab\\tname.cls "
            "jpg 2560 1 caf\xc3\xa9\\033.jpg n\xc3\xb6 3584 1 x\\177.n\xc3\xb6\n");
  absl::StatusOr<ShardIndex> back = ShardIndex::Parse(text, "x.idx");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->samples[0].members, index.samples[0].members);
}

TEST(ShardIndexTextTest, TheOctalEscapesOfTarInTheCLocaleAreRead) {
  // `LANG=C tar --list` prints "café.jpg" as caf\303\251.jpg; a backslash
  // before anything else, or before fewer than three octal digits, stays.
  absl::StatusOr<ShardIndex> index =
      ShardIndex::Parse("v1.2 1\njpg 512 1 caf\\303\\251.jpg x 1024 1 a\\qb\\47.x\n", "x.idx");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples[0].members[0].name, "caf\xc3\xa9.jpg");
  EXPECT_EQ(index->samples[0].members[1].name, "a\\qb\\47.x");
}

TEST(ShardIndexTextTest, ParseRoundTrips) {
  const std::string text = "v1.2 2\njpg 512 4 a.jpg seg.png 1536 700 a.seg.png\ncls 3072 1 b.cls\n";
  absl::StatusOr<ShardIndex> index = ShardIndex::Parse(text, "x.idx");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(*index->ToText(), text);
  EXPECT_EQ(index->samples[0].members[1], (IndexMember{"seg.png", 1536, 700, "a.seg.png"}));
}

TEST(ShardIndexTextTest, ParseReadsVersion11WithoutNames) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Parse("v1.1 1\njpg 512 4 cls 1536 1\n", "x");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->samples[0].members[1], (IndexMember{"cls", 1536, 1, ""}));
}

TEST(ShardIndexTextTest, UnknownVersionIsInvalidArgumentNamingTheSource) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Parse("v9 1\n", "x.idx");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("x.idx: line 1"));
  // A file that is no index is quoted in part.
  index = ShardIndex::Parse(std::string(100000, 'x'), "y.idx");
  EXPECT_EQ(index.status().message(), "y.idx: line 1: not a DALI webdataset index (version '" +
                                          std::string(32, 'x') + "...', expected v1.1 or v1.2)");
}

TEST(ShardIndexTextTest, FewerSamplesThanAnnouncedIsInvalidArgument) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Parse("v1.2 2\njpg 512 4 a.jpg\n", "x.idx");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("x.idx: line 3"));
}

TEST(ShardIndexTextTest, MoreSamplesThanAnnouncedIsInvalidArgument) {
  absl::StatusOr<ShardIndex> index =
      ShardIndex::Parse("v1.2 1\njpg 512 4 a.jpg\njpg 1024 4 b.jpg\n", "x.idx");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ShardIndexTextTest, UnalignedOffsetIsInvalidArgumentNamingTheLine) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Parse("v1.2 1\njpg 513 4 a.jpg\n", "x.idx");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("line 2"));
}

TEST(ShardIndexTextTest, MissingNameInVersion12IsInvalidArgument) {
  EXPECT_EQ(ShardIndex::Parse("v1.2 1\njpg 512 4\n", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShardIndexTextTest, SaveAndLoadLeaveNoTemporaryFile) {
  TempDir dir;
  ShardIndex index;
  index.samples.push_back({{{"jpg", 512, 4, "a.jpg"}}});
  ASSERT_TRUE(index.Save(dir.path() + "/s.tar.idx").ok());
  EXPECT_EQ(ReadFile(dir.path() + "/s.tar.idx"), "v1.2 1\njpg 512 4 a.jpg\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  EXPECT_EQ(*ShardIndex::Load(dir.path() + "/s.tar.idx")->ToText(), *index.ToText());
}

TEST(ShardIndexTextTest, LoadMissingIsNotFoundNamingThePath) {
  absl::StatusOr<ShardIndex> index = ShardIndex::Load("/nonexistent/s.tar.idx");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("/nonexistent/s.tar.idx"));
}

TEST(CountSamplesTest, UsesTheSidecarWhenPresent) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries()));
  EXPECT_EQ(*CountSamples(path), 3);
  dir.Write("s.tar.idx", "v1.2 42\n");
  EXPECT_EQ(*CountSamples(path), 42);
  EXPECT_EQ(IndexPath(path), path + ".idx");
  // A file: or file:// URL's sidecar is the file's.
  for (const std::string& url : {"file:" + path, "file://" + path}) {
    EXPECT_TRUE(HasSidecar(url)) << url;
    EXPECT_EQ(*CountSamples(url), 42) << url;
  }
}

TEST(CountSamplesTest, MalformedSidecarIsAnErrorNamingIt) {
  TempDir dir;
  std::string path = dir.Write("s.tar", MakeTar(MixedEntries()));
  dir.Write("s.tar.idx", "garbage\n");
  absl::StatusOr<int64_t> n = CountSamples(path);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("s.tar.idx"));
}

DatasetIndex TwoShards() {
  DatasetIndex index;
  index.shards = {{"train-000000.tar", 10, 20480}, {"train-000001.tar", 3, 6144}};
  return index;
}

TEST(DatasetIndexTest, JsonHasTheWidsShape) {
  EXPECT_EQ(TwoShards().ToJson(),
            "{\n"
            "  \"__kind__\": \"wids-shard-index-v1\",\n"
            "  \"wids_version\": 1,\n"
            "  \"shardlist\": [\n"
            "    {\n"
            "      \"url\": \"train-000000.tar\",\n"
            "      \"nsamples\": 10,\n"
            "      \"filesize\": 20480\n"
            "    },\n"
            "    {\n"
            "      \"url\": \"train-000001.tar\",\n"
            "      \"nsamples\": 3,\n"
            "      \"filesize\": 6144\n"
            "    }\n"
            "  ]\n"
            "}\n");
  EXPECT_EQ(TwoShards().total_samples(), 13);
}

TEST(DatasetIndexTest, PythonJsonReadsIt) {
  TempDir dir;
  ASSERT_TRUE(TwoShards().Save(dir.path() + "/ds.json").ok());
  std::string out = dir.path() + "/py.txt";
  ASSERT_EQ(RunShell("/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                     "print(d[\"__kind__\"], sum(s[\"nsamples\"] for s in d[\"shardlist\"]))' " +
                     dir.path() + "/ds.json > " + out),
            0);
  EXPECT_EQ(ReadFile(out), "wids-shard-index-v1 13\n");
}

TEST(DatasetIndexTest, LoadResolvesRelativeUrlsAgainstItsDirectory) {
  TempDir dir;
  DatasetIndex index = TwoShards();
  index.shards.push_back({"/abs/x.tar", 1, 512});
  index.shards.push_back({"pipe:cat y.tar", 2, 0});
  ASSERT_TRUE(index.Save(dir.path() + "/ds.json").ok());
  absl::StatusOr<DatasetIndex> loaded = DatasetIndex::Load(dir.path() + "/ds.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->shards, ElementsAre(DatasetShard{dir.path() + "/train-000000.tar", 10, 20480},
                                          DatasetShard{dir.path() + "/train-000001.tar", 3, 6144},
                                          DatasetShard{"/abs/x.tar", 1, 512},
                                          DatasetShard{"pipe:cat y.tar", 2, 0}));
  // ".." is resolved lexically, as the reference's wids does (and never above the root).
  DatasetIndex up;
  up.shards.push_back({"../up.tar", 1, 0});
  up.shards.push_back({"../../../../../../../../../../../../top.tar", 1, 0});
  ASSERT_TRUE(MakeDirectories(dir.path() + "/sub").ok());
  ASSERT_TRUE(up.Save(dir.path() + "/sub/ds.json").ok());
  loaded = DatasetIndex::Load(dir.path() + "/sub/ds.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->shards[0].url, dir.path() + "/up.tar");
  EXPECT_EQ(loaded->shards[1].url, "/top.tar");
}

// ServingOpener serves `text` at every URL it is asked for, and records the
// URLs; a URL in `missing` is NotFound.
struct ServingOpener {
  std::string text;
  std::vector<std::string> missing;
  std::shared_ptr<std::vector<std::string>> asked = std::make_shared<std::vector<std::string>>();

  Opener opener() const {
    return [*this](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
      asked->emplace_back(url);
      for (const std::string& m : missing) {
        if (m == url) return absl::NotFoundError(std::string(url) + ": HTTP 404 Not Found");
      }
      return MemoryStream(std::string(url), text);
    };
  }
};

TEST(DatasetIndexTest, ARemoteIndexResolvesRelativeUrlsAgainstItsUrlsDirectory) {
  DatasetIndex index = TwoShards();
  index.shards.push_back({"s3://other/x.tar", 1, 512});
  index.shards.push_back({"/abs/y.tar", 2, 0});
  index.shards.push_back({"sub/z.tar", 3, 0});
  const ServingOpener serving{index.ToJson()};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"s3://bucket/train/index.json", "s3://bucket/train/"},
      {"https://host:8080/data/v2/ds.json?X-Amz-Signature=ab/cd#frag",
       "https://host:8080/data/v2/"},
      {"https://host/ds.json", "https://host/"},
      {"http://host", "http://host/"},
      {"gs://bucket/ds.json", "gs://bucket/"},
  };
  for (const auto& [url, base] : cases) {
    absl::StatusOr<DatasetIndex> loaded = DatasetIndex::Load(url, serving.opener());
    ASSERT_TRUE(loaded.ok()) << url << ": " << loaded.status();
    EXPECT_THAT(loaded->shards, ElementsAre(DatasetShard{base + "train-000000.tar", 10, 20480},
                                            DatasetShard{base + "train-000001.tar", 3, 6144},
                                            DatasetShard{"s3://other/x.tar", 1, 512},
                                            DatasetShard{"/abs/y.tar", 2, 0},
                                            DatasetShard{base + "sub/z.tar", 3, 0}))
        << url;
  }
  EXPECT_EQ(serving.asked->size(), cases.size());
  EXPECT_EQ(serving.asked->front(), "s3://bucket/train/index.json");
  // "." and ".." segments are resolved, never above the host.
  DatasetIndex dotted;
  for (const char* url : {"../other/a.tar", "./b.tar", "x/../../../c.tar", "d/./e/../f.tar"}) {
    dotted.shards.push_back({url, 1, 0});
  }
  const ServingOpener dots{dotted.ToJson()};
  absl::StatusOr<DatasetIndex> resolved =
      DatasetIndex::Load("s3://b/train/v1/ds.json", dots.opener());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  std::vector<std::string> urls;
  for (const DatasetShard& s : resolved->shards) urls.push_back(s.url);
  EXPECT_THAT(urls, ElementsAre("s3://b/train/other/a.tar", "s3://b/train/v1/b.tar", "s3://b/c.tar",
                                "s3://b/train/v1/d/f.tar"));
  // A pipe: command's index has no directory: its URLs are kept as written.
  absl::StatusOr<DatasetIndex> piped = DatasetIndex::Load("pipe:cat ds.json", serving.opener());
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_EQ(piped->shards[0].url, "train-000000.tar");
}

TEST(DatasetIndexTest, ALocalIndexIsReadAsAFileWhateverTheOpener) {
  TempDir dir;
  ASSERT_TRUE(TwoShards().Save(dir.path() + "/ds.json").ok());
  const ServingOpener serving{"not what the file holds"};
  for (const std::string& url : {dir.path() + "/ds.json", "file:" + dir.path() + "/ds.json",
                                 "file://" + dir.path() + "/ds.json"}) {
    absl::StatusOr<DatasetIndex> loaded = DatasetIndex::Load(url, serving.opener());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->shards[1].url, dir.path() + "/train-000001.tar");
  }
  EXPECT_TRUE(serving.asked->empty());
  absl::StatusOr<DatasetIndex> missing =
      DatasetIndex::Load(std::string_view(dir.path() + "/none.json"), serving.opener());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir.path() + "/none.json: cannot open");
  absl::StatusOr<DatasetIndex> missing_url =
      DatasetIndex::Load(std::string_view("file://" + dir.path() + "/none.json"), serving.opener());
  EXPECT_EQ(missing_url.status().message(), dir.path() + "/none.json: cannot open");
}

TEST(DatasetIndexTest, ARemoteIndexsErrorsNameItsUrl) {
  ServingOpener serving{"{\"shardlist\": [{\"url\": \"a.tar\"}]}"};
  serving.missing = {"https://host/gone.json"};
  absl::StatusOr<DatasetIndex> gone =
      DatasetIndex::Load("https://host/gone.json", serving.opener());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.status().message(), "https://host/gone.json: HTTP 404 Not Found");
  absl::StatusOr<DatasetIndex> bad = DatasetIndex::Load("https://host/bad.json", serving.opener());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "https://host/bad.json: shardlist[0] needs a string \"url\" and an integer "
            "\"nsamples\"");
  // A read that fails half-way is the stream's error, not a parse of half a document.
  const Opener failing = [](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    return MemoryStream(std::string(url), TwoShards().ToJson(),
                        absl::UnavailableError("https://host/cut.json: connection reset"));
  };
  absl::StatusOr<DatasetIndex> cut = DatasetIndex::Load("https://host/cut.json", failing);
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cut.status().message(), "https://host/cut.json: connection reset");
}

TEST(DatasetIndexTest, ParseWithoutBaseKeepsUrls) {
  absl::StatusOr<DatasetIndex> index = DatasetIndex::Parse(TwoShards().ToJson(), "x.json", "");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(index->shards, TwoShards().shards);
}

TEST(DatasetIndexTest, InvalidJsonIsInvalidArgumentNamingTheSource) {
  absl::StatusOr<DatasetIndex> index = DatasetIndex::Parse("{\"shardlist\": [", "x.json", "");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("x.json: not valid JSON"));
}

TEST(DatasetIndexTest, OtherKindIsInvalidArgument) {
  absl::StatusOr<DatasetIndex> index =
      DatasetIndex::Parse("{\"__kind__\": \"other\", \"shardlist\": []}", "x.json", "");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("\"other\""));
}

TEST(DatasetIndexTest, ShardWithoutNsamplesIsInvalidArgumentNamingIt) {
  absl::StatusOr<DatasetIndex> index =
      DatasetIndex::Parse("{\"shardlist\": [{\"url\": \"a.tar\"}]}", "x.json", "");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("shardlist[0]"));
}

TEST(WriteFileAtomicallyTest, UnwritableDirectoryIsAnErrorNamingThePath) {
  absl::Status status = WriteFileAtomically("/nonexistent/dir/f.json", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent/dir/f.json"));
}

}  // namespace
}  // namespace wds
