// Resource limits against hostile input: each bomb ends in its documented
// error, and the peak memory of the process that met it stays bounded. Each
// case runs in a child process so that getrusage's peak RSS is its own.
#include <sys/resource.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/decode/decode.h"
#include "wds/image/image.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

struct ChildRun {
  std::string output;  // what the child's function returned
  int64_t peak_rss_mb = 0;
};

// RunInChild runs `fn` in a forked child and returns its result and the
// child's own peak resident set size.
ChildRun RunInChild(const std::function<std::string()>& fn) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string out = fn();
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  ChildRun run;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) run.output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  run.peak_rss_mb = usage.ru_maxrss / 1024;
  return run;
}

std::string StatusText(const absl::Status& s) {
  return std::string(absl::StatusCodeToString(s.code())) + ": " + std::string(s.message());
}

// ReadShard reads `path` through a WebDataset pipeline and returns how it
// ended.
std::string ReadShard(const std::string& path) {
  absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{path}, {});
  if (!p.ok()) return StatusText(p.status());
  std::unique_ptr<SampleStream> stream = p->Open({});
  int samples = 0;
  while (true) {
    SampleResult item = stream->Next();
    if (!item.ok()) return std::to_string(samples) + " samples, then " + StatusText(item.status());
    if (!item->has_value()) return std::to_string(samples) + " samples, end";
    ++samples;
  }
}

// UstarHeader is a ustar header for a file `name` of `size` bytes and type
// `typeflag` ('0': regular file, 'x': pax extended header); sizes from 8 GiB
// up use GNU's base-256 encoding.
std::string UstarHeader(const std::string& name, uint64_t size, char typeflag = '0') {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), name.size());
  std::memcpy(&h[100], "0000644", 7);
  std::memcpy(&h[108], "0000000", 7);
  std::memcpy(&h[116], "0000000", 7);
  if (size >= (uint64_t{1} << 33)) {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>(size >> (8 * i));
  } else {
    std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(size));
  }
  std::memcpy(&h[136], "00000000000", 11);
  h[156] = typeflag;
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  return h;
}

// PaxSize is a pax extended header whose only record, size=`size`, overrides
// the size in the ustar header that follows it.
std::string PaxSize(const std::string& name, uint64_t size) {
  const std::string body = " size=" + std::to_string(size) + "\n";
  // A record's length counts its own digits.
  size_t length = body.size() + 1;
  while (std::to_string(length).size() + body.size() != length) ++length;
  const std::string record = std::to_string(length) + body;
  return UstarHeader("PaxHeaders/" + name, record.size(), 'x') + record +
         std::string(512 - record.size(), '\0');
}

// TebibyteBomb is a tar whose second member, a.jpg at offset 1024, claims
// 1 TiB in a ustar header (GNU base-256) and is followed by 1 MiB of data.
std::string TebibyteBomb() {
  return UstarHeader("a.cls", 1) + "1" + std::string(511, '\0') +
         UstarHeader("a.jpg", uint64_t{1} << 40) + std::string(1 << 20, 'x');
}

TEST(TarLimitsTest, OneTebibyteMemberIsRefusedWithoutAllocating) {
  TempDir dir;
  const std::string path = dir.Write("bomb.tar", TebibyteBomb());
  ChildRun run = RunInChild([&] { return ReadShard(path); });
  EXPECT_THAT(run.output, HasSubstr("0 samples, then RESOURCE_EXHAUSTED: " + path +
                                    ": member a.jpg at offset 1024 is 1099511627776 bytes, "
                                    "more than max_member_size 1073741824"));
  EXPECT_LT(run.peak_rss_mb, 100) << "peak RSS " << run.peak_rss_mb << " MB";
}

TEST(TarLimitsTest, LyingHeaderBelowTheLimitCostsOnlyTheBytesSent) {
  // 900 MiB announced, 4 MiB sent: memory follows the bytes, not the claim.
  TempDir dir;
  const std::string path =
      dir.Write("short.tar", UstarHeader("a.bin", uint64_t{900} << 20) + std::string(4 << 20, 'x'));
  ChildRun run = RunInChild([&] { return ReadShard(path); });
  EXPECT_THAT(run.output, HasSubstr("0 samples, then DATA_LOSS: " + path +
                                    ": member a.bin at offset 0: truncated or corrupt after "));
  EXPECT_THAT(run.output, HasSubstr(" of 943718400 bytes"));
  EXPECT_LT(run.peak_rss_mb, 100) << "peak RSS " << run.peak_rss_mb << " MB";
}

