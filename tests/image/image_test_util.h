// Shared helpers for the image tests: fixtures made by independent encoders
// and decoders (tests/image/image_fixtures.py with numpy/PIL, cjpeg/djpeg from
// libjpeg-turbo-progs, cwebp/dwebp/img2webp from webp), PNM parsing, layout
// helpers and a byte comparison that reports the first difference.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "image/resample.h"
#include "util/test_util.h"
#include "wds/image/image.h"

namespace wds::image_testing {

// Fixtures is a directory of test images, made once per test process.
class Fixtures {
 public:
  // Get makes the small fixtures on first use; they are removed at exit.
  static const Fixtures& Get() {
    static const Fixtures fixtures;
    return fixtures;
  }

  std::string Path(std::string_view name) const { return dir_.path() + "/" + std::string(name); }

  std::string Read(std::string_view name) const {
    std::ifstream f(Path(name), std::ios::binary);
    if (!f) {
      ADD_FAILURE() << "missing fixture " << name;
      return "";
    }
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }

  // Run runs `command` with the fixture directory as working directory.
  bool Run(const std::string& command) const {
    const int status = testing::RunShell("cd '" + dir_.path() + "' && " + command);
    EXPECT_EQ(status, 0) << command;
    return status == 0;
  }

  // BigJpeg is a 4000x3000 JPEG (q90), made on first use.
  std::string BigJpeg() const {
    static const bool made = Run(Python("big"));
    (void)made;
    return Read("big.jpg");
  }

 private:
  // Python is the command that runs tests/image/image_fixtures.py here.
  static std::string Python(const std::string& args) {
    return "/usr/bin/python3 '" WDS_SOURCE_DIR "/tests/image/image_fixtures.py' . " + args;
  }

  Fixtures() {
    Run(Python(""));
    Run("cjpeg -quality 90 photo.ppm > photo.jpg"
        " && cjpeg -quality 90 -sample 2x1 photo.ppm > photo422.jpg"
        " && cjpeg -quality 90 -sample 1x1 photo.ppm > photo444.jpg"
        " && cjpeg -quality 90 -progressive photo.ppm > progressive.jpg"
        " && cjpeg -quality 90 gray.pgm > gray.jpg"
        " && djpeg -pnm cmyk.jpg > cmyk.jpg.pnm"
        " && for f in photo photo422 photo444 progressive gray; do"
        "      djpeg -pnm $f.jpg > $f.jpg.pnm && djpeg -grayscale -pnm $f.jpg > $f.jpg.gray.pnm"
        "      || exit 1; done");
    Run("cwebp -quiet -q 90 photo.ppm -o photo.webp"
        " && cwebp -quiet -lossless photo.ppm -o lossless.webp"
        " && cwebp -quiet -q 90 photo_alpha.png -o alpha.webp"
        " && dwebp -quiet photo.webp -ppm -o photo.webp.ppm"
        " && dwebp -quiet alpha.webp -pam -o alpha.webp.pam"
        " && img2webp -o anim.webp -d 100 pil_rgb.png photo_alpha.png > /dev/null 2>&1");
  }

