// Tests for image specs, options, the resampler, JPEG decoding (full size,
// DCT-scaled, cropped), random resized crops and flips. Expected pixels come
// from djpeg (libjpeg-turbo-progs), not from this library's own decoder.
#include "wds/image/image.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/resample.h"
#include "image_test_util.h"

namespace wds {
namespace {

using image_internal::ResampleImage;
using image_internal::WindowRegion;
using image_testing::AddAlpha;
using image_testing::Bytes;
using image_testing::Decode;
using image_testing::Fixtures;
using image_testing::Mirror;
using image_testing::ParsePnm;
using image_testing::Pixels;
using image_testing::Replicate;
using image_testing::Resampled;
using image_testing::Resize;
using image_testing::SameBytes;
using image_testing::Scaled;
using image_testing::ToChw;
using image_testing::ToFloats;
using ::testing::HasSubstr;

constexpr int kWidth = 161;  // photo.* fixtures
constexpr int kHeight = 121;

// Djpeg decodes a fixture with djpeg at scale m/8 (gray if asked).
Pixels Djpeg(const std::string& file, int m = 8, bool gray = false) {
  const Fixtures& f = Fixtures::Get();
  const std::string out = file + ".scaled.pnm";
  f.Run("djpeg " + std::string(gray ? "-grayscale " : "") + "-scale " + std::to_string(m) +
        "/8 -pnm " + file + " > " + out);
  return ParsePnm(f.Read(out));
}

// ------------------------------------------------------------------- specs

TEST(ImageSpecTest, ReferenceSpecsParse) {
  struct Case {
    const char* name;
    int channels;
    DType dtype;
    bool channels_first;
  };
  const Case cases[] = {
      {"l8", 1, DType::kUInt8, false},         {"rgb8", 3, DType::kUInt8, false},
      {"rgba8", 4, DType::kUInt8, false},      {"l", 1, DType::kFloat32, false},
      {"rgb", 3, DType::kFloat32, false},      {"rgba", 4, DType::kFloat32, false},
      {"torchl8", 1, DType::kUInt8, true},     {"torchrgb8", 3, DType::kUInt8, true},
      {"torchrgba8", 4, DType::kUInt8, true},  {"torchl", 1, DType::kFloat32, true},
      {"torchrgb", 3, DType::kFloat32, true},  {"torch", 3, DType::kFloat32, true},
      {"torchrgba", 4, DType::kFloat32, true},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ImageSpec> spec = ParseImageSpec(c.name);
    ASSERT_TRUE(spec.ok()) << c.name;
    EXPECT_EQ(spec->channels, c.channels) << c.name;
    EXPECT_EQ(spec->dtype, c.dtype) << c.name;
    EXPECT_EQ(spec->channels_first, c.channels_first) << c.name;
  }
}

TEST(ImageSpecTest, SpecsAreCaseSensitive) {
  absl::StatusOr<ImageSpec> spec = ParseImageSpec("RGB8");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("unknown image spec \"RGB8\""));
}

TEST(ImageSpecTest, UnknownSpecListsTheKnownOnes) {
  absl::StatusOr<ImageSpec> spec = ParseImageSpec("rgb16");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("\"rgb16\""));
  EXPECT_THAT(spec.status().message(), HasSubstr("torchrgba8"));
}

TEST(ImageSpecTest, PilSpecsAreRejectedWithAHint) {
  for (const char* name : {"pil", "pill", "pilrgb", "pilrgba"}) {
    absl::StatusOr<ImageSpec> spec = ParseImageSpec(name);
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(spec.status().message(), HasSubstr("PIL images")) << name;
  }
}

TEST(ImageSpecTest, ResizeModesParse) {
  EXPECT_EQ(ParseResizeMode("none").value(), ResizeMode::kNone);
  EXPECT_EQ(ParseResizeMode("stretch").value(), ResizeMode::kStretch);
  EXPECT_EQ(ParseResizeMode("center_crop").value(), ResizeMode::kCenterCrop);
  EXPECT_EQ(ParseResizeMode("random_resized_crop").value(), ResizeMode::kRandomResizedCrop);
  EXPECT_EQ(ParseResizeMode("crop").status().code(), absl::StatusCode::kInvalidArgument);
}

// ----------------------------------------------------------------- options

void ExpectInvalidOptions(const ImageDecodeOptions& options, const std::string& fragment) {
  absl::Status status = ValidateImageDecodeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << fragment;
  EXPECT_THAT(status.message(), HasSubstr(fragment));
}

