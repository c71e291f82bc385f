// Tests for PNG and WebP decoding, bad input, the image FieldDecoder and
// Pipeline::Decode(spec). PNG fixtures and their expected pixels come from
// tests/image/image_fixtures.py (its own PNG writer, numpy, PIL); WebP expectations
// from dwebp.
#include <zlib.h>

#include <string>
#include <thread>
#include <vector>

#include "base/output_slots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/codecs.h"
#include "image_test_util.h"
#include "util/test_util.h"
#include "wds/image/image.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/pipeline/pipeline.h"

namespace wds {
namespace {

using image_testing::AddAlpha;
using image_testing::Bytes;
using image_testing::Decode;
using image_testing::DropAlpha;
using image_testing::Fixtures;
using image_testing::ParsePnm;
using image_testing::Pixels;
using image_testing::Resampled;
using image_testing::Resize;
using image_testing::SameBytes;
using image_testing::ToChw;
using image_testing::ToFloats;
using ::testing::HasSubstr;
using ::wds::testing::Drain;
using ::wds::testing::MakeSample;
using ::wds::testing::VectorSource;

constexpr int kPngWidth = 37;  // the PNG variants of image_fixtures.py
constexpr int kPngHeight = 23;
constexpr int kPhotoWidth = 161;
constexpr int kPhotoHeight = 121;

void ExpectError(const absl::StatusOr<Array>& result, absl::StatusCode code,
                 const std::string& fragment) {
  ASSERT_EQ(result.status().code(), code) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(fragment));
}

// --------------------------------------------------------------------- PNG

class PngVariantTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string Png() const { return Fixtures::Get().Read(std::string(GetParam()) + ".png"); }
  std::string Expected(const std::string& mode) const {
    return Fixtures::Get().Read(std::string(GetParam()) + "." + mode);
  }
  bool SixteenBit() const { return std::string(GetParam()).find("16") != std::string::npos; }
};

INSTANTIATE_TEST_SUITE_P(ColourTypesAndDepths, PngVariantTest,
                         ::testing::Values("gray1", "gray4", "gray8", "gray8_trns", "gray16",
                                           "gray16_trns", "gray_alpha8", "gray_alpha16", "rgb8",
                                           "rgb8_trns", "rgb16", "rgba8", "rgba16", "palette8_trns",
                                           "palette4"));

TEST_P(PngVariantTest, ByteSpecsMatchTheEncodedPixels) {
  for (const std::string spec : {"l8", "rgb8", "rgba8"}) {
    absl::StatusOr<Array> image = Decode(Png(), spec);
    ASSERT_TRUE(image.ok()) << spec << ": " << image.status();
    EXPECT_EQ(image->shape[0], kPngHeight) << spec;
    EXPECT_EQ(image->shape[1], kPngWidth) << spec;
    EXPECT_TRUE(SameBytes(Bytes(*image), Expected(spec))) << spec;
  }
}

TEST_P(PngVariantTest, FloatSpecsKeepSixteenBitPrecision) {
  for (const std::string mode : {"l", "rgb", "rgba"}) {
    absl::StatusOr<Array> image = Decode(Png(), mode);
    ASSERT_TRUE(image.ok()) << mode << ": " << image.status();
    const std::string expected =
        SixteenBit() ? Expected(mode + ".f32") : ToFloats(Expected(mode + "8"));
    EXPECT_TRUE(SameBytes(Bytes(*image), expected)) << mode;
  }
}

TEST_P(PngVariantTest, TorchSpecsAreChannelsFirst) {
  absl::StatusOr<Array> u8 = Decode(Png(), "torchrgba8");
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_TRUE(SameBytes(Bytes(*u8), ToChw(Expected("rgba8"), kPngHeight, kPngWidth, 4)));
  absl::StatusOr<Array> f = Decode(Png(), "torchrgb");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string rgb = SixteenBit() ? Expected("rgb.f32") : ToFloats(Expected("rgb8"));
  EXPECT_TRUE(SameBytes(Bytes(*f), ToChw(rgb, kPngHeight, kPngWidth, 3, 4)));
}

