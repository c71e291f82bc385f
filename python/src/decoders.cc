#include "decoders.h"

#include <pybind11/stl.h>

#include <array>
#include <set>
#include <string>
#include <utility>

#include "errors.h"
#include "py_ref.h"
#include "wds/base/random.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

using DecodeResult = absl::StatusOr<std::optional<wds::Value>>;
using Decoders = std::vector<wds::FieldDecoder>;
using Extensions = std::shared_ptr<const std::set<std::string>>;

std::string LowerExtension(std::string_view field) {
  return wds::AsciiLower(wds::FieldExtension(field));
}

bool Accepts(const Extensions& extensions, std::string_view field) {
  return extensions == nullptr || extensions->count(LowerExtension(field)) > 0;
}

Extensions ExtensionsFromPython(py::handle list) {
  if (list.is_none()) return nullptr;
  auto out = std::make_shared<std::set<std::string>>();
  for (py::handle e : list) out->insert(wds::AsciiLower(e.cast<std::string>()));
  return out;
}

DecodeResult RunDecoders(const Decoders& decoders, size_t from, std::string_view field,
                         const wds::Buffer& data, wds::DecodeContext& ctx) {
  for (size_t i = from; i < decoders.size(); ++i) {
    DecodeResult r = decoders[i](field, data, ctx);
    if (!r.ok() || r->has_value()) return r;
  }
  return std::nullopt;
}

py::bytes ToBytes(const wds::Buffer& data) {
  return py::bytes(reinterpret_cast<const char*>(data.data()), data.size());
}

// CallPython runs fn(".field", data) under the GIL. A Continue result goes on
// with the decoders after this one (`rest`, from index `next`), as the
// reference's Decoder does.
struct PythonCall {
  std::shared_ptr<PyRef> fn;
  std::shared_ptr<PyRef> continue_type;
  std::shared_ptr<const Decoders> rest;
  size_t next = 0;
  std::shared_ptr<NameSet> tensor_names;

  DecodeResult operator()(std::string_view field, const wds::Buffer& data,
                          wds::DecodeContext& ctx) const {
    std::string continued_field;
    wds::Buffer continued;
    {
      ScopedGil gil;
      if (!gil) return PythonIsExiting();
      try {
        py::object result = fn->get()(py::str(wds::Cat(".", field)), ToBytes(data));
        if (result.is_none()) return std::nullopt;
        if (!continue_type->get().is_none() && py::isinstance(result, continue_type->get())) {
          continued_field = result.attr("key").cast<std::string>();
          if (wds::StartsWith(continued_field, ".")) continued_field.erase(0, 1);
          bool unused = false;
          wds::Value v = ValueFromPython(result.attr("data"), &unused);
          if (!std::holds_alternative<wds::Buffer>(v)) {
            throw py::type_error("Continue(key, data) needs bytes data");
          }
          continued = std::get<wds::Buffer>(std::move(v));
        } else {
          bool is_tensor = false;
          wds::Value v = ValueFromPython(result, &is_tensor);
          if (is_tensor && tensor_names) tensor_names->Add(std::string(field));
          return v;
        }
      } catch (py::error_already_set& e) {
        return StorePythonError(e, field);
      }
    }
    DecodeResult r = RunDecoders(*rest, next, continued_field, continued, ctx);
    if (!r.ok() || r->has_value()) return r;
    return wds::Value(std::move(continued));
  }
};

// ImageItem decodes JPEG/PNG/WebP natively and leaves other content of its
// extensions to the Python fallback (PIL).
struct ImageItem {
  wds::FieldDecoder native;
  Extensions extensions;
  std::optional<PythonCall> fallback;

  DecodeResult operator()(std::string_view field, const wds::Buffer& data,
                          wds::DecodeContext& ctx) const {
    if (!Accepts(extensions, field)) return std::nullopt;
    const bool native_content =
        wds::IsImageExtension(wds::FieldExtension(field)) && wds::SniffImageFormat(data.view());
    if (native_content || !fallback.has_value()) return native(field, data, ctx);
    return (*fallback)(field, data, ctx);
  }
};