TEST(TarLimitsTest, PaxSizeOfOneTebibyteIsRefusedWithoutAllocating) {
  // The ustar header says 1 MiB; the pax record before it says 1 TiB, and
  // the pax record is what counts.
  TempDir dir;
  const std::string path =
      dir.Write("pax.tar", UstarHeader("a.cls", 1) + "1" + std::string(511, '\0') +
                               PaxSize("a.jpg", uint64_t{1} << 40) + UstarHeader("a.jpg", 1 << 20) +
                               std::string(1 << 20, 'x'));
  ChildRun run = RunInChild([&] { return ReadShard(path); });
  EXPECT_THAT(run.output, HasSubstr("0 samples, then RESOURCE_EXHAUSTED: " + path +
                                    ": member a.jpg at offset 1024 is 1099511627776 bytes, "
                                    "more than max_member_size 1073741824"));
  EXPECT_LT(run.peak_rss_mb, 100) << "peak RSS " << run.peak_rss_mb << " MB";
}

TEST(TarLimitsTest, LyingHeaderInACompressedShardIsRefusedWithoutAllocating) {
  // Compressed, the 1 MiB of data costs a few hundred bytes: the header is
  // refused as it comes out of the decompressor, for zlib's gzip stream and
  // libarchive's zstd alike.
  for (auto [compression, name] : {std::pair{testing::Compression::kGzip, "bomb.tar.gz"},
                                   std::pair{testing::Compression::kZstd, "bomb.tar.zst"}}) {
    TempDir dir;
    const std::string shard = testing::Compress(TebibyteBomb(), compression);
    ASSERT_LT(shard.size(), 64u << 10);
    const std::string path = dir.Write(name, shard);
    ChildRun run = RunInChild([&] { return ReadShard(path); });
    EXPECT_THAT(run.output, HasSubstr("0 samples, then RESOURCE_EXHAUSTED: " + path +
                                      ": member a.jpg at offset 1024 is 1099511627776 bytes, "
                                      "more than max_member_size 1073741824"));
    EXPECT_LT(run.peak_rss_mb, 100) << name << ": peak RSS " << run.peak_rss_mb << " MB";
  }
}

// LimitAddressSpace caps the calling process's address space at what it maps
// now plus `extra` bytes, so that any reservation beyond that fails.
void LimitAddressSpace(size_t extra) {
  const std::string status = testing::ReadFile("/proc/self/status");
  const size_t at = status.find("VmSize:");
  const size_t vm_kb = std::stoull(status.substr(at + 7));
  const rlimit limit{vm_kb * 1024 + extra, vm_kb * 1024 + extra};
  setrlimit(RLIMIT_AS, &limit);
}

TEST(TarLimitsTest, LyingHeaderReservesNoFasterThanBytesArrive) {
  // 900 MiB announced, 4 MiB sent, and 200 MiB of address space to spare:
  // reserving the claim up front would fail to allocate; storage that grows
  // with the bytes reaches the truncation and reports it.
  TempDir dir;
  const std::string path =
      dir.Write("short.tar", UstarHeader("a.bin", uint64_t{900} << 20) + std::string(4 << 20, 'x'));
  ChildRun run = RunInChild([&] {
    LimitAddressSpace(size_t{200} << 20);
    return ReadShard(path);
  });
  EXPECT_EQ(run.output, "0 samples, then DATA_LOSS: " + path +
                            ": member a.bin at offset 0: truncated or corrupt after 4194304 of "
                            "943718400 bytes: Truncated tar archive");
}