TEST(PngTest, PilEncodedFilteredPngMatchesItsSource) {
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("pil_rgb.png"), "rgb8");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(SameBytes(Bytes(*image), Fixtures::Get().Read("pil_rgb.rgb8")));
}

// The blocks fixtures hold 2x2 blocks of known colours exactly where a centre
// crop must look, and noise elsewhere: halving the crop gives the colours.
TEST(PngTest, CenterCropOfAWideImageShowsTheCentreBlocks) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("blocks_wide.png"), "rgb8",
                                       Resize(ResizeMode::kCenterCrop, 10, 10), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{10, 0, 20, 20}));
  EXPECT_TRUE(SameBytes(Bytes(*image), Fixtures::Get().Read("blocks_wide.expected")));
}

TEST(PngTest, CenterCropOfATallImageShowsTheCentreBlocks) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("blocks_tall.png"), "rgb8",
                                       Resize(ResizeMode::kCenterCrop, 10, 10), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{0, 10, 20, 20}));
  EXPECT_TRUE(SameBytes(Bytes(*image), Fixtures::Get().Read("blocks_tall.expected")));
}

TEST(PngTest, SixteenBitCropToFloatKeepsPrecision) {
  absl::StatusOr<Array> image =
      Decode(Fixtures::Get().Read("blocks16.png"), "l", Resize(ResizeMode::kCenterCrop, 10, 10));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_TRUE(SameBytes(Bytes(*image), Fixtures::Get().Read("blocks16.expected")));
}

TEST(PngTest, StretchResamplesTheFullImage) {
  const std::string png = Fixtures::Get().Read("pil_rgb.png");
  absl::StatusOr<Array> image = Decode(png, "rgb8", Resize(ResizeMode::kStretch, 50, 40));
  ASSERT_TRUE(image.ok()) << image.status();
  const Pixels full{kPhotoWidth, kPhotoHeight, 3, Fixtures::Get().Read("pil_rgb.rgb8")};
  EXPECT_TRUE(SameBytes(Bytes(*image), Resampled(full, {0, 0, kPhotoWidth, kPhotoHeight}, 50, 40)));
}

TEST(PngTest, GrayFromColourIsConvertedBeforeResampling) {
  absl::StatusOr<Array> image =
      Decode(Fixtures::Get().Read("rgb8.png"), "l8", Resize(ResizeMode::kStretch, 16, 9));
  ASSERT_TRUE(image.ok()) << image.status();
  const Pixels gray{kPngWidth, kPngHeight, 1, Fixtures::Get().Read("rgb8.l8")};
  EXPECT_TRUE(SameBytes(Bytes(*image), Resampled(gray, {0, 0, kPngWidth, kPngHeight}, 16, 9)));
}

// -------------------------------------------------------------------- WebP

TEST(WebpTest, LossyMatchesDwebp) {
  const std::string webp = Fixtures::Get().Read("photo.webp");
  const Pixels rgb = ParsePnm(Fixtures::Get().Read("photo.webp.ppm"));
  ImageDecodeInfo info;
  absl::StatusOr<Array> rgb8 = Decode(webp, "rgb8", {}, &info);
  ASSERT_TRUE(rgb8.ok()) << rgb8.status();
  EXPECT_EQ(info.format, ImageFormat::kWebp);
  EXPECT_EQ(rgb8->shape, (std::vector<int64_t>{kPhotoHeight, kPhotoWidth, 3}));
  EXPECT_TRUE(SameBytes(Bytes(*rgb8), rgb.data));
  absl::StatusOr<Array> rgba8 = Decode(webp, "rgba8");
  ASSERT_TRUE(rgba8.ok()) << rgba8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgba8), AddAlpha(rgb.data)));
  absl::StatusOr<Array> torch = Decode(webp, "torch");
  ASSERT_TRUE(torch.ok()) << torch.status();
  EXPECT_TRUE(SameBytes(Bytes(*torch), ToChw(ToFloats(rgb.data), kPhotoHeight, kPhotoWidth, 3, 4)));
}