TEST(ImageOptionsTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateImageDecodeOptions({}).ok());
  EXPECT_TRUE(ValidateImageDecodeOptions(Resize(ResizeMode::kRandomResizedCrop, 224, 224)).ok());
}

TEST(ImageOptionsTest, ResizeNeedsAPositiveSize) {
  ExpectInvalidOptions(Resize(ResizeMode::kStretch, 0, 10), "resize to 0x10");
  ExpectInvalidOptions(Resize(ResizeMode::kCenterCrop, 10, 70000), "resize to 10x70000");
}

TEST(ImageOptionsTest, ScaleAndRatioRangesAreChecked) {
  ImageDecodeOptions options = Resize(ResizeMode::kRandomResizedCrop, 8, 8);
  options.resize.min_scale = 0.5;
  options.resize.max_scale = 0.4;
  ExpectInvalidOptions(options, "scale range");
  options = Resize(ResizeMode::kRandomResizedCrop, 8, 8);
  options.resize.max_scale = 1.5;
  ExpectInvalidOptions(options, "scale range");
  options = Resize(ResizeMode::kRandomResizedCrop, 8, 8);
  options.resize.min_ratio = 0;
  ExpectInvalidOptions(options, "ratio range");
}

TEST(ImageOptionsTest, FlipProbabilityAndMaxPixelsAreChecked) {
  ImageDecodeOptions options;
  options.hflip = 1.5;
  ExpectInvalidOptions(options, "hflip probability");
  options = {};
  options.max_pixels = 0;
  ExpectInvalidOptions(options, "max_pixels 0");
  options = Resize(ResizeMode::kStretch, 100, 100);
  options.max_pixels = 9999;
  ExpectInvalidOptions(options, "exceeds max_pixels 9999");
}

// --------------------------------------------------------------- resampler

std::string Resample(const std::vector<uint8_t>& pixels, int width, int height, int channels,
                     WindowRegion region, int out_width, int out_height) {
  return Bytes(
      ResampleImage(pixels.data(), width, height, channels, region, out_width, out_height));
}

std::string Row(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(ResampleTest, IntegerBlocksAverageExactly) {
  const std::vector<uint8_t> image = {10, 20, 100, 100,  //
                                      30, 40, 100, 101,  //
                                      0,  0,  7,   9,    //
                                      0,  4,  8,   8};
  EXPECT_EQ(Resample(image, 4, 4, 1, {0, 0, 4, 4}, 2, 2), Row({25, 100, 1, 8}));
}

TEST(ResampleTest, PartlyCoveredPixelsWeighByCoveredArea) {
  // Output pixel 0 covers source [0, 1.5): (0 + 0.5 * 90) / 1.5 = 30.
  EXPECT_EQ(Resample({0, 90, 180}, 3, 1, 1, {0, 0, 3, 1}, 2, 1), Row({30, 150}));
}

TEST(ResampleTest, UpscaleInterpolatesBetweenPixelCentres) {
  EXPECT_EQ(Resample({0, 100}, 2, 1, 1, {0, 0, 2, 1}, 4, 1), Row({0, 25, 75, 100}));
}

TEST(ResampleTest, WholePixelRegionOfOutputSizeIsCopied) {
  std::vector<uint8_t> image(5 * 4 * 3);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 7);
  std::string expected;
  for (int y = 1; y < 3; ++y) {
    expected.append(reinterpret_cast<const char*>(image.data()) + (y * 5 + 2) * 3, 3 * 3);
  }
  EXPECT_EQ(Resample(image, 5, 4, 3, {2, 1, 3, 2}, 3, 2), expected);
}

TEST(ResampleTest, ConstantImageStaysConstantAtAnyScale) {
  const std::vector<uint8_t> image(37 * 23 * 4, 201);
  EXPECT_EQ(Resample(image, 37, 23, 4, {0.5, 1.25, 30.3, 20.1}, 10, 7), std::string(280, '\xc9'));
  EXPECT_EQ(Resample(image, 37, 23, 4, {3, 2, 20, 11}, 50, 40), std::string(8000, '\xc9'));
}