// BasicItem is the core's BasicDecoders, except for the fields whose
// extension is in `skipped` (Python's: JSON, when Python parses it).
struct BasicItem {
  Decoders basic = wds::BasicDecoders();
  Extensions skipped;

  DecodeResult operator()(std::string_view field, const wds::Buffer& data,
                          wds::DecodeContext& ctx) const {
    if (skipped != nullptr && Accepts(skipped, field)) return std::nullopt;
    return RunDecoders(basic, 0, field, data, ctx);
  }
};

// OpaqueGuard keeps decoders away from Python objects that entered the
// stage: they are not bytes, so with partial they pass through and without
// it they are an error, as in the reference.
struct OpaqueGuard {
  bool partial = false;
  DecodeResult operator()(std::string_view field, const wds::Buffer& data,
                          wds::DecodeContext&) const {
    if (!IsOpaque(data)) return std::nullopt;
    if (partial) return wds::Value(data);
    return absl::FailedPreconditionError(wds::Cat(
        "field ", field, " is already decoded (holds a Python object); decode with partial=True"));
  }
};

class DecodeStream : public wds::SampleStream {
 public:
  DecodeStream(std::unique_ptr<wds::SampleStream> upstream, const wds::WorkerContext& ctx,
               std::shared_ptr<const Decoders> decoders,
               std::shared_ptr<const wds::DecodeOptions> options, StageHandler handler)
      : upstream_(std::move(upstream)),
        ctx_(ctx),
        decoders_(std::move(decoders)),
        options_(std::move(options)),
        handler_(std::move(handler)),
        rng_(wds::DeriveSeed(
            ctx.seed,
            {wds::kDecode, static_cast<uint64_t>(ctx.epoch), static_cast<uint64_t>(ctx.pass),
             static_cast<uint64_t>(ctx.rank), static_cast<uint64_t>(ctx.worker)})) {}

  wds::SampleResult Next() override {
    if (!error_.ok()) return error_;
    if (stopped_) return std::nullopt;
    while (true) {
      wds::SampleResult item = upstream_->Next();
      if (!item.ok() || !item->has_value()) return item;
      wds::Sample& sample = **item;
      absl::Status status = wds::DecodeSample(sample, *decoders_, *options_, rng_, &ctx_);
      if (status.ok()) return item;
      NoteSample(sample.url(), sample.key());
      absl::Status raised;
      switch (handler_.Handle(ctx_, "decode", status, &raised)) {
        case wds::ErrorAction::kRaise:
          error_ = raised;
          return error_;
        case wds::ErrorAction::kStop:
          ClearPythonErrorHeld();
          stopped_ = true;
          return std::nullopt;
        case wds::ErrorAction::kContinue:
          ClearPythonErrorHeld();
          break;
      }
    }
  }

 private:
  // A Python decoder's exception that a native handler dropped is released.
  void ClearPythonErrorHeld() {
    if (handler_.is_native()) ClearPythonError();
  }

  std::unique_ptr<wds::SampleStream> upstream_;
  wds::WorkerContext ctx_;
  std::shared_ptr<const Decoders> decoders_;
  std::shared_ptr<const wds::DecodeOptions> options_;
  StageHandler handler_;
  wds::Rng rng_;
  absl::Status error_;
  bool stopped_ = false;
};

wds::ResizeMode ParseMode(const std::string& mode) {
  absl::StatusOr<wds::ResizeMode> parsed = wds::ParseResizeMode(mode);
  ThrowIfError(parsed.status());
  return *parsed;
}

}  // namespace

wds::ImageDecodeOptions ImageOptionsFromPython(py::handle resize) {
  wds::ImageDecodeOptions options;
  if (resize.is_none()) return options;
  py::tuple t = py::reinterpret_borrow<py::tuple>(resize);
  options.resize.mode = ParseMode(t[0].cast<std::string>());
  options.resize.height = t[1].cast<int>();
  options.resize.width = t[2].cast<int>();
  options.resize.min_scale = t[3].cast<double>();
  options.resize.max_scale = t[4].cast<double>();
  options.resize.min_ratio = t[5].cast<double>();
  options.resize.max_ratio = t[6].cast<double>();
  options.hflip = t[7].cast<double>();
  ThrowIfError(wds::ValidateImageDecodeOptions(options));
  return options;
}