TEST(WebpTest, LosslessKeepsTheSourcePixels) {
  const std::string webp = Fixtures::Get().Read("lossless.webp");
  absl::StatusOr<Array> rgb8 = Decode(webp, "rgb8");
  ASSERT_TRUE(rgb8.ok()) << rgb8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgb8), Fixtures::Get().Read("pil_rgb.rgb8")));
  absl::StatusOr<Array> l8 = Decode(webp, "l8");  // PIL's "L" of the source
  ASSERT_TRUE(l8.ok()) << l8.status();
  EXPECT_TRUE(SameBytes(Bytes(*l8), Fixtures::Get().Read("photo.l8")));
}

TEST(WebpTest, AlphaMatchesDwebp) {
  const std::string webp = Fixtures::Get().Read("alpha.webp");
  const Pixels rgba = ParsePnm(Fixtures::Get().Read("alpha.webp.pam"));
  ASSERT_EQ(rgba.channels, 4);
  absl::StatusOr<Array> rgba8 = Decode(webp, "rgba8");
  ASSERT_TRUE(rgba8.ok()) << rgba8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgba8), rgba.data));
  absl::StatusOr<Array> rgb8 = Decode(webp, "rgb8");
  ASSERT_TRUE(rgb8.ok()) << rgb8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgb8), DropAlpha(rgba.data)));
}

// DwebpResized runs dwebp with libwebp's own crop and resize.
std::string DwebpResized(const std::string& file, const ImageRect& crop, int width, int height) {
  const Fixtures& f = Fixtures::Get();
  f.Run("dwebp -quiet " + file + " -crop " + std::to_string(crop.x) + " " + std::to_string(crop.y) +
        " " + std::to_string(crop.width) + " " + std::to_string(crop.height) + " -resize " +
        std::to_string(width) + " " + std::to_string(height) + " -ppm -o resized.ppm");
  return ParsePnm(f.Read("resized.ppm")).data;
}

TEST(WebpTest, StretchScalesInsideLibwebp) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("photo.webp"), "rgb8",
                                       Resize(ResizeMode::kStretch, 40, 30), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.decoded_width, 40);
  EXPECT_EQ(info.decoded_height, 30);
  EXPECT_TRUE(SameBytes(Bytes(*image),
                        DwebpResized("photo.webp", {0, 0, kPhotoWidth, kPhotoHeight}, 40, 30)));
}

TEST(WebpTest, CenterCropCropsAndScalesInsideLibwebp) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("photo.webp"), "rgb8",
                                       Resize(ResizeMode::kCenterCrop, 50, 50), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{20, 0, 121, 121}));
  EXPECT_TRUE(SameBytes(Bytes(*image), DwebpResized("photo.webp", info.crop, 50, 50)));
}

TEST(WebpTest, RandomCropsStartAtEvenOffsets) {
  const std::string webp = Fixtures::Get().Read("photo.webp");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    ImageDecodeInfo info;
    absl::StatusOr<Array> image =
        Decode(webp, "rgb8", Resize(ResizeMode::kRandomResizedCrop, 24, 20), &info, seed);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(info.crop.x % 2, 0);
    EXPECT_EQ(info.crop.y % 2, 0);
    EXPECT_TRUE(SameBytes(Bytes(*image), DwebpResized("photo.webp", info.crop, 24, 20)))
        << "seed " << seed;
  }
}

TEST(WebpTest, AnimatedWebpIsInvalidArgument) {
  ExpectError(Decode(Fixtures::Get().Read("anim.webp"), "rgb8"), absl::StatusCode::kInvalidArgument,
              "animated WebP is not supported");
}