TEST(ResampleTest, Avx2GivesTheBaselineBytes) {
  if (image_internal::BestSimdLevel() != image_internal::SimdLevel::kAvx2) {
    GTEST_SKIP() << "this CPU (or build) has no AVX2 resampler";
  }
  struct Case {
    int width, height, channels;
    WindowRegion region;
    int out_width, out_height;
  };
  const Case cases[] = {
      {500, 375, 3, {62.5, 0, 375, 375}, 224, 224},       // centre crop, shrink
      {250, 188, 3, {31.25, 0.5, 187.5, 187}, 224, 224},  // enlarge
      {97, 61, 1, {3.3, 2.7, 80.1, 50.2}, 33, 71},        // shrink one axis, enlarge the other
      {64, 48, 4, {0, 0, 64, 48}, 7, 5},                  // strong shrink, many taps
      {31, 17, 3, {1, 1, 29, 15}, 29, 16},                // near 1:1
  };
  uint64_t state = 12345;
  for (const Case& c : cases) {
    std::vector<uint8_t> image(static_cast<size_t>(c.width) * c.height * c.channels);
    for (uint8_t& v : image) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      v = static_cast<uint8_t>(state >> 56);
    }
    auto run = [&](image_internal::SimdLevel level) {
      return Bytes(ResampleImage(image.data(), c.width, c.height, c.channels, c.region, c.out_width,
                                 c.out_height, level));
    };
    EXPECT_TRUE(
        SameBytes(run(image_internal::SimdLevel::kAvx2), run(image_internal::SimdLevel::kBaseline)))
        << c.width << "x" << c.height << "x" << c.channels << " -> " << c.out_width << "x"
        << c.out_height;
  }
}

TEST(ResampleTest, RegionSeenFromAShiftedWindowGivesTheSameOutput) {
  std::vector<uint8_t> image(40 * 9);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>((i * 37) % 251);
  std::vector<uint8_t> shifted;  // the same rows with 3 more columns on the left
  for (int y = 0; y < 9; ++y) {
    shifted.insert(shifted.end(), {1, 2, 3});
    shifted.insert(shifted.end(), image.begin() + y * 40, image.begin() + (y + 1) * 40);
  }
  EXPECT_EQ(Resample(image, 40, 9, 1, {5.375, 1.625, 29.125, 6.5}, 11, 4),
            Resample(shifted, 43, 9, 1, {8.375, 1.625, 29.125, 6.5}, 11, 4));
}

// -------------------------------------------------------- JPEG, full size

class JpegVariantTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string File() const { return GetParam(); }
  std::string Jpeg() const { return Fixtures::Get().Read(File()); }
  Pixels Rgb() const { return ParsePnm(Fixtures::Get().Read(File() + ".pnm")); }
  Pixels Gray() const { return ParsePnm(Fixtures::Get().Read(File() + ".gray.pnm")); }
};

INSTANTIATE_TEST_SUITE_P(Subsamplings, JpegVariantTest,
                         ::testing::Values("photo.jpg", "photo422.jpg", "photo444.jpg",
                                           "progressive.jpg"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

TEST_P(JpegVariantTest, Rgb8MatchesDjpeg) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Jpeg(), "rgb8", {}, &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->dtype, DType::kUInt8);
  EXPECT_EQ(image->shape, (std::vector<int64_t>{kHeight, kWidth, 3}));
  EXPECT_TRUE(SameBytes(Bytes(*image), Rgb().data));
  EXPECT_EQ(info.format, ImageFormat::kJpeg);
  EXPECT_EQ(info.dct_scale, 8);
  EXPECT_EQ(info.crop, (ImageRect{0, 0, kWidth, kHeight}));
  EXPECT_EQ(info.decoded_width, kWidth);
  EXPECT_EQ(info.decoded_height, kHeight);
}

TEST_P(JpegVariantTest, L8IsTheLumaPlaneAsDjpegGrayscale) {
  absl::StatusOr<Array> image = Decode(Jpeg(), "l8");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->shape, (std::vector<int64_t>{kHeight, kWidth}));
  EXPECT_TRUE(SameBytes(Bytes(*image), Gray().data));
}

TEST_P(JpegVariantTest, Rgba8IsRgbWithOpaqueAlpha) {
  absl::StatusOr<Array> image = Decode(Jpeg(), "rgba8");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->shape, (std::vector<int64_t>{kHeight, kWidth, 4}));
  EXPECT_TRUE(SameBytes(Bytes(*image), AddAlpha(Rgb().data)));
}

