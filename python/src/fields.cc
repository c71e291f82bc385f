// One field at a time, for the Python-level Decoder (a Decoder called on a
// sample by Python code, e.g. inside .map): the native image and basic
// decoders as plain functions. The GIL is released while they decode.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "convert.h"
#include "decoders.h"
#include "errors.h"
#include "py_ref.h"
#include "wds/base/random.h"
#include "wds/decode/decode.h"
#include "wds/image/image.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

py::object DecodeImage(const py::bytes& data, const std::string& spec, py::object resize,
                       uint64_t seed) {
  absl::StatusOr<wds::ImageSpec> parsed = wds::ParseImageSpec(spec);
  ThrowIfError(parsed.status());
  const wds::ImageDecodeOptions options = ImageOptionsFromPython(resize);
  const wds::Buffer buffer = BytesView(data);
  absl::StatusOr<wds::Array> array;
  {
    ScopedGilRelease release;
    wds::Rng rng(seed);
    array = wds::DecodeImage(buffer.view(), *parsed, options, rng);
  }
  if (!array.ok()) RaiseStatus(array.status(), Phase::kData);
  const bool torch = wds::StartsWith(spec, "torch");
  return torch ? ArrayToTorch(*std::move(array)) : ArrayToNumpy(*std::move(array));
}

py::object DecodeBasicField(const std::string& field, const py::bytes& data) {
  const wds::Buffer buffer = BytesView(data);
  absl::StatusOr<std::optional<wds::Value>> value;
  {
    ScopedGilRelease release;
    wds::Rng rng(0);
    wds::DecodeContext ctx{"", &rng, nullptr, ""};
    for (const wds::FieldDecoder& decoder : wds::BasicDecoders()) {
      value = decoder(field, buffer, ctx);
      if (!value.ok() || value->has_value()) break;
    }
  }
  if (!value.ok()) RaiseStatus(value.status(), Phase::kData);
  if (!value->has_value()) return py::none();
  return ValueToPython(**std::move(value), kPlain);
}

}  // namespace

void RegisterFields(py::module_& m) {
  m.def("decode_image", &DecodeImage, py::arg("data"), py::arg("spec"),
        py::arg("resize") = py::none(), py::arg("seed") = 0,
        "Decodes a JPEG, PNG or WebP image by an image spec (rgb8, torchrgb, ...).");
  m.def("decode_basic", &DecodeBasicField, py::arg("field"), py::arg("data"),
        "The core's basic decoders for one field (cls, txt, json as text, npy); None when "
        "none applies.");
  m.def(
      "check_image_spec",
      [](const std::string& spec) { ThrowIfError(wds::ParseImageSpec(spec).status()); },
      py::arg("spec"), "Raises ValueError for a spec the native decoder does not know.");
  m.def(
      "sniff_image",
      [](const py::bytes& data) -> std::optional<std::string> {
        std::optional<wds::ImageFormat> f = wds::SniffImageFormat(std::string_view(data));
        if (!f.has_value()) return std::nullopt;
        return std::string(wds::ImageFormatName(*f));
      },
      py::arg("data"));
}

}  // namespace wdspy