TEST(WebpTest, TruncatedWebpIsDataLoss) {
  const std::string webp = Fixtures::Get().Read("photo.webp");
  ExpectError(Decode(webp.substr(0, webp.size() / 2), "rgb8"), absl::StatusCode::kDataLoss,
              "truncated WebP");
}

// --------------------------------------------------------------- bad input

TEST(BadImageTest, TruncatedJpegIsDataLoss) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  ExpectError(Decode(jpeg.substr(0, jpeg.size() / 2), "rgb8"), absl::StatusCode::kDataLoss,
              "truncated JPEG: Premature end of JPEG file");
}

TEST(BadImageTest, JpegCutBeforeItsEndMarkerIsDataLoss) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  ExpectError(Decode(jpeg.substr(0, jpeg.size() - 2), "rgb8"), absl::StatusCode::kDataLoss,
              "truncated JPEG");
}

TEST(BadImageTest, BadMarkerLengthIsCorruptJpeg) {
  std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 2] = 0;
  jpeg[sof + 3] = 3;
  ExpectError(Decode(jpeg, "rgb8"), absl::StatusCode::kDataLoss,
              "corrupt JPEG: Bogus marker length");
}

TEST(BadImageTest, TwelveBitJpegIsAnUnsupportedVariant) {
  std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 4] = 12;  // sample precision
  ExpectError(Decode(jpeg, "rgb8"), absl::StatusCode::kInvalidArgument,
              "unsupported JPEG: Unsupported JPEG data precision 12");
}

TEST(BadImageTest, RandomBytesAreNotAnImage) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<char>((i * 89 + 7) % 256));
  ExpectError(Decode(bytes, "rgb8"), absl::StatusCode::kInvalidArgument,
              "not a JPEG, PNG or WebP image (300 bytes, starting 07 60 b9 12");
}

TEST(BadImageTest, EmptyDataIsNotAnImage) {
  ExpectError(Decode("", "rgb8"), absl::StatusCode::kInvalidArgument,
              "not a JPEG, PNG or WebP image (0 bytes");
}

TEST(BadImageTest, PngWithBadChecksumIsDataLoss) {
  std::string png = Fixtures::Get().Read("rgb8.png");
  png[29] ^= 0x40;  // the IHDR chunk's CRC
  ExpectError(Decode(png, "rgb8"), absl::StatusCode::kDataLoss,
              "corrupt PNG: invalid chunk checksum");
}

TEST(BadImageTest, PngWithCorruptImageDataIsDataLoss) {
  std::string png = Fixtures::Get().Read("rgb8.png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 10] ^= 0x40;
  ExpectError(Decode(png, "rgb8"), absl::StatusCode::kDataLoss, "corrupt PNG: ");
}

TEST(BadImageTest, TruncatedPngIsDataLoss) {
  const std::string png = Fixtures::Get().Read("rgb8.png");
  const absl::StatusOr<Array> result = Decode(png.substr(0, png.size() * 2 / 3), "rgb8");
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDataLoss) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("PNG: "));
}

TEST(BadImageTest, TooManyPixelsIsResourceExhaustedNamingTheSize) {
  ImageDecodeOptions options;
  options.max_pixels = 10000;
  for (const char* file : {"photo.jpg", "pil_rgb.png", "photo.webp"}) {
    ExpectError(Decode(Fixtures::Get().Read(file), "rgb8", options),
                absl::StatusCode::kResourceExhausted,
                "image is 161x121 (19481 pixels), more than max_pixels 10000");
  }
}

// PutBigEndian writes `value` into 2 or 4 bytes of `s` at `offset`.
void PutBigEndian(std::string& s, size_t offset, uint32_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) s[offset + i] = static_cast<char>(value >> (8 * (bytes - 1 - i)));
}

