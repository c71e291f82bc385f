// Decoding on the GPU from Python (wds/gpu/gpu_decode.h): a batch's column of
// GPU jobs reaches Python as a GpuJobs object (the native jobs, not copied
// into bytes), which webdataset_cpp.Loader decodes with a GpuBatchDecoder
// straight into a torch CUDA tensor it allocated (its data_ptr is where the
// kernel writes), or on the host into a NumPy array.
#include "gpu.h"

#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "arrays.h"
#include "convert.h"
#include "decoders.h"
#include "errors.h"
#include "py_ref.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wdspy {
namespace {

// LayoutTuple is (dtype name, shape).
py::tuple LayoutTuple(const wds::GpuBatchLayout& layout) {
  py::tuple shape(layout.shape.size());
  for (size_t i = 0; i < layout.shape.size(); ++i) shape[i] = py::int_(layout.shape[i]);
  return py::make_tuple(std::string(wds::DTypeName(layout.dtype)), shape);
}

// Layout returns (dtype name, shape) of what `jobs` decode to.
py::tuple Layout(const GpuJobs& jobs) {
  absl::StatusOr<wds::GpuBatchLayout> layout = wds::GpuJobLayout(jobs.jobs, &jobs.keys, &jobs.urls);
  ThrowIfError(layout.status());
  return LayoutTuple(*layout);
}

// ToArrayPool recycles the storage of GpuJobs.to_array()'s arrays (the
// batches of a torch DataLoader, decoded by wds.decode_gpu_jobs): steady
// batches reuse memory freed by the last ones instead of faulting fresh
// pages in for each. At most 256 MB stay cached. Never destroyed (arrays keep
// its state alive, and may outlive the module).
wds::BufferPool& ToArrayPool() {
  static auto* pool =
      new wds::BufferPool(wds::AlignedHostAllocator(), {.max_cached_bytes = size_t{256} << 20});
  return *pool;
}

// StatsToPython is GpuBatchDecoder::Stats as a dict, seconds by phase in a dict.
py::dict StatsToPython(const wds::GpuBatchDecoder::Stats& s) {
  py::dict out;
  out["batches"] = s.batches;
  out["images"] = s.images;
  out["nvjpeg_images"] = s.nvjpeg_images;
  out["cpu_fallback_images"] = s.cpu_fallback_images;
  out["worker_decoded_images"] = s.worker_decoded_images;
  out["images_read_in_place"] = s.images_read_in_place;
  py::dict seconds;
  seconds["parse"] = s.seconds.parse;
  seconds["wait"] = s.seconds.wait;
  seconds["gather"] = s.seconds.gather;
  seconds["nvjpeg"] = s.seconds.nvjpeg;
  seconds["cpu_decode"] = s.seconds.cpu_decode;
  seconds["kernel"] = s.seconds.kernel;
  out["seconds"] = seconds;
  return out;
}

}  // namespace

py::object GpuJobsToPython(wds::BytesList jobs, const wds::TextList* keys,
                           const wds::TextList* urls) {
  auto out = std::make_shared<GpuJobs>();
  out->jobs = std::move(jobs);
  if (keys != nullptr) out->keys = *keys;
  if (urls != nullptr) out->urls = *urls;
  return py::cast(std::move(out));
}

py::list TextsToPython(const wds::TextList& texts) {
  py::list out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) out[i] = ToPyStr(texts[i]);
  return out;
}

namespace {

// TextsFromPython reads TextsToPython's list back. Errors: ValueError unless
// `texts` is a list of str, none or one for each of `jobs` jobs.
wds::TextList TextsFromPython(py::handle texts, size_t jobs, const char* what) {
  if (!py::isinstance<py::list>(texts)) {
    throw py::value_error(wds::Cat("GpuJobs: the ", what, " are not a list"));
  }
  const auto list = py::reinterpret_borrow<py::list>(texts);
  if (!list.empty() && list.size() != jobs) {
    throw py::value_error(wds::Cat("GpuJobs: ", list.size(), " ", what, " for ", jobs, " jobs"));
  }
  wds::TextList out;
  out.reserve(list.size());
  for (py::handle text : list) {
    if (!py::isinstance<py::str>(text)) {
      throw py::value_error(wds::Cat("GpuJobs: the ", what, " are not all str"));
    }
    PyObject* encoded = PyUnicode_AsEncodedString(text.ptr(), "utf-8", "surrogateescape");
    if (encoded == nullptr) throw py::error_already_set();
    out.emplace_back(py::reinterpret_steal<py::bytes>(encoded));
  }
  return out;
}

}  // namespace

