// Internal machinery shared by the image codecs: the decode plan, per-thread
// scratch memory, colour conversion, resampling and the output writer.
//
// A codec reads its header, asks MakePlan what to produce, decodes a window of
// the image (possibly scaled and cropped by the codec itself) into scratch
// memory and calls WriteOutput, which converts colours, crops or resamples,
// and hands finished rows to an OutputWriter that lays them out as the spec
// says (uint8 or float, HWC or CHW, flipped or not). Where the decoded rows
// already are the output (uint8, HWC, whole image), codecs decode straight
// into the OutputWriter's storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "wds/array.h"
#include "wds/image.h"
#include "wds/random.h"

namespace wds::image_internal {

// DecodeRequest is what a codec gets besides the bytes.
struct DecodeRequest {
  const ImageSpec& spec;
  const ImageDecodeOptions& options;
  Rng& rng;
  ImageDecodeInfo& info;
  // slots, if not null, is asked for the output's storage under `field`.
  OutputSlots* slots = nullptr;
  std::string_view field;
};

// DecodePlan is what one decode produces, fixed from the header before any
// pixel is decoded.
struct DecodePlan {
  ImageSpec spec;
  int width = 0;  // of the encoded image
  int height = 0;
  ImageRect crop;  // the region of the encoded image shown
  int out_width = 0;
  int out_height = 0;
  bool flip = false;

  // identity is true when the output is the whole image at its own size.
  bool identity() const {
    return crop == ImageRect{0, 0, width, height} && out_width == width && out_height == height;
  }
};

// MakePlan checks the encoded size against the options, draws the crop and the
// flip from request.rng, and fills request.info.
[[nodiscard]] absl::StatusOr<DecodePlan> MakePlan(int width, int height, DecodeRequest& request);

// ScratchScope hands out uninitialised memory for one decode from an arena
// that belongs to the calling thread and is reused by its next decode, so a
// thread decoding same-sized images allocates no scratch in steady state.
// Everything taken is released when the scope ends. Scopes do not nest.
class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

  template <typename T>
  T* Take(size_t count) {
    return static_cast<T*>(TakeBytes(count * sizeof(T)));
  }

 private:
  void* TakeBytes(size_t bytes);
};

// PixelLayout is the sample order of rows a codec produces.
enum class PixelLayout { kGray, kGrayAlpha, kRgb, kRgba, kCmyk, kAdobeCmyk };

// LayoutChannels is the number of samples per pixel of `layout`.
int LayoutChannels(PixelLayout layout);

// ConvertRow converts `width` pixels of `in` (in `layout`) to `channels` (1, 3
// or 4) samples per pixel in `out` (see image.h for the rules). CMYK layouts
// are 8-bit only. `in` and `out` must not overlap.
template <typename T>
void ConvertRow(PixelLayout layout, const T* in, int width, int channels, T* out);

// OutputWriter owns the output Array and writes finished rows into it. Its
// storage is what `slots` offers for `field`, if it offers any.
class OutputWriter {
 public:
  explicit OutputWriter(const DecodePlan& plan, OutputSlots* slots = nullptr,
                        std::string_view field = {});

  // direct_rows is the output's storage when rows of uint8 samples in HWC order
  // (out_width * channels per row) can be decoded straight into it (uint8,
  // HWC or gray, not flipped); otherwise null.
  uint8_t* direct_rows();
  // WriteRow stores output row `y` from `row` (out_width pixels of `channels`
  // samples, HWC order). uint16 rows are only for float outputs.
  template <typename T>
  void WriteRow(int y, const T* row);
  Array Take() && { return std::move(array_); }

 private:
  Array array_;
  int width_;
  int height_;
  int channels_;
  bool channels_first_;
  bool to_float_;
  bool flip_;
};

// WindowRegion is the plan's crop in the coordinates of the window a codec
// decodes (pixel (0, 0) is the window's top-left; fractional after DCT
// scaling).
struct WindowRegion {
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
};

// WholePixels is `rect` as a window region.
inline WindowRegion WholePixels(const ImageRect& rect) {
  return {static_cast<double>(rect.x), static_cast<double>(rect.y), static_cast<double>(rect.width),
          static_cast<double>(rect.height)};
}

// WindowPixels are decoded rows in memory: `height` rows of `width` pixels in
// `layout`, `stride` samples apart.
template <typename T>
struct WindowPixels {
  const T* data = nullptr;
  size_t stride = 0;
  int width = 0;
  int height = 0;
  PixelLayout layout = PixelLayout::kRgb;
};

// SimdLevel is an instruction set the resampler can run on; both give the
// same bytes.
enum class SimdLevel { kBaseline, kAvx2 };

// BestSimdLevel is the best level this build and CPU support (checked once).
SimdLevel BestSimdLevel();

// WriteOutput turns `region` of a decoded window into the plan's output:
// colour conversion to the spec's channels, then a plain copy when the region
// maps 1:1 onto the output, else resampling of the region (area averaging per
// axis when shrinking, bilinear when enlarging; vertical pass first, one
// output row at a time). REQUIRES: the region lies inside the window.
template <typename T>
void WriteOutput(const WindowPixels<T>& window, const WindowRegion& region, const DecodePlan& plan,
                 OutputWriter& writer, ScratchScope& scratch, SimdLevel level = BestSimdLevel());

// ResampleImage resamples `region` of a uint8 HWC image (channels 1, 3 or 4)
// to out_width x out_height with the decoders' resampler. For tests and tools.
Array ResampleImage(const uint8_t* pixels, int width, int height, int channels,
                    const WindowRegion& region, int out_width, int out_height,
                    SimdLevel level = BestSimdLevel());

// The codecs. Each reads its header, calls MakePlan and decodes.
[[nodiscard]] absl::StatusOr<Array> DecodeJpeg(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodePng(std::string_view data, DecodeRequest& request);
[[nodiscard]] absl::StatusOr<Array> DecodeWebp(std::string_view data, DecodeRequest& request);

}  // namespace wds::image_internal