TEST(BadImageTest, HugeJpegIsRejectedFromItsHeader) {
  std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  PutBigEndian(jpeg, sof + 5, 60000, 2);  // height
  PutBigEndian(jpeg, sof + 7, 60000, 2);  // width
  ExpectError(Decode(jpeg, "rgb8"), absl::StatusCode::kResourceExhausted,
              "JPEG image is 60000x60000 (3600000000 pixels), more than max_pixels 268435456");
}

TEST(BadImageTest, HugePngIsRejectedFromItsHeader) {
  std::string png = Fixtures::Get().Read("rgb8.png");
  PutBigEndian(png, 16, 100000, 4);
  PutBigEndian(png, 20, 100000, 4);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  PutBigEndian(png, 29, static_cast<uint32_t>(crc), 4);
  ExpectError(Decode(png, "rgb8"), absl::StatusCode::kResourceExhausted,
              "PNG image is 100000x100000");
}

TEST(BadImageTest, JpegWithTooManyScansIsResourceExhausted) {
  // Repeating the last scan of a progressive JPEG keeps it decodable while
  // the scan count grows past the limit.
  const std::string jpeg = Fixtures::Get().Read("progressive.jpg");
  const size_t last_scan = jpeg.rfind("\xff\xda");
  const size_t end = jpeg.rfind("\xff\xd9");
  ASSERT_LT(last_scan, end);
  std::string hostile = jpeg.substr(0, end);
  for (int i = 0; i < 600; ++i) hostile += jpeg.substr(last_scan, end - last_scan);
  hostile += jpeg.substr(end);
  ExpectError(Decode(hostile, "rgb8"), absl::StatusCode::kResourceExhausted,
              "JPEG: more than 500 scans");
}

TEST(BadImageTest, InvalidOptionsAreRejectedBeforeDecoding) {
  ExpectError(Decode(Fixtures::Get().Read("photo.jpg"), "rgb8", Resize(ResizeMode::kStretch, 0, 5)),
              absl::StatusCode::kInvalidArgument, "resize to 0x5");
}

// ----------------------------------------------------------- FieldDecoder

absl::StatusOr<std::optional<Value>> RunDecoder(const FieldDecoder& decoder, std::string_view field,
                                                const std::string& data, uint64_t seed = 0) {
  Rng rng(seed);
  DecodeContext ctx{"key", &rng};
  return decoder(field, Buffer::Copy(data), ctx);
}

// RecordingSlots offers fresh storage of the asked size (or, with `skew`,
// that many bytes more) and records each request.
class RecordingSlots final : public OutputSlots {
 public:
  explicit RecordingSlots(size_t skew = 0) : skew_(skew) {}
  Buffer Offer(std::string_view field, DType dtype, const std::vector<int64_t>& shape) override {
    fields.emplace_back(field);
    shapes.push_back(shape);
    dtypes.push_back(dtype);
    Array probe{dtype, shape, {}};
    offered = Buffer::Allocate(probe.nbytes() + skew_);
    return offered;
  }
  std::vector<std::string> fields;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DType> dtypes;
  Buffer offered;

 private:
  size_t skew_;
};

TEST(OutputSlotsTest, EveryCodecAndOutputIsWrittenIntoTheOfferedStorage) {
  const ImageDecodeOptions crop = Resize(ResizeMode::kCenterCrop, 24, 20);
  for (const char* file : {"photo.jpg", "photo.webp", "pil_rgb.png"}) {
    const std::string data = Fixtures::Get().Read(file);
    for (const char* spec : {"rgb8", "l8", "torchrgb", "rgba"}) {
      for (const ImageDecodeOptions& options : {ImageDecodeOptions{}, crop}) {
        SCOPED_TRACE(std::string(file) + " " + spec);
        absl::StatusOr<Array> plain = Decode(data, spec, options);
        ASSERT_TRUE(plain.ok()) << plain.status();
        RecordingSlots slots;
        Rng rng(1);
        absl::StatusOr<Array> slotted =
            DecodeImageInto(data, *ParseImageSpec(spec), options, rng, nullptr, &slots, "img.jpg");
        ASSERT_TRUE(slotted.ok()) << slotted.status();
        EXPECT_EQ(slotted->data.data(), slots.offered.data());
        EXPECT_EQ(slots.fields, std::vector<std::string>{"img.jpg"});
        EXPECT_EQ(slots.shapes, std::vector<std::vector<int64_t>>{plain->shape});
        EXPECT_EQ(slots.dtypes, std::vector<DType>{plain->dtype});
        EXPECT_EQ(slotted->shape, plain->shape);
        EXPECT_EQ(Bytes(*slotted), Bytes(*plain));
      }
    }
  }
}