std::shared_ptr<GpuJobs> GpuJobsFromPacked(const wds::Buffer& packed, py::handle keys,
                                           py::handle urls) {
  absl::StatusOr<wds::BytesList> jobs = wds::UnpackGpuJobs(packed);
  ThrowIfError(jobs.status());
  auto out = std::make_shared<GpuJobs>();
  out->keys = TextsFromPython(keys, jobs->size(), "keys");
  out->urls = TextsFromPython(urls, jobs->size(), "urls");
  out->jobs = *std::move(jobs);
  return out;
}

py::object ObjectToPython(wds::ObjectRef object) {
  if (auto pending = std::dynamic_pointer_cast<wds::PendingImages>(object)) {
    return py::cast(std::move(pending));
  }
  throw py::type_error("a batch holds " + object->TypeName() + ", which has no Python form");
}

void RegisterGpu(py::module_& m) {
  m.def(
      "gpu_job_column",
      [](const py::sequence& values) -> py::object {
        // Collated GPU jobs (a torch DataLoader's batch_size=N over single
        // samples): a column only when every value is a job's bytes. The jobs
        // view the bytes objects.
        wds::BytesList jobs;
        jobs.reserve(values.size());
        for (py::handle v : values) {
          if (!PyBytes_Check(v.ptr())) return py::none();
          jobs.push_back(BytesView(v));
        }
        if (!wds::IsGpuJobColumn(wds::Value(jobs))) return py::none();
        return GpuJobsToPython(std::move(jobs), nullptr, nullptr);
      },
      py::arg("values"),
      "GpuJobs of a sequence of GPU jobs' bytes (what torch's default collation makes of "
      "unbatched decode(device='cuda') samples), or None when they are not all jobs.");
  m.def(
      "check_gpu_decode",
      [](const std::string& spec, py::handle resize, bool float16, py::handle normalize) {
        ThrowIfError(wds::GpuJobDecoder(spec, ImageOptionsFromPython(resize),
                                        GpuOptionsFromPython(float16, normalize))
                         .status());
      },
      py::arg("spec"), py::arg("resize"), py::arg("float16"), py::arg("normalize"),
      "Raises ValueError naming what decode(device='cuda') cannot serve.");
  py::class_<GpuJobs, std::shared_ptr<GpuJobs>>(
      m, "GpuJobs",
      "A batch's images, read and planned by the workers, to be decoded on a device "
      "(webdataset_cpp.Loader(device=\"cuda\")) or on the host (to_array).")
      .def("__len__", [](const GpuJobs& j) { return j.jobs.size(); })
      .def("layout", &Layout, "(dtype name, shape) of the decoded batch.")
      .def(
          "to_array",
          [](const GpuJobs& j) {
            absl::StatusOr<wds::Array> array;
            {
              ScopedGilRelease release;
              array = wds::DecodeGpuJobsToArray(j.jobs, &j.keys, &j.urls, &ToArrayPool());
            }
            ThrowIfError(array.status());
            return ArrayToNumpy(*std::move(array));
          },
          "The batch decoded on the host (the CPU decoder and the CPU path's resampler, the "
          "kernel's bytes), as a NumPy array (its memory recycled from batch to batch).")
      .def_property_readonly("keys", [](const GpuJobs& j) { return TextsToPython(j.keys); })
      // A torch DataLoader worker sends its batches to the main process by
      // pickling them: the jobs go as one bytes object (PackGpuJobs), or
      // packed into a shared batch block where the worker has those
      // (SharedBlocks::LendGpuJobs, python/webdataset_cpp/_shared.py).
      .def(py::pickle(
          [](const GpuJobs& j) {
            const size_t size = wds::GpuJobsPackedSize(j.jobs);
            auto packed = py::reinterpret_steal<py::bytes>(
                PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size)));
            if (!packed) throw py::error_already_set();
            auto* out = reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(packed.ptr()));
            {
              ScopedGilRelease release;  // `packed` is not shared yet
              wds::PackGpuJobs(j.jobs, out);
            }
            return py::make_tuple(std::move(packed), TextsToPython(j.keys), TextsToPython(j.urls));
          },
          [](const py::tuple& state) {
            if (state.size() != 3 || !py::isinstance<py::bytes>(state[0])) {
              throw py::value_error("GpuJobs: a pickled state is (bytes, keys, urls)");
            }
            // The jobs view the unpickled bytes object.
            return GpuJobsFromPacked(BytesView(state[0]), state[1], state[2]);
          }));

  py::class_<wds::PendingImages, std::shared_ptr<wds::PendingImages>>(
      m, "PendingImages",
      "A batch's images decoded at full size by a Loader's worker (Loader(gpu_decoders=...)), "
      "waiting to be finished (resized, cropped, normalized) into the batch's tensor.")
      .def("__len__", [](const wds::PendingImages& p) { return p.layout().shape.at(0); })
      .def(
          "layout", [](const wds::PendingImages& p) { return LayoutTuple(p.layout()); },
          "(dtype name, shape) of the finished batch.")
      .def_property_readonly("device", &wds::PendingImages::device,
                             "The CUDA device index of the pixels (-1: the host).")
      .def(
          "finish",
          [](wds::PendingImages& p, uintptr_t out, uintptr_t stream) {
            absl::Status s;
            {
              ScopedGilRelease release;
              s = p.Finish(reinterpret_cast<void*>(out), reinterpret_cast<void*>(stream));
            }
            ThrowIfError(s);
          },
          py::arg("out"), py::arg("stream"),
          "Enqueues the batch's writing into memory at address `out` (layout()'s bytes, on "
          "`device`) on CUDA stream `stream` (an address; 0 is the default stream), after the "
          "worker's decode. On the host (device -1) it writes now.")
      .def("__repr__",
           [](const wds::PendingImages& p) { return "<PendingImages: " + p.TypeName() + ">"; });

  py::class_<wds::GpuBatchDecoder>(m, "GpuBatchDecoder",
                                   "Decodes GpuJobs on one CUDA device (nvJPEG where built).")
      .def(py::init([](int device, int max_cpu_threads) {
             absl::StatusOr<std::unique_ptr<wds::GpuBatchDecoder>> d =
                 wds::GpuBatchDecoder::Create(device, {.max_cpu_threads = max_cpu_threads});
             ThrowIfError(d.status());
             return *std::move(d);
           }),
           py::arg("device"), py::arg("max_cpu_threads") = 4)
      .def(
          "decode",
          [](wds::GpuBatchDecoder& d, const GpuJobs& jobs, uintptr_t out, uintptr_t stream) {
            absl::Status s;
            {
              ScopedGilRelease release;
              s = d.Decode(jobs.jobs, &jobs.keys, &jobs.urls, reinterpret_cast<void*>(out),
                           reinterpret_cast<void*>(stream));
            }
            ThrowIfError(s);
          },
          py::arg("jobs"), py::arg("out"), py::arg("stream"),
          "Enqueues the decode of `jobs` into device memory at address `out` (layout()'s "
          "bytes) on CUDA stream `stream` (an address; 0 is the default stream).")
      .def_property_readonly("device", &wds::GpuBatchDecoder::device)
      .def_property_readonly("decoder",
                             [](const wds::GpuBatchDecoder& d) { return std::string(d.decoder()); })
      .def_property_readonly("nvjpeg_hardware", &wds::GpuBatchDecoder::nvjpeg_hardware)
      .def("stats", [](const wds::GpuBatchDecoder& d) { return StatsToPython(d.stats()); });

  py::class_<wds::GpuWorkerDecoders, std::shared_ptr<wds::GpuWorkerDecoders>>(
      m, "GpuWorkerDecoders",
      "The decoders of a Loader's workers (Loader(gpu_decoders=...)): each worker decodes its "
      "batches' GpuJobs on the device, and the batches hold PendingImages.")
      .def(py::init([](int device, int max_cpu_threads, int decoders) {
             absl::StatusOr<std::shared_ptr<wds::GpuWorkerDecoders>> d;
             {
               ScopedGilRelease release;
               d = wds::GpuWorkerDecoders::Create(device, {.max_cpu_threads = max_cpu_threads},
                                                  decoders);
             }
             ThrowIfError(d.status());
             return *std::move(d);
           }),
           py::arg("device"), py::arg("max_cpu_threads") = 4, py::arg("decoders") = 1,
           "Makes `decoders` decoders now (one per worker keeps their set-up out of the first "
           "batches); the calling thread's current CUDA device becomes `device`.")
      .def_property_readonly("device", &wds::GpuWorkerDecoders::device)
      .def_property_readonly("decoder", &wds::GpuWorkerDecoders::decoder)
      .def_property_readonly("nvjpeg_hardware", &wds::GpuWorkerDecoders::nvjpeg_hardware)
      .def_property_readonly("decoders", &wds::GpuWorkerDecoders::decoders,
                             "How many decoders exist: the most workers that decoded at once.")
      .def(
          "stats", [](const wds::GpuWorkerDecoders& d) { return StatsToPython(d.stats()); },
          "GpuBatchDecoder.stats() summed over the workers' decoders.");
}

}  // namespace wdspy
