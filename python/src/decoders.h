// The decode stage as Python describes it: the reference package's handler
// chain (gz first, then image handlers, Python callables and the basic
// handlers, in the user's order; the first that returns a value wins), with
// native decoders where the core has them and Python callables elsewhere.
//
// Items, from Python (webdataset_cpp.autodecode compiles them):
//   ("image", spec, extensions, resize, fallback)  native image decoding for
//       JPEG/PNG/WebP content of fields with these extensions; `fallback`
//       (a Python (key, data) callable, or None) decodes the rest (PIL).
//   ("basic", skipped)  the core's basic decoders (cls/txt/json/npy/...), but
//       fields with one of the `skipped` extensions (a list, or None: none)
//       are left to the items after it.
//   ("python", fn, extensions)  fn(".field", bytes) -> value | None |
//       Continue(key, data); extensions (or None: all fields) filter the
//       fields it is called for, so the GIL is taken only for those.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "convert.h"
#include "handlers.h"
#include "wds/decode/decode.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/image/image.h"

namespace wdspy {

namespace py = pybind11;

// MakeDecoders builds the FieldDecoders for `items`. Names of fields that a
// Python decoder decoded into a torch tensor go to `tensor_names`.
// REQUIRES: the GIL is held. Bad items raise ValueError / TypeError.
std::vector<wds::FieldDecoder> MakeDecoders(py::list items, py::handle continue_type, bool partial,
                                            std::shared_ptr<NameSet> tensor_names);

// ImageOptionsFromPython reads (mode, height, width, min_scale, max_scale,
// min_ratio, max_ratio, hflip); mode is "none", "stretch", "center_crop" or
// "random_resized_crop".
wds::ImageDecodeOptions ImageOptionsFromPython(py::handle resize);

// GpuOptionsFromPython reads decode(device="cuda")'s float16 and normalize
// (None or ((mean r, g, b), (std r, g, b))).
wds::GpuDecodeOptions GpuOptionsFromPython(bool float16, py::handle normalize);

// DecodeStage is the stage for `decoders`: DecodeSample on every sample,
// errors to `handler` (stage "decode"), arrays offered to a downstream
// Batched's slots, randomness seeded as the core's Decode stage.
wds::StageFactory DecodeStage(std::vector<wds::FieldDecoder> decoders, wds::DecodeOptions options,
                              StageHandler handler);

}  // namespace wdspy