TEST(OutputSlotsTest, StorageOfAnotherSizeIsNotUsed) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  RecordingSlots slots(/*skew=*/1);
  Rng rng(1);
  absl::StatusOr<Array> image =
      DecodeImageInto(jpeg, *ParseImageSpec("rgb8"), {}, rng, nullptr, &slots, "jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(slots.fields.size(), 1u);
  EXPECT_NE(image->data.data(), slots.offered.data());
  EXPECT_EQ(Bytes(*image), Bytes(*Decode(jpeg, "rgb8")));
}

TEST(OutputSlotsTest, ImageDecoderOffersTheFieldItDecodes) {
  auto slots = std::make_shared<RecordingSlots>();
  WorkerContext worker;
  Rewire(worker).output_slots = slots;
  Rng rng(0);
  DecodeContext ctx{"key", &rng, &worker};
  absl::StatusOr<std::optional<Value>> result =
      (*ImageDecoder("rgb8"))("seg.png", Buffer::Copy(Fixtures::Get().Read("pil_rgb.png")), ctx);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(slots->fields, std::vector<std::string>{"seg.png"});
  EXPECT_EQ(std::get<Array>(**result).data.data(), slots->offered.data());
}

TEST(ImageDecoderTest, UnknownSpecIsASetupError) {
  absl::StatusOr<FieldDecoder> decoder = ImageDecoder("RGB");
  ASSERT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoder.status().message(), HasSubstr("\"RGB\""));
}

