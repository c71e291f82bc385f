// OutputWriter: lays out finished rows as the spec says (uint8 or float, HWC
// or CHW, flipped or not), into storage a downstream stage offers or its own.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "base/output_slots.h"
#include "image/decode_plan.h"
#include "wds/base/array.h"

namespace wds::image_internal {

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

}  // namespace wds::image_internal