TEST(TarLimitsTest, MemberAboveTheGrowthThresholdArrivesWhole) {
  // 100 MiB of data grows its storage 32 -> 64 -> 100 MiB as it arrives; the
  // sample holds every byte, and the address space needed stays within the
  // final size plus the block before it (mremap moves pages, not bytes).
  constexpr size_t kSize = size_t{100} << 20;
  std::string data(kSize, '\0');
  uint32_t x = 1;
  for (size_t i = 0; i < kSize; i += 4096) data[i] = static_cast<char>((x = x * 69069u + 1) >> 24);
  TempDir dir;
  const std::string path =
      dir.Write("big.tar", UstarHeader("a.bin", kSize) + data + std::string(1024, '\0'));
  ChildRun run = RunInChild([&] {
    LimitAddressSpace(size_t{300} << 20);
    absl::StatusOr<Pipeline> p = WebDataset(std::vector<std::string>{path}, {});
    if (!p.ok()) return StatusText(p.status());
    std::unique_ptr<SampleStream> stream = p->Open({});
    SampleResult item = stream->Next();
    if (!item.ok()) return StatusText(item.status());
    if (!item->has_value()) return std::string("no sample");
    const Buffer* bin = (**item).GetBytes("bin");
    if (bin == nullptr) return std::string("no bin field");
    return std::string(bin->view() == data ? "equal" : "different") + ", " +
           std::to_string(bin->size()) + " bytes";
  });
  EXPECT_EQ(run.output, "equal, 104857600 bytes");
}

// GzipZeros is a gzip stream of `bytes` zero bytes, compressed as it is made.
std::string GzipZeros(size_t bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<unsigned char> zeros(1 << 20, 0);
  std::string out;
  std::vector<unsigned char> chunk(1 << 16);
  size_t left = bytes;
  int flush = Z_NO_FLUSH;
  do {
    const size_t n = std::min(left, zeros.size());
    left -= n;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = zeros.data();
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = chunk.data();
      z.avail_out = static_cast<uInt>(chunk.size());
      deflate(&z, flush);
      out.append(reinterpret_cast<char*>(chunk.data()), chunk.size() - z.avail_out);
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  return out;
}

TEST(DecodeLimitsTest, GibibyteOfZerosInAGzFieldStopsAtTheLimit) {
  // 1024 gzip members of 1 MiB of zeros each: gzip(1) and the decoder read
  // concatenated members as one stream of 1 GiB.
  const std::string member = GzipZeros(size_t{1} << 20);
  std::string bomb;
  for (int i = 0; i < 1024; ++i) bomb += member;
  ASSERT_LT(bomb.size(), 8u << 20);  // about a thousandth of what it expands to
  ChildRun run = RunInChild([&] {
    Sample sample = testing::MakeSample("k", {{"npy.gz", bomb}});
    Rng rng(1);
    return StatusText(DecodeSample(sample, BasicDecoders(), DecodeOptions(), rng));
  });
  EXPECT_EQ(run.output,
            "RESOURCE_EXHAUSTED: mem/shard-000.tar: key k: field npy.gz: gzip data expands beyond "
            "268435456 bytes (DecodeOptions.max_decompressed_bytes)");
  // The 256 MiB limit itself, plus the process: never the whole GiB.
  EXPECT_LT(run.peak_rss_mb, 256 + 100) << "peak RSS " << run.peak_rss_mb << " MB";
}

// PatchedJpeg is a small JPEG whose SOF0 header claims width x height.
std::string PatchedJpeg(int width, int height) {
  std::vector<unsigned char> pixels(8 * 8 * 3, 128);
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, pixels.data(), 8, 0, 8, TJPF_RGB, &jpeg, &size, TJSAMP_444, 90, 0), 0);
  std::string out(reinterpret_cast<char*>(jpeg), size);
  tjFree(jpeg);
  tjDestroy(tj);
  const size_t sof = out.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  out[sof + 5] = static_cast<char>(height >> 8);
  out[sof + 6] = static_cast<char>(height);
  out[sof + 7] = static_cast<char>(width >> 8);
  out[sof + 8] = static_cast<char>(width);
  return out;
}

// PngHeader is a PNG signature and IHDR chunk (valid CRC) claiming
// width x height 8-bit RGB, followed by nothing.
std::string PngHeader(uint32_t width, uint32_t height) {
  std::string ihdr = "IHDR";
  for (uint32_t v : {width, height}) {
    for (int i = 3; i >= 0; --i) ihdr.push_back(static_cast<char>(v >> (8 * i)));
  }
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);
  const uint32_t crc =
      crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), static_cast<uInt>(ihdr.size()));
  std::string png("\x89PNG\r\n\x1a\n\x00\x00\x00\x0d", 12);
  png += ihdr;
  for (int i = 3; i >= 0; --i) png.push_back(static_cast<char>(crc >> (8 * i)));
  return png;
}