TEST(ImageDecoderTest, InvalidOptionsAreASetupError) {
  ImageDecodeOptions options;
  options.hflip = -1;
  EXPECT_EQ(ImageDecoder("rgb8", options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ImageDecoderTest, DeclinesFieldsWithOtherExtensions) {
  const FieldDecoder decoder = *ImageDecoder("rgb8");
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  for (const char* field : {"txt", "gif", "npy", "jpg.txt", "jpgx"}) {
    absl::StatusOr<std::optional<Value>> result = RunDecoder(decoder, field, jpeg);
    ASSERT_TRUE(result.ok()) << field;
    EXPECT_FALSE(result->has_value()) << field;
  }
}

TEST(ImageDecoderTest, AcceptsImageExtensionsInAnyCase) {
  const FieldDecoder decoder = *ImageDecoder("l8");
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  for (const char* field : {"jpg", "jpeg", "png", "webp", "seg.png", "JPG", "Webp"}) {
    absl::StatusOr<std::optional<Value>> result = RunDecoder(decoder, field, jpeg);
    ASSERT_TRUE(result.ok()) << field << ": " << result.status();
    ASSERT_TRUE(result->has_value()) << field;
    EXPECT_EQ(std::get<Array>(**result).shape, (std::vector<int64_t>{kPhotoHeight, kPhotoWidth}));
  }
}

TEST(ImageDecoderTest, TheCodecFollowsTheContentNotTheExtension) {
  absl::StatusOr<std::optional<Value>> result =
      RunDecoder(*ImageDecoder("rgb8"), "jpg", Fixtures::Get().Read("pil_rgb.png"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Bytes(std::get<Array>(**result)), Fixtures::Get().Read("pil_rgb.rgb8"));
}

TEST(ImageDecoderTest, SharedDecoderGivesTheSameResultsOnEveryThread) {
  ImageDecodeOptions options = Resize(ResizeMode::kRandomResizedCrop, 32, 32);
  options.hflip = 0.5;
  const FieldDecoder decoder = *ImageDecoder("torchrgb", options);
  const std::string files[] = {Fixtures::Get().Read("photo.jpg"),
                               Fixtures::Get().Read("pil_rgb.png"),
                               Fixtures::Get().Read("photo.webp")};
  auto run = [&](int file, uint64_t seed) {
    absl::StatusOr<std::optional<Value>> r = RunDecoder(decoder, "jpg", files[file], seed);
    return r.ok() && r->has_value() ? Bytes(std::get<Array>(**r)) : std::string("error");
  };
  std::vector<std::string> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(run(i % 3, i));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < 12; ++i) mismatches[t] += run(i % 3, i) == expected[i] ? 0 : 1;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(mismatches, ::testing::Each(0));
  EXPECT_NE(expected[0], "error");
}

// ------------------------------------------------------- Pipeline::Decode

constexpr char kUrl[] = "mem/shard-000.tar";

TEST(PipelineDecodeSpecTest, DecodesImagesAndBasicFields) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"jpg", jpeg}, {"cls", "7"}})}))
                   .Decode("rgb8", Resize(ResizeMode::kCenterCrop, 16, 16));
  absl::StatusOr<std::vector<Sample>> samples = Drain(*p.Open({}));
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 1u);
  const Array* image = (*samples)[0].GetArray("jpg");
  ASSERT_NE(image, nullptr);
  EXPECT_EQ(image->shape, (std::vector<int64_t>{16, 16, 3}));
  EXPECT_EQ((*samples)[0].GetInt("cls").value_or(-1), 7);
}

TEST(PipelineDecodeSpecTest, UnknownSpecMakesEveryNextAnError) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {})})).Decode("Rgb8");
  std::unique_ptr<SampleStream> stream = p.Open({});
  for (int i = 0; i < 2; ++i) {
    SampleResult item = stream->Next();
    ASSERT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(item.status().message(), HasSubstr("decode: unknown image spec \"Rgb8\""));
  }
}

TEST(PipelineDecodeSpecTest, CorruptImageErrorNamesUrlKeyAndField) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  Pipeline p =
      Pipeline(VectorSource({MakeSample("k1", {{"seg.jpg", jpeg.substr(0, 500)}})})).Decode("rgb8");
  absl::StatusOr<std::vector<Sample>> samples = Drain(*p.Open({}));
  ASSERT_EQ(samples.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(samples.status().message(),
              HasSubstr("mem/shard-000.tar: key k1: field seg.jpg: truncated JPEG"));
}

TEST(PipelineDecodeSpecTest, RandomCropsRepeatPerSeedAndEpoch) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  std::vector<Sample> input;
  for (int i = 0; i < 4; ++i) input.push_back(MakeSample("k" + std::to_string(i), {{"jpg", jpeg}}));
  Pipeline p = Pipeline(VectorSource(input), 11)
                   .Decode("rgb8", Resize(ResizeMode::kRandomResizedCrop, 12, 12));
  auto images = [&](int64_t epoch) {
    WorkerContext ctx;
    ctx.epoch = epoch;
    std::string out;
    absl::StatusOr<std::vector<Sample>> samples = Drain(*p.Open(ctx));
    EXPECT_TRUE(samples.ok()) << samples.status();
    for (const Sample& s : *samples) out += Bytes(*s.GetArray("jpg"));
    return out;
  };
  const std::string epoch0 = images(0);
  EXPECT_EQ(images(0), epoch0);
  EXPECT_NE(images(1), epoch0);
}

}  // namespace
}  // namespace wds