TEST_P(JpegVariantTest, FloatSpecsAreBytesOver255) {
  const std::string rgb = Rgb().data;
  for (const auto& [spec, expected] : {std::pair<const char*, std::string>{"rgb", rgb},
                                       {"rgba", AddAlpha(rgb)},
                                       {"l", Gray().data}}) {
    absl::StatusOr<Array> image = Decode(Jpeg(), spec);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->dtype, DType::kFloat32) << spec;
    EXPECT_TRUE(SameBytes(Bytes(*image), ToFloats(expected))) << spec;
  }
}

TEST_P(JpegVariantTest, TorchSpecsAreChannelsFirst) {
  const std::string rgb = Rgb().data;
  absl::StatusOr<Array> u8 = Decode(Jpeg(), "torchrgb8");
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(u8->shape, (std::vector<int64_t>{3, kHeight, kWidth}));
  EXPECT_TRUE(SameBytes(Bytes(*u8), ToChw(rgb, kHeight, kWidth, 3)));

  absl::StatusOr<Array> rgba = Decode(Jpeg(), "torchrgba8");
  ASSERT_TRUE(rgba.ok()) << rgba.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgba), ToChw(AddAlpha(rgb), kHeight, kWidth, 4)));

  for (const char* spec : {"torch", "torchrgb"}) {
    absl::StatusOr<Array> f = Decode(Jpeg(), spec);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->shape, (std::vector<int64_t>{3, kHeight, kWidth})) << spec;
    EXPECT_TRUE(SameBytes(Bytes(*f), ToChw(ToFloats(rgb), kHeight, kWidth, 3, 4))) << spec;
  }
}

TEST_P(JpegVariantTest, TorchGraySpecsAreTwoDimensional) {
  absl::StatusOr<Array> u8 = Decode(Jpeg(), "torchl8");
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(u8->shape, (std::vector<int64_t>{kHeight, kWidth}));
  EXPECT_TRUE(SameBytes(Bytes(*u8), Gray().data));
  absl::StatusOr<Array> f = Decode(Jpeg(), "torchl");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(SameBytes(Bytes(*f), ToFloats(Gray().data)));
}

TEST(JpegTest, GrayJpegReplicatesIntoColourSpecs) {
  const std::string jpeg = Fixtures::Get().Read("gray.jpg");
  const Pixels gray = ParsePnm(Fixtures::Get().Read("gray.jpg.pnm"));
  ASSERT_EQ(gray.channels, 1);
  absl::StatusOr<Array> l8 = Decode(jpeg, "l8");
  ASSERT_TRUE(l8.ok()) << l8.status();
  EXPECT_TRUE(SameBytes(Bytes(*l8), gray.data));
  absl::StatusOr<Array> rgb8 = Decode(jpeg, "rgb8");
  ASSERT_TRUE(rgb8.ok()) << rgb8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgb8), Replicate(gray.data, 3)));
  absl::StatusOr<Array> rgba8 = Decode(jpeg, "rgba8");
  ASSERT_TRUE(rgba8.ok()) << rgba8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgba8), Replicate(gray.data, 4)));
}

TEST(JpegTest, AdobeCmykJpegConvertsAsDjpeg) {
  const std::string jpeg = Fixtures::Get().Read("cmyk.jpg");
  const Pixels rgb = ParsePnm(Fixtures::Get().Read("cmyk.jpg.pnm"));
  ASSERT_EQ(rgb.channels, 3);
  absl::StatusOr<Array> rgb8 = Decode(jpeg, "rgb8");
  ASSERT_TRUE(rgb8.ok()) << rgb8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgb8), rgb.data));
  absl::StatusOr<Array> rgba8 = Decode(jpeg, "rgba8");
  ASSERT_TRUE(rgba8.ok()) << rgba8.status();
  EXPECT_TRUE(SameBytes(Bytes(*rgba8), AddAlpha(rgb.data)));
}