wds::GpuDecodeOptions GpuOptionsFromPython(bool float16, py::handle normalize) {
  wds::GpuDecodeOptions gpu;
  gpu.float16 = float16;
  if (!normalize.is_none()) {
    auto [mean, std] = normalize.cast<std::pair<std::array<float, 3>, std::array<float, 3>>>();
    gpu.normalize = wds::Normalize{mean, std};
  }
  return gpu;
}

std::vector<wds::FieldDecoder> MakeDecoders(py::list items, py::handle continue_type, bool partial,
                                            std::shared_ptr<NameSet> tensor_names) {
  auto continue_ref = std::make_shared<PyRef>(continue_type);
  // Built back to front: a Python item's Continue goes on with those after it.
  std::vector<wds::FieldDecoder> reversed;
  for (size_t k = items.size(); k-- > 0;) {
    py::tuple item = items[k].cast<py::tuple>();
    const std::string kind = item[0].cast<std::string>();
    const auto rest = std::make_shared<const Decoders>(reversed.rbegin(), reversed.rend());
    auto python = [&](py::handle fn) {
      if (!PyCallable_Check(fn.ptr())) throw py::type_error("a decoder must be callable");
      return PythonCall{std::make_shared<PyRef>(fn), continue_ref, rest, 0, tensor_names};
    };
    if (kind == "image") {
      absl::StatusOr<wds::FieldDecoder> native =
          wds::ImageDecoder(item[1].cast<std::string>(), ImageOptionsFromPython(item[3]));
      ThrowIfError(native.status());
      ImageItem image{*std::move(native), ExtensionsFromPython(item[2]), std::nullopt};
      if (!item[4].is_none()) image.fallback = python(item[4]);
      reversed.push_back(std::move(image));
    } else if (kind == "gpu_image") {
      // ("gpu_image", spec, extensions, resize, float16, normalize or None):
      // a GPU job per image (wds/gpu/gpu_decode.h), decoded by the Loader.
      absl::StatusOr<wds::FieldDecoder> jobs =
          wds::GpuJobDecoder(item[1].cast<std::string>(), ImageOptionsFromPython(item[3]),
                             GpuOptionsFromPython(item[4].cast<bool>(), item[5]));
      ThrowIfError(jobs.status());
      reversed.push_back(ImageItem{*std::move(jobs), ExtensionsFromPython(item[2]), std::nullopt});
    } else if (kind == "basic") {
      reversed.push_back(BasicItem{wds::BasicDecoders(), ExtensionsFromPython(item[1])});
    } else if (kind == "python") {
      Extensions extensions = ExtensionsFromPython(item[2]);
      PythonCall call = python(item[1]);
      reversed.push_back([call, extensions](std::string_view field, const wds::Buffer& data,
                                            wds::DecodeContext& ctx) -> DecodeResult {
        if (!Accepts(extensions, field)) return std::nullopt;
        return call(field, data, ctx);
      });
    } else {
      throw py::value_error("unknown decoder item " + kind);
    }
  }
  reversed.push_back(OpaqueGuard{partial});
  return Decoders(reversed.rbegin(), reversed.rend());
}

wds::StageFactory DecodeStage(std::vector<wds::FieldDecoder> decoders, wds::DecodeOptions options,
                              StageHandler handler) {
  auto shared_decoders = std::make_shared<const Decoders>(std::move(decoders));
  auto shared_options = std::make_shared<const wds::DecodeOptions>(std::move(options));
  return [shared_decoders, shared_options, handler](const wds::StreamFactory& upstream,
                                                    const wds::WorkerContext& ctx) {
    return std::make_unique<DecodeStream>(upstream(ctx), ctx, shared_decoders, shared_options,
                                          handler);
  };
}

}  // namespace wdspy
