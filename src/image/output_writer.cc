// OutputWriter: output layout of decoded rows.
#include "image/output_writer.h"

#include <array>
#include <cassert>
#include <cstring>
#include <type_traits>
#include <vector>

namespace wds::image_internal {
namespace {

const std::array<float, 256>& ByteToFloat() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[v] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  return table;
}

inline float ToFloat(uint8_t v) { return ByteToFloat()[v]; }
inline float ToFloat(uint16_t v) { return static_cast<float>(v) / 65535.0f; }

}  // namespace

OutputWriter::OutputWriter(const DecodePlan& plan, OutputSlots* slots, std::string_view field)
    : width_(plan.out_width),
      height_(plan.out_height),
      channels_(plan.spec.channels),
      channels_first_(plan.spec.channels_first && plan.spec.channels > 1),
      to_float_(plan.spec.dtype == DType::kFloat32),
      flip_(plan.flip) {
  std::vector<int64_t> shape;
  if (channels_ == 1) {
    shape = {height_, width_};
  } else if (channels_first_) {
    shape = {channels_, height_, width_};
  } else {
    shape = {height_, width_, channels_};
  }
  array_.dtype = plan.spec.dtype;
  array_.shape = std::move(shape);
  if (slots != nullptr) array_.data = slots->Offer(field, array_.dtype, array_.shape);
  if (array_.data.size() != array_.nbytes()) array_ = Array::Allocate(array_.dtype, array_.shape);
}

uint8_t* OutputWriter::direct_rows() {
  return to_float_ || channels_first_ || flip_ ? nullptr : array_.mutable_data<uint8_t>();
}

// Output pixel x shows row pixel Source(x): mirrored when flipping.
template <typename T>
void OutputWriter::WriteRow(int y, const T* row) {
  const ptrdiff_t w = width_;
  const int c = channels_;
  auto source = [&](ptrdiff_t x) { return (flip_ ? w - 1 - x : x) * c; };
  auto store = [&](auto* base) {
    using Out = std::remove_pointer_t<decltype(base)>;
    auto value = [](T v) {
      if constexpr (std::is_same_v<Out, float>) {
        return ToFloat(v);
      } else {
        return static_cast<Out>(v);
      }
    };
    if (channels_first_) {
      for (int ch = 0; ch < c; ++ch) {
        Out* plane = base + (static_cast<ptrdiff_t>(ch) * height_ + y) * w;
        for (ptrdiff_t x = 0; x < w; ++x) plane[x] = value(row[source(x) + ch]);
      }
      return;
    }
    Out* out = base + static_cast<ptrdiff_t>(y) * w * c;
    if constexpr (std::is_same_v<Out, T>) {
      if (!flip_) {
        std::memcpy(out, row, sizeof(T) * w * c);
        return;
      }
    }
    for (ptrdiff_t x = 0; x < w; ++x) {
      for (int ch = 0; ch < c; ++ch) out[x * c + ch] = value(row[source(x) + ch]);
    }
  };
  if (to_float_) {
    store(array_.mutable_data<float>());
  } else {
    // Only 8-bit rows reach a uint8 output (16-bit PNGs decode to 8 bits then).
    assert((std::is_same_v<T, uint8_t>));
    store(array_.mutable_data<uint8_t>());
  }
}

template void OutputWriter::WriteRow<uint8_t>(int, const uint8_t*);
template void OutputWriter::WriteRow<uint16_t>(int, const uint16_t*);

}  // namespace wds::image_internal
