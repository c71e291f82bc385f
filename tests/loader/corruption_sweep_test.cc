// Truncation and corruption sweeps: a small shard (plain, gzip, zstd) cut at
// every byte, a bit flipped in every byte of every tar header, and (gzip,
// zstd) a bit flipped in every byte of the compressed stream, read through
// the Loader with each handler. The shards are what TarWriter writes (for
// gzip, the same tar through libarchive's gzip filter). Whatever the damage,
// the reader yields only complete samples whose bytes are the originals', in
// order, then (with reraise) an error naming the shard and the offset where
// the reader knows it; a continue handler skips the damaged shard and goes on
// with the next; every handler counts the one error, and the warn handlers
// report it once; nothing crashes, hangs or leaks half a sample.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tar/zstd_file_sink.h"
#include "util/test_util.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/tar_writer.h"

namespace wds {
namespace {

using testing::Compression;
using ::testing::Contains;
using ::testing::HasSubstr;
using testing::TarEntry;

constexpr int kSamples = 4;

// Original holds the shard's samples by key: field -> bytes.
using Original = std::map<std::string, std::map<std::string, std::string>>;

std::vector<TarEntry> Entries(Original& original) {
  std::vector<TarEntry> entries;
  uint32_t x = 7;
  for (int i = 0; i < kSamples; ++i) {
    const std::string key = "s" + std::to_string(100 + i);
    std::string bin(150 + 97 * i, '\0');
    for (char& c : bin) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
    const std::string cls = std::to_string(i);
    entries.push_back({key + ".bin", bin});
    entries.push_back({key + ".cls", cls});
    original[key] = {{"bin", bin}, {"cls", cls}};
  }
  return entries;
}

// WrittenShard is `entries` as TarWriter writes them with `compression`.
std::string WrittenShard(const std::vector<TarEntry>& entries, TarCompression compression) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/shard";
  absl::StatusOr<std::unique_ptr<TarWriter>> w =
      TarWriter::Create(path, {.compression = compression});
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return "";
  for (const TarEntry& e : entries) EXPECT_TRUE((*w)->WriteMember(e.name, e.data).ok());
  EXPECT_TRUE((*w)->Close().ok());
  return testing::ReadFile(path);
}

// ZstdAsWritten is `data` compressed as TarWriter compresses a zstd shard: one
// frame with a content checksum. Without the checksum (libarchive's zstd
// writer, which TarWriter once used) a flipped bit in a literal is
// undetectable: nothing in the frame says what the bytes were. The frame goes
// through a file at `path`, removed again (ext4, auto_da_alloc, flushes a truncated and
// rewritten file to disk on close: reusing one would cost milliseconds each).
std::string ZstdAsWritten(const std::string& data, const std::string& path) {
  absl::StatusOr<std::unique_ptr<ZstdFileSink>> sink = ZstdFileSink::Create(path, -1);
  EXPECT_TRUE(sink.ok()) << sink.status();
  if (!sink.ok()) return "";
  EXPECT_TRUE((*sink)->Write(data) && (*sink)->Finish()) << (*sink)->error_message();
  std::string frame = testing::ReadFile(path);
  std::remove(path.c_str());
  return frame;
}

std::vector<Handler> AllHandlers() {
  return {Handler::kReraise, Handler::kWarnAndContinue, Handler::kIgnoreAndContinue,
          Handler::kWarnAndStop, Handler::kIgnoreAndStop};
}

struct Outcome {
  // The keys in the order they came, from each shard.
  std::vector<std::string> damaged;
  std::vector<std::string> intact;
  absl::Status status;
  // What the warn handlers said, and every error the handlers counted.
  std::vector<std::string> warnings;
  int64_t counted = 0;
};

// ReadShards reads `shards` in order through a Loader with one worker.
Outcome ReadShards(const std::map<std::string, std::string>& shards,
                   const std::vector<std::string>& urls, Handler handler, const Original& original,
                   const std::string& context) {
  Opener opener = [&shards](std::string_view url) -> absl::StatusOr<std::unique_ptr<ByteStream>> {
    return MemoryStream(std::string(url), shards.at(std::string(url)));
  };
  absl::StatusOr<Pipeline> p = WebDataset(urls, {.handler = handler, .opener = opener});
  EXPECT_TRUE(p.ok());
  Outcome out;
  std::mutex mu;  // warnings come from the worker thread
  Loader loader(*p, {.workers = 1, .warn = [&](std::string_view message) {
                       std::lock_guard<std::mutex> lock(mu);
                       out.warnings.emplace_back(message);
                     }});
  while (true) {
    absl::StatusOr<std::optional<Sample>> item = loader.Next();
    if (!item.ok()) {
      out.status = item.status();
      break;
    }
    if (!item->has_value()) break;
    const Sample& s = **item;
    const std::string key(s.key());
    auto it = original.find(key);
    EXPECT_NE(it, original.end()) << context << ": unknown key " << key;
    if (it == original.end()) continue;
    // Exactly the original fields with the original bytes: never a partial or
    // altered sample.
    EXPECT_EQ(s.size(), 2u + it->second.size()) << context << ": key " << key;
    for (const auto& [field, bytes] : it->second) {
      const Buffer* b = s.GetBytes(field);
      EXPECT_TRUE(b != nullptr && b->view() == bytes) << context << ": key " << key << " " << field;
    }
    (s.url() == "damaged.tar" ? out.damaged : out.intact).push_back(key);
  }
  out.counted = loader.errors().Total();
  return out;
}

// Offsets are the byte offsets an error message names: in the compressed
// shard ("compressed offset N") and in the tar ("offset N").
struct Offsets {
  std::vector<int64_t> compressed;
  std::vector<int64_t> tar;
  bool empty() const { return compressed.empty() && tar.empty(); }
};

Offsets NamedOffsets(const std::string& message) {
  static const std::regex kOffset("(compressed )?offset ([0-9]+)");
  Offsets offsets;
  for (std::sregex_iterator it(message.begin(), message.end(), kOffset), end; it != end; ++it) {
    ((*it)[1].matched ? offsets.compressed : offsets.tar).push_back(std::stoll((*it)[2]));
  }
  return offsets;
}

// ExpectSound checks an outcome of reading `damaged` then the intact shard.
void ExpectSound(const Outcome& out, Handler handler, const std::vector<std::string>& order,
                 bool damaged_is_complete, const std::string& context) {
  // The damaged shard gives a prefix of its samples, in order; then, for
  // continue handlers, the intact shard gives all of its own.
  EXPECT_TRUE(out.damaged.size() <= order.size() &&
              std::equal(out.damaged.begin(), out.damaged.end(), order.begin()))
      << context;
  const size_t from_damaged = out.damaged.size();
  const std::vector<std::string>& rest = out.intact;
  const bool continues =
      handler == Handler::kWarnAndContinue || handler == Handler::kIgnoreAndContinue;
  if (damaged_is_complete) {
    EXPECT_TRUE(out.status.ok()) << context << ": " << out.status;
    EXPECT_EQ(from_damaged, order.size()) << context;
    EXPECT_EQ(rest, order) << context;  // then the intact shard
    EXPECT_EQ(out.counted, 0) << context;
    EXPECT_THAT(out.warnings, ::testing::IsEmpty()) << context;
    return;
  }
  // Whatever the handler does with it, the damage is one error, counted.
  EXPECT_EQ(out.counted, 1) << context;
  const bool warns = handler == Handler::kWarnAndContinue || handler == Handler::kWarnAndStop;
  if (warns) {
    // One warning, naming the shard: what was skipped is never silent.
    EXPECT_EQ(out.warnings.size(), 1u) << context;
    if (!out.warnings.empty()) EXPECT_THAT(out.warnings[0], HasSubstr("damaged.tar")) << context;
  } else {
    EXPECT_THAT(out.warnings, ::testing::IsEmpty()) << context;
  }
  if (handler == Handler::kReraise) {
    EXPECT_FALSE(out.status.ok()) << context;
    EXPECT_THAT(std::string(out.status.message()), HasSubstr("damaged.tar")) << context;
    EXPECT_TRUE(rest.empty()) << context;
  } else if (continues) {
    EXPECT_TRUE(out.status.ok()) << context << ": " << out.status;
    EXPECT_EQ(rest, order) << context << ": the intact shard must follow whole";
  } else {
    EXPECT_TRUE(out.status.ok()) << context << ": " << out.status;
    EXPECT_TRUE(rest.empty()) << context << ": a stop handler ends the stream";
  }
}

class CorruptionSweepTest : public ::testing::TestWithParam<Compression> {
 protected:
  void SetUp() override {
    entries_ = Entries(original_);
    plain_ = WrittenShard(entries_, TarCompression::kNone);
    // Plain ustar headers (no pax): the header sweep finds them by size.
    size_t size = 1024;  // the end-of-archive blocks
    for (const TarEntry& e : entries_) size += 512 + (e.data.size() + 511) / 512 * 512;
    ASSERT_EQ(plain_.size(), size);
    switch (GetParam()) {
      case Compression::kNone:
        intact_ = plain_;
        break;
      case Compression::kZstd:
        intact_ = WrittenShard(entries_, TarCompression::kZstd);
        // Damaged tars are compressed exactly as the writer compresses.
        ASSERT_EQ(Compressed(plain_), intact_);
        break;
      default: {
        intact_ = WrittenShard(entries_, TarCompression::kGzip);
        // The same but for the time stamp in the gzip header (bytes 4-7),
        // which TarWriter leaves at 0.
        std::string compressed = Compressed(plain_);
        ASSERT_GT(compressed.size(), 8u);
        compressed.replace(4, 4, 4, '\0');
        ASSERT_EQ(compressed, intact_);
      }
    }
    for (const auto& [key, fields] : original_) order_.push_back(key);
  }
  std::string Compressed(const std::string& tar) const {
    switch (GetParam()) {
      case Compression::kNone:
        return tar;
      case Compression::kZstd:
        return ZstdAsWritten(tar, dir_.path() + "/damaged.tar.zst");
      default:
        return testing::Compress(tar, GetParam());
    }
  }
  Outcome Read(const std::string& damaged, Handler handler, const std::string& context) const {
    return ReadShards({{"damaged.tar", damaged}, {"intact.tar", intact_}},
                      {"damaged.tar", "intact.tar"}, handler, original_, context);
  }
  // ExpectTruncationOffsets checks where an error about the shard cut at
  // `cut` says the damage is. A decompressor that meets the end names the
  // compressed offset, the cut itself; the tar reader names the header or
  // member where its data ran out: at most a member (data and header, 1024
  // bytes here) before the cut in a plain tar. Only a shard too short to hold
  // one header is no tar at all, with no offset to name.
  void ExpectTruncationOffsets(const absl::Status& status, size_t cut,
                               const std::string& context) const {
    const std::string message(status.message());
    const Offsets offsets = NamedOffsets(message);
    const int64_t end = static_cast<int64_t>(cut);
    if (offsets.empty()) {
      EXPECT_THAT(message, HasSubstr("damaged.tar: not a tar archive")) << context;
      if (GetParam() == Compression::kNone) EXPECT_LT(cut, 512u) << context << ": " << message;
      return;
    }
    for (int64_t offset : offsets.compressed) EXPECT_EQ(offset, end) << context << ": " << message;
    for (int64_t offset : offsets.tar) {
      if (GetParam() == Compression::kNone) {
        EXPECT_TRUE(offset <= end && offset >= end - 1024) << context << ": " << message;
      } else {
        EXPECT_LE(offset, static_cast<int64_t>(plain_.size())) << context << ": " << message;
      }
    }
  }