TEST(ImageLimitsTest, GiantJpegAndPngHeadersAreRefusedBeforeAllocating) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {PatchedJpeg(65535, 65535),
       "RESOURCE_EXHAUSTED: JPEG image too large: Maximum supported image dimension is 65500 "
       "pixels"},
      {PatchedJpeg(65500, 65500),
       "RESOURCE_EXHAUSTED: JPEG image is 65500x65500 (4290250000 pixels), more than "
       "max_pixels 268435456"},
      {PngHeader(65535, 65535),
       "RESOURCE_EXHAUSTED: PNG image is 65535x65535 (4294836225 pixels), more than "
       "max_pixels 268435456"},
  };
  for (const auto& [data, expected] : cases) {
    ChildRun run = RunInChild([&] {
      Rng rng(1);
      return StatusText(
          DecodeImage(data, *ParseImageSpec("rgb8"), ImageDecodeOptions(), rng).status());
    });
    EXPECT_EQ(run.output, expected);
    EXPECT_LT(run.peak_rss_mb, 100) << "peak RSS " << run.peak_rss_mb << " MB";
  }
}

// Le32 is `v` as 4 little-endian bytes.
std::string Le32(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

// Riff wraps one chunk in a RIFF WebP container.
std::string Riff(const std::string& fourcc, std::string payload) {
  const uint32_t size = static_cast<uint32_t>(payload.size());
  if (payload.size() % 2 == 1) payload.push_back('\0');
  const std::string chunk = fourcc + Le32(size) + payload;
  return "RIFF" + Le32(static_cast<uint32_t>(4 + chunk.size())) + "WEBP" + chunk;
}

// WebpLossless is a VP8L WebP claiming width x height (14 bits each: at most
// 16384), followed by 64 zero bytes of bitstream.
std::string WebpLossless(uint32_t width, uint32_t height) {
  return Riff("VP8L", "\x2f" + Le32((width - 1) | ((height - 1) << 14)) + std::string(64, '\0'));
}

// WebpLossy is a VP8 key frame claiming width x height (14 bits each: at
// most 16383), whose 32-byte first partition is zeros.
std::string WebpLossy(uint32_t width, uint32_t height) {
  const uint32_t tag = (1u << 4) | (32u << 5);  // key frame, shown, partition of 32 bytes
  std::string vp8 = Le32(tag).substr(0, 3) + "\x9d\x01\x2a";
  vp8 += Le32(width | (height << 16));
  return Riff("VP8 ", vp8 + std::string(64, '\0'));
}

TEST(ImageLimitsTest, GiantWebpHeadersAreBoundedBeforeAllocating) {
  // WebP's own format bounds it: width and height have 14 bits, so a WebP
  // has at most 16384 x 16384 = 2^28 pixels (16383 x 16383 when lossy),
  // which the default max_pixels (2^28) admits. Such headers with no image
  // behind them cost only what the decoder touches before the bitstream
  // fails; below the format's bound, max_pixels refuses them from the
  // header alone.
  ImageDecodeOptions lowered;
  lowered.max_pixels = int64_t{1} << 24;
  const std::vector<std::tuple<std::string, ImageDecodeOptions, std::string>> cases = {
      {WebpLossless(16384, 16384), ImageDecodeOptions(),
       "DATA_LOSS: corrupt WebP: bitstream error"},
      {WebpLossy(16383, 16383), ImageDecodeOptions(), "DATA_LOSS: truncated WebP: not enough data"},
      {WebpLossless(16384, 16384), lowered,
       "RESOURCE_EXHAUSTED: WebP image is 16384x16384 (268435456 pixels), more than max_pixels "
       "16777216"},
      {WebpLossy(16383, 16383), lowered,
       "RESOURCE_EXHAUSTED: WebP image is 16383x16383 (268402689 pixels), more than max_pixels "
       "16777216"},
  };
  for (const auto& [data, options, expected] : cases) {
    ChildRun run = RunInChild([&] {
      Rng rng(1);
      return StatusText(DecodeImage(data, *ParseImageSpec("rgb8"), options, rng).status());
    });
    EXPECT_EQ(run.output, expected);
    EXPECT_LT(run.peak_rss_mb, 100) << expected << ": peak RSS " << run.peak_rss_mb << " MB";
  }
}

}  // namespace
}  // namespace wds