  testing::TempDir dir_;
};

// Pixels is an image read from a PNM file.
struct Pixels {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::string data;  // HWC bytes
};

// ParsePnm reads P5 (gray), P6 (RGB) and P7 (PAM, from dwebp -pam), maxval 255.
inline Pixels ParsePnm(const std::string& bytes) {
  std::istringstream in(bytes);
  std::string magic;
  in >> magic;
  Pixels p;
  if (magic == "P7") {
    std::string key;
    while (in >> key && key != "ENDHDR") {
      if (key == "WIDTH") in >> p.width;
      if (key == "HEIGHT") in >> p.height;
      if (key == "DEPTH") in >> p.channels;
      if (key != "WIDTH" && key != "HEIGHT" && key != "DEPTH") in.ignore(1 << 20, '\n');
    }
  } else {
    int maxval = 0;
    in >> p.width >> p.height >> maxval;
    p.channels = magic == "P5" ? 1 : 3;
    EXPECT_EQ(maxval, 255);
  }
  in.get();  // the single whitespace byte before the samples
  const size_t size = static_cast<size_t>(p.width) * p.height * p.channels;
  const auto offset = static_cast<size_t>(in.tellg());
  EXPECT_EQ(bytes.size() - offset, size) << "PNM " << magic;
  p.data = bytes.substr(offset, size);
  return p;
}

inline absl::StatusOr<Array> Decode(std::string_view bytes, std::string_view spec,
                                    const ImageDecodeOptions& options = {},
                                    ImageDecodeInfo* info = nullptr, uint64_t seed = 1) {
  absl::StatusOr<ImageSpec> parsed = ParseImageSpec(spec);
  if (!parsed.ok()) return parsed.status();
  Rng rng(seed);
  return DecodeImage(bytes, *parsed, options, rng, info);
}

inline ImageDecodeOptions Resize(ResizeMode mode, int width, int height) {
  ImageDecodeOptions options;
  options.resize.mode = mode;
  options.resize.width = width;
  options.resize.height = height;
  return options;
}

inline std::string Bytes(const Array& a) { return std::string(a.data.view()); }

// SameBytes compares two byte strings and reports the first difference.
inline ::testing::AssertionResult SameBytes(const std::string& actual,
                                            const std::string& expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs expected " << expected.size();
  }
  size_t differing = 0;
  size_t first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i] && differing++ == 0) first = i;
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << differing << " of " << actual.size() << " bytes differ; first at " << first << ": "
         << int{static_cast<uint8_t>(actual[first])} << " vs expected "
         << int{static_cast<uint8_t>(expected[first])};
}

// ToFloats is what a float spec makes of uint8 samples: v / 255 in float32.
inline std::string ToFloats(const std::string& u8) {
  std::string out(u8.size() * sizeof(float), '\0');
  for (size_t i = 0; i < u8.size(); ++i) {
    const float v = static_cast<float>(static_cast<uint8_t>(u8[i])) / 255.0f;
    std::memcpy(&out[i * sizeof(float)], &v, sizeof(float));
  }
  return out;
}

// ToChw reorders HWC samples of `size` bytes each to CHW.
inline std::string ToChw(const std::string& hwc, int height, int width, int channels,
                         size_t size = 1) {
  std::string out(hwc.size(), '\0');
  const size_t plane = static_cast<size_t>(height) * width;
  for (size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < channels; ++c) {
      std::memcpy(&out[(c * plane + p) * size], &hwc[(p * channels + c) * size], size);
    }
  }
  return out;
}

// Mirror flips HWC pixels (of `pixel_bytes` each) left-right.
inline std::string Mirror(const std::string& hwc, int height, int width, size_t pixel_bytes) {
  std::string out(hwc.size(), '\0');
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const size_t from = (static_cast<size_t>(y) * width + x) * pixel_bytes;
      const size_t to = (static_cast<size_t>(y) * width + (width - 1 - x)) * pixel_bytes;
      std::memcpy(&out[to], &hwc[from], pixel_bytes);
    }
  }
  return out;
}

// AddAlpha appends an opaque alpha sample to each RGB pixel.
inline std::string AddAlpha(const std::string& rgb) {
  std::string out;
  out.reserve(rgb.size() / 3 * 4);
  for (size_t i = 0; i < rgb.size(); i += 3) out.append(rgb, i, 3).push_back('\xff');
  return out;
}

// DropAlpha removes the alpha sample of each RGBA pixel.
inline std::string DropAlpha(const std::string& rgba) {
  std::string out;
  for (size_t i = 0; i < rgba.size(); i += 4) out.append(rgba, i, 3);
  return out;
}

// Replicate repeats each gray sample into RGB (and opaque alpha for 4).
inline std::string Replicate(const std::string& gray, int channels) {
  std::string out;
  for (char g : gray) {
    out.append(3, g);
    if (channels == 4) out.push_back('\xff');
  }
  return out;
}

// Resampled is the decoders' resampler applied to `region` of `image`.
inline std::string Resampled(const Pixels& image, const image_internal::WindowRegion& region,
                             int out_width, int out_height) {
  return Bytes(image_internal::ResampleImage(reinterpret_cast<const uint8_t*>(image.data.data()),
                                             image.width, image.height, image.channels, region,
                                             out_width, out_height));
}

// Scaled maps a source rectangle into a DCT-scaled (M/8) image.
inline image_internal::WindowRegion Scaled(const ImageRect& r, int m) {
  return {r.x * m / 8.0, r.y * m / 8.0, r.width * m / 8.0, r.height * m / 8.0};
}

}  // namespace wds::image_testing