  testing::TempDir dir_;  // for the zstd frames of damaged tars
  Original original_;
  std::vector<TarEntry> entries_;
  std::string plain_;
  std::string intact_;
  std::vector<std::string> order_;
};

TEST_P(CorruptionSweepTest, EveryTruncationPoint) {
  // The tar ends with two zero blocks; a cut right after the first of them
  // leaves a complete archive (as tar itself reads it). A cut inside the
  // second is a partial block: an error, and, as after any damage, the last
  // sample is dropped, since more of its members might have followed.
  auto complete = [&](size_t cut) {
    return cut == intact_.size() ||
           (GetParam() == Compression::kNone && cut == intact_.size() - 512);
  };
  for (size_t cut = 0; cut <= intact_.size(); ++cut) {
    for (Handler handler : AllHandlers()) {
      const std::string context = "cut at " + std::to_string(cut) + " of " +
                                  std::to_string(intact_.size()) + ", " +
                                  std::string(HandlerName(handler));
      Outcome out = Read(intact_.substr(0, cut), handler, context);
      ExpectSound(out, handler, order_, complete(cut), context);
      if (!out.status.ok()) ExpectTruncationOffsets(out.status, cut, context);
      if (::testing::Test::HasFailure()) return;  // one case is enough to debug
    }
  }
}

TEST_P(CorruptionSweepTest, BitFlipInEveryHeaderByte) {
  // Headers are the 512-byte blocks at each member's start (ustar: no pax).
  std::vector<size_t> headers;
  size_t offset = 0;
  for (const TarEntry& e : entries_) {
    headers.push_back(offset);
    offset += 512 + (e.data.size() + 511) / 512 * 512;
  }
  for (size_t header : headers) {
    for (size_t byte = 0; byte < 512; ++byte) {
      std::string tar = plain_;
      tar[header + byte] ^= static_cast<char>(1 << (byte % 8));
      const std::string damaged = Compressed(tar);
      for (Handler handler : AllHandlers()) {
        const std::string context = "header at " + std::to_string(header) + ", byte " +
                                    std::to_string(byte) + ", " + std::string(HandlerName(handler));
        Outcome out = Read(damaged, handler, context);
        // A flip that changes no value (in the checksum field's terminator,
        // say) leaves the archive whole; any other is caught by the checksum.
        const bool whole = out.status.ok() && out.damaged == order_ && out.intact == order_;
        ExpectSound(out, handler, order_, whole, context);
        if (!out.status.ok()) {
          // The damaged header is where the reader stopped, and it says so;
          // a damaged first header leaves no tar to recognise.
          const std::string message(out.status.message());
          if (header == 0 && NamedOffsets(message).empty()) {
            EXPECT_EQ(message, "damaged.tar: not a tar archive (Unrecognized archive format)")
                << context;
          } else {
            EXPECT_THAT(NamedOffsets(message).tar, Contains(static_cast<int64_t>(header)))
                << context << ": " << message;
          }
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Compressed shards only: a bit flipped in every byte of the gzip or zstd
// stream (headers, blocks, checksums), so that the decompressor, not the tar
// reader, meets the damage first. A flip that changes nothing the format
// checks (a gzip header's modification time) leaves the shard whole.
class CompressedCorruptionSweepTest : public CorruptionSweepTest {};

TEST_P(CompressedCorruptionSweepTest, BitFlipInEveryCompressedByte) {
  for (size_t byte = 0; byte < intact_.size(); ++byte) {
    std::string damaged = intact_;
    damaged[byte] ^= static_cast<char>(1 << (byte % 8));
    for (Handler handler : AllHandlers()) {
      const std::string context = "compressed byte " + std::to_string(byte) + " of " +
                                  std::to_string(intact_.size()) + ", " +
                                  std::string(HandlerName(handler));
      Outcome out = Read(damaged, handler, context);
      const bool whole = out.status.ok() && out.damaged == order_ && out.intact == order_;
      ExpectSound(out, handler, order_, whole, context);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

std::string CompressionName(const ::testing::TestParamInfo<Compression>& info) {
  switch (info.param) {
    case Compression::kNone:
      return "Plain";
    case Compression::kGzip:
      return "Gzip";
    default:
      return "Zstd";
  }
}

INSTANTIATE_TEST_SUITE_P(AllCompressions, CorruptionSweepTest,
                         ::testing::Values(Compression::kNone, Compression::kGzip,
                                           Compression::kZstd),
                         CompressionName);
INSTANTIATE_TEST_SUITE_P(Compressed, CompressedCorruptionSweepTest,
                         ::testing::Values(Compression::kGzip, Compression::kZstd),
                         CompressionName);

}  // namespace
}  // namespace wds