TEST(JpegTest, CmykJpegToGrayIsLumaOfItsRgb) {
  const Pixels rgb = ParsePnm(Fixtures::Get().Read("cmyk.jpg.pnm"));
  std::string expected;
  for (size_t i = 0; i < rgb.data.size(); i += 3) {
    const auto r = static_cast<uint8_t>(rgb.data[i]);
    const auto g = static_cast<uint8_t>(rgb.data[i + 1]);
    const auto b = static_cast<uint8_t>(rgb.data[i + 2]);
    expected.push_back(static_cast<char>((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16));
  }
  absl::StatusOr<Array> l8 = Decode(Fixtures::Get().Read("cmyk.jpg"), "l8");
  ASSERT_TRUE(l8.ok()) << l8.status();
  EXPECT_TRUE(SameBytes(Bytes(*l8), expected));
}

// ------------------------------------------------ JPEG, scaled and cropped

TEST(JpegTest, CmykJpegIsConvertedBeforeResampling) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Fixtures::Get().Read("cmyk.jpg"), "rgb8",
                                       Resize(ResizeMode::kCenterCrop, 50, 50), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.dct_scale, 4);
  const std::string expected = Resampled(Djpeg("cmyk.jpg", 4), Scaled(info.crop, 4), 50, 50);
  EXPECT_TRUE(SameBytes(Bytes(*image), expected));
}

TEST_P(JpegVariantTest, StretchDecodesAtTheSmallestCoveringDctScale) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(Jpeg(), "rgb8", Resize(ResizeMode::kStretch, 40, 30), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  // 161 * 2/8 = 40.25 >= 40 and 121 * 2/8 = 30.25 >= 30; 1/8 would not cover.
  EXPECT_EQ(info.dct_scale, 2);
  EXPECT_EQ(info.decoded_width, 41);
  EXPECT_EQ(info.decoded_height, 31);
  EXPECT_EQ(image->shape, (std::vector<int64_t>{30, 40, 3}));
  const std::string expected = Resampled(Djpeg(File(), 2), {0, 0, 40.25, 30.25}, 40, 30);
  EXPECT_TRUE(SameBytes(Bytes(*image), expected));
}

TEST_P(JpegVariantTest, CenterCropDecodesOnlyTheColumnsItNeeds) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image =
      Decode(Jpeg(), "rgb8", Resize(ResizeMode::kCenterCrop, 50, 50), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{20, 0, 121, 121}));
  EXPECT_EQ(info.dct_scale, 4);       // 121 * 4/8 = 60.5 >= 50
  EXPECT_LT(info.decoded_width, 81);  // less than the scaled width
  EXPECT_GE(info.decoded_width, 61);
  const std::string expected = Resampled(Djpeg(File(), 4), Scaled(info.crop, 4), 50, 50);
  EXPECT_TRUE(SameBytes(Bytes(*image), expected));
}

TEST_P(JpegVariantTest, CropOfOutputSizeIsCopiedFromTheFullDecode) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image =
      Decode(Jpeg(), "rgb8", Resize(ResizeMode::kCenterCrop, 100, 121), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{30, 0, 100, 121}));
  EXPECT_EQ(info.dct_scale, 8);
  EXPECT_LT(info.decoded_width, kWidth);
  const Pixels full = Rgb();
  std::string expected;
  for (int y = 0; y < kHeight; ++y) expected.append(full.data, (y * kWidth + 30) * 3, 100 * 3);
  EXPECT_TRUE(SameBytes(Bytes(*image), expected));
}

TEST_P(JpegVariantTest, UpscaleInterpolatesTheFullSizeDecode) {
  ImageDecodeInfo info;
  absl::StatusOr<Array> image =
      Decode(Jpeg(), "rgb8", Resize(ResizeMode::kStretch, 300, 200), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.dct_scale, 8);
  const std::string expected = Resampled(Rgb(), {0, 0, kWidth, kHeight}, 300, 200);
  EXPECT_TRUE(SameBytes(Bytes(*image), expected));
}

TEST_P(JpegVariantTest, RandomResizedCropsMatchTheReferenceForTheReportedCrop) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ImageDecodeInfo info;
    absl::StatusOr<Array> image =
        Decode(Jpeg(), "rgb8", Resize(ResizeMode::kRandomResizedCrop, 24, 20), &info, seed);
    ASSERT_TRUE(image.ok()) << image.status();
    const std::string expected =
        Resampled(Djpeg(File(), info.dct_scale), Scaled(info.crop, info.dct_scale), 24, 20);
    EXPECT_TRUE(SameBytes(Bytes(*image), expected))
        << "seed " << seed << " scale " << info.dct_scale;
  }
}

TEST(JpegResizeTest, ResizedFloatChannelsFirstIsTheResizedBytesOver255) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const ImageDecodeOptions options = Resize(ResizeMode::kCenterCrop, 32, 24);
  absl::StatusOr<Array> u8 = Decode(jpeg, "rgb8", options);
  absl::StatusOr<Array> f = Decode(jpeg, "torchrgb", options);
  ASSERT_TRUE(u8.ok() && f.ok());
  EXPECT_EQ(f->shape, (std::vector<int64_t>{3, 24, 32}));
  EXPECT_TRUE(SameBytes(Bytes(*f), ToChw(ToFloats(Bytes(*u8)), 24, 32, 3, 4)));
}

TEST(BigJpegTest, StretchTo224DecodesAtOneEighth) {
  const std::string jpeg = Fixtures::Get().BigJpeg();
  ImageDecodeInfo info;
  absl::StatusOr<Array> image = Decode(jpeg, "rgb8", Resize(ResizeMode::kStretch, 224, 224), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.dct_scale, 1);
  EXPECT_EQ(info.decoded_width, 500);
  EXPECT_EQ(info.decoded_height, 375);
  EXPECT_TRUE(SameBytes(Bytes(*image), Resampled(Djpeg("big.jpg", 1), {0, 0, 500, 375}, 224, 224)));
}

TEST(BigJpegTest, CenterCropTo224DecodesTheCentreAtOneEighth) {
  const std::string jpeg = Fixtures::Get().BigJpeg();
  ImageDecodeInfo info;
  absl::StatusOr<Array> image =
      Decode(jpeg, "rgb8", Resize(ResizeMode::kCenterCrop, 224, 224), &info);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(info.crop, (ImageRect{500, 0, 3000, 3000}));
  EXPECT_EQ(info.dct_scale, 1);
  EXPECT_EQ(info.decoded_height, 375);
  EXPECT_LE(info.decoded_width, 375 + 2 * 2 + 16);
  EXPECT_TRUE(
      SameBytes(Bytes(*image), Resampled(Djpeg("big.jpg", 1), Scaled(info.crop, 1), 224, 224)));
}

TEST(BigJpegTest, RandomResizedCropDecodesAScaledWindow) {
  const std::string jpeg = Fixtures::Get().BigJpeg();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    ImageDecodeInfo info;
    absl::StatusOr<Array> image =
        Decode(jpeg, "rgb8", Resize(ResizeMode::kRandomResizedCrop, 224, 224), &info, seed);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_LT(info.dct_scale, 8) << "crop " << info.crop.width << "x" << info.crop.height;
    EXPECT_GE(info.crop.width * info.dct_scale, 8 * 224);
    EXPECT_GE(info.crop.height * info.dct_scale, 8 * 224);
    EXPECT_LT(int64_t{info.decoded_width} * info.decoded_height, int64_t{4000} * 3000 / 4);
  }
}

// -------------------------------------------------------------------- flip

TEST(HflipTest, ProbabilityOneMirrorsEveryOutput) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  ImageDecodeOptions flip;
  flip.hflip = 1;
  ImageDecodeOptions crop_flip = Resize(ResizeMode::kCenterCrop, 30, 20);
  crop_flip.hflip = 1;
  struct Case {
    const char* spec;
    ImageDecodeOptions plain;
    ImageDecodeOptions flipped;
    int height, width;
    size_t pixel_bytes;
  };
  const Case cases[] = {
      {"rgb8", {}, flip, kHeight, kWidth, 3},
      {"l8", {}, flip, kHeight, kWidth, 1},
      {"rgba", {}, flip, kHeight, kWidth, 16},
      {"rgb8", Resize(ResizeMode::kCenterCrop, 30, 20), crop_flip, 20, 30, 3},
  };
  for (const Case& c : cases) {
    ImageDecodeInfo info;
    absl::StatusOr<Array> plain = Decode(jpeg, c.spec, c.plain);
    absl::StatusOr<Array> flipped = Decode(jpeg, c.spec, c.flipped, &info);
    ASSERT_TRUE(plain.ok() && flipped.ok()) << c.spec;
    EXPECT_TRUE(info.flipped);
    EXPECT_TRUE(SameBytes(Bytes(*flipped), Mirror(Bytes(*plain), c.height, c.width, c.pixel_bytes)))
        << c.spec;
  }
}

TEST(HflipTest, ChannelsFirstOutputsMirrorEachPlane) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  ImageDecodeOptions flip;
  flip.hflip = 1;
  absl::StatusOr<Array> plain = Decode(jpeg, "rgb8");
  absl::StatusOr<Array> flipped = Decode(jpeg, "torchrgb8", flip);
  ASSERT_TRUE(plain.ok() && flipped.ok());
  EXPECT_TRUE(SameBytes(Bytes(*flipped),
                        ToChw(Mirror(Bytes(*plain), kHeight, kWidth, 3), kHeight, kWidth, 3)));
}

TEST(HflipTest, HalfProbabilityIsSeededAndMixed) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  ImageDecodeOptions options = Resize(ResizeMode::kStretch, 8, 8);
  options.hflip = 0.5;
  auto flips = [&](uint64_t seed) {
    Rng rng(seed);
    std::string out;
    for (int i = 0; i < 32; ++i) {
      ImageDecodeInfo info;
      EXPECT_TRUE(DecodeImage(jpeg, *ParseImageSpec("rgb8"), options, rng, &info).ok());
      out.push_back(info.flipped ? 'F' : '.');
    }
    return out;
  };
  const std::string first = flips(5);
  EXPECT_EQ(flips(5), first);
  EXPECT_NE(flips(6), first);
  EXPECT_NE(first.find('F'), std::string::npos);
  EXPECT_NE(first.find('.'), std::string::npos);
}

TEST(HflipTest, NoFlipDrawsNoRandomNumber) {
  Rng rng(9);
  ASSERT_TRUE(DecodeImage(Fixtures::Get().Read("photo.jpg"), *ParseImageSpec("rgb8"),
                          Resize(ResizeMode::kCenterCrop, 8, 8), rng)
                  .ok());
  EXPECT_EQ(rng.Next(), Rng(9).Next());
}

// ----------------------------------------------------- random resized crop

TEST(RandomResizedCropTest, CropsStayInsideAndFollowTheRanges) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const ImageDecodeOptions options = Resize(ResizeMode::kRandomResizedCrop, 16, 16);
  for (uint64_t seed = 0; seed < 100; ++seed) {
    ImageDecodeInfo info;
    ASSERT_TRUE(Decode(jpeg, "rgb8", options, &info, seed).ok());
    const ImageRect& c = info.crop;
    ASSERT_GE(c.x, 0);
    ASSERT_GE(c.y, 0);
    ASSERT_LE(c.x + c.width, kWidth);
    ASSERT_LE(c.y + c.height, kHeight);
    // Rounding the sides to whole pixels moves area and ratio a little.
    const double area = static_cast<double>(c.width) * c.height / (kWidth * kHeight);
    EXPECT_GE(area, 0.08 * 0.9) << "seed " << seed;
    EXPECT_LE(area, 1.0) << "seed " << seed;
    const double ratio = static_cast<double>(c.width) / c.height;
    EXPECT_GE(ratio, 0.75 * 0.9) << "seed " << seed;
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.1) << "seed " << seed;
  }
}

TEST(RandomResizedCropTest, SameSeedSameCropOtherSeedsOtherCrops) {
  const std::string jpeg = Fixtures::Get().Read("photo.jpg");
  const ImageDecodeOptions options = Resize(ResizeMode::kRandomResizedCrop, 16, 16);
  ImageDecodeInfo a, b, c;
  absl::StatusOr<Array> first = Decode(jpeg, "rgb8", options, &a, 42);
  absl::StatusOr<Array> again = Decode(jpeg, "rgb8", options, &b, 42);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(a.crop, b.crop);
  EXPECT_EQ(Bytes(*first), Bytes(*again));
  int differing = 0;
  for (uint64_t seed = 43; seed < 53; ++seed) {
    ASSERT_TRUE(Decode(jpeg, "rgb8", options, &c, seed).ok());
    differing += c.crop == a.crop ? 0 : 1;
  }
  EXPECT_GE(differing, 9);
}

TEST(RandomResizedCropTest, UnreachableRangesFallBackToACentredCropOfClampedRatio) {
  ImageDecodeOptions options = Resize(ResizeMode::kRandomResizedCrop, 16, 16);
  options.resize.min_scale = 0.9;
  options.resize.min_ratio = 10;
  options.resize.max_ratio = 20;
  ImageDecodeInfo info;
  ASSERT_TRUE(Decode(Fixtures::Get().Read("photo.jpg"), "rgb8", options, &info).ok());
  // No 10:1 region holds 90% of a 161x121 image: width 161, height 161 / 10.
  EXPECT_EQ(info.crop, (ImageRect{0, 52, 161, 16}));
}

}  // namespace
}  // namespace wds
