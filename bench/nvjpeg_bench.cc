// nvjpeg_bench: on a GPU, the ceiling and our decoder against it, on the same
// JPEGs (a directory of .jpg files, read into memory before any clock starts):
//   raw      nvJPEG's batched decode alone (nvjpegDecodeBatched, RGBI, one
//            stream, the hardware backend where the GPU has it, else
//            GPU-hybrid), from pinned memory, into device buffers; and the
//            same from pageable memory (does staging in pinned memory pay?),
//            and with chroma interpolated (the flag GpuBatchDecoder sets);
//   decoder  GpuBatchDecoder on GPU jobs of the same images (gathering into
//            pinned staging, nvJPEG, the resize kernel), at full size and at a
//            224x224 centre crop (float32, normalized: the training input),
//            with its host time per batch by phase; and at full size with
//            the jobs read in place (Options::stage_inputs = false).
// Prints one JSON object. Built only where nvJPEG is (WDS_WITH_NVJPEG).
//
//   nvjpeg_bench DIR [--images N] [--batch B]... [--rounds R]
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <nvjpeg.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_job.h"
#include "gpu/image_route.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(std::string_view what) {
  std::fprintf(stderr, "nvjpeg_bench: %.*s\n", static_cast<int>(what.size()), what.data());
  std::exit(1);
}
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(wds::Cat(what, ": ", cudaGetErrorString(e)));
}
void Check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS) Die(wds::Cat(what, ": nvJPEG status ", static_cast<int>(s)));
}

std::vector<std::string> ReadJpegs(const std::string& dir, size_t limit) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) Die("cannot open " + dir);
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 4 && n.substr(n.size() - 4) == ".jpg") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  if (names.size() > limit) names.resize(limit);
  std::vector<std::string> out;
  for (const std::string& n : names) {
    std::ifstream f(dir + "/" + n, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    out.push_back(s.str());
  }
  if (out.empty()) Die("no .jpg files in " + dir);
  return out;
}

// Raw times nvJPEG alone; `pinned`: from pinned copies of the bitstreams,
// else from the strings themselves (pageable memory, as a loader's batch is).
// `flags`: nvjpegCreateEx's.
double Raw(const std::vector<std::string>& jpegs, int batch, int rounds, bool pinned_input,
           unsigned int flags, bool* hardware) {
  nvjpegHandle_t handle = nullptr;
  *hardware = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, flags, &handle) ==
              NVJPEG_STATUS_SUCCESS;
  if (!*hardware) {
    Check(nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, flags, &handle), "create");
  }
  nvjpegJpegState_t state = nullptr;
  Check(nvjpegJpegStateCreate(handle, &state), "state");
  Check(nvjpegDecodeBatchedInitialize(handle, state, batch, 4, NVJPEG_OUTPUT_RGBI), "init");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  // Pinned copies of the bitstreams, and one device image per batch slot.
  std::vector<unsigned char*> pinned(jpegs.size());
  std::vector<const unsigned char*> inputs(jpegs.size());
  for (size_t i = 0; i < jpegs.size(); ++i) {
    if (pinned_input) {
      Check(cudaMallocHost(reinterpret_cast<void**>(&pinned[i]), jpegs[i].size()),
            "cudaMallocHost");
      std::copy(jpegs[i].begin(), jpegs[i].end(), pinned[i]);
      inputs[i] = pinned[i];
    } else {
      inputs[i] = reinterpret_cast<const unsigned char*>(jpegs[i].data());
    }
  }
  // Widths (for pitches) from nvJPEG's own header parse; images up to 2048x2048.
  std::vector<int> widths(jpegs.size());
  for (size_t i = 0; i < jpegs.size(); ++i) {
    int n = 0;
    nvjpegChromaSubsampling_t ss;
    int w[NVJPEG_MAX_COMPONENT], h[NVJPEG_MAX_COMPONENT];
    Check(nvjpegGetImageInfo(handle, inputs[i], jpegs[i].size(), &n, &ss, w, h), "info");
    if (w[0] > 2048 || h[0] > 2048) Die("an image is larger than 2048x2048");
    widths[i] = w[0];
  }
  std::vector<nvjpegImage_t> images(batch);
  std::vector<void*> device(batch);
  for (int k = 0; k < batch; ++k) {
    Check(cudaMalloc(&device[k], size_t{2048} * 2048 * 3), "cudaMalloc");
    images[k] = nvjpegImage_t{};
    images[k].channel[0] = static_cast<unsigned char*>(device[k]);
  }
  const size_t batches = jpegs.size() / batch;
  std::vector<const unsigned char*> data(batch);
  std::vector<size_t> lengths(batch);
  auto run = [&](int r) {
    for (int round = 0; round < r; ++round) {
      for (size_t b = 0; b < batches; ++b) {
        for (int k = 0; k < batch; ++k) {
          data[k] = inputs[b * batch + k];
          lengths[k] = jpegs[b * batch + k].size();
          images[k].pitch[0] = static_cast<size_t>(widths[b * batch + k]) * 3;
        }
        Check(nvjpegDecodeBatched(handle, state, data.data(), lengths.data(), images.data(), stream),
              "decode");
      }
    }
    Check(cudaStreamSynchronize(stream), "sync");
  };
  run(1);  // warm-up
  const Clock::time_point start = Clock::now();
  run(rounds);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  for (void* p : device) cudaFree(p);
  for (unsigned char* p : pinned) {
    if (p != nullptr) cudaFreeHost(p);
  }
  nvjpegJpegStateDestroy(state);
  nvjpegDestroy(handle);
  cudaStreamDestroy(stream);
  return static_cast<double>(batches) * batch * rounds / s;
}

// Jobs: what GpuDecodeStage makes of each JPEG for `output`, with the plan of
// a centre crop (or the full image).
std::vector<wds::Buffer> MakeJobs(const std::vector<std::string>& jpegs, int size, bool crop) {
  std::vector<wds::Buffer> jobs;
  for (const std::string& j : jpegs) {
    const wds::gpu::RouteDecision d = wds::gpu::RouteImage(j);
    if (d.route != wds::gpu::ImageRoute::kGpu) Die("a JPEG is not routed to the GPU: " + d.reason);
    wds::gpu::JobHeader h = wds::gpu::WholeJpegJob(d.header.width, d.header.height, d.hardware);
    if (crop) {
      const int side = std::min(h.width, h.height);
      h.crop = {(h.width - side) / 2, (h.height - side) / 2, side, side};
      h.output.width = h.output.height = size;
      h.output.dtype = wds::DType::kFloat32;
      h.output.channels_first = true;
      h.output.normalize = wds::kImageNetNormalize;
    }
    jobs.push_back(wds::gpu::MakeJob(h, j));
  }
  return jobs;
}

// Decoder times GpuBatchDecoder; `phases` gets its host time per batch by
// phase (GpuBatchDecoder::Stats::seconds), in milliseconds, as JSON.
double Decoder(const std::vector<wds::Buffer>& jobs, int batch, int rounds, bool staged,
               std::string* name, std::string* phases) {
  auto decoder = wds::GpuBatchDecoder::Create(0, {.stage_inputs = staged});
  if (!decoder.ok()) Die(wds::ToStd(decoder.status().message()));
  *name = std::string((*decoder)->decoder());
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const size_t batches = jobs.size() / batch;
  std::vector<wds::BytesList> columns(batches);
  for (size_t b = 0; b < batches; ++b) {
    columns[b].assign(jobs.begin() + b * batch, jobs.begin() + (b + 1) * batch);
  }
  auto layout = wds::GpuJobLayout(columns[0]);
  if (!layout.ok()) Die(wds::ToStd(layout.status().message()));
  void* out = nullptr;
  Check(cudaMalloc(&out, layout->nbytes()), "cudaMalloc");
  auto run = [&](int r) {
    for (int round = 0; round < r; ++round) {
      for (const wds::BytesList& c : columns) {
        absl::Status s = (*decoder)->Decode(c, nullptr, nullptr, out, stream);
        if (!s.ok()) Die(wds::ToStd(s.message()));
      }
    }
    Check(cudaStreamSynchronize(stream), "sync");
  };
  run(1);
  const Clock::time_point start = Clock::now();
  run(rounds);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  const wds::GpuBatchDecoder::Stats& stats = (*decoder)->stats();
  if (stats.cpu_fallback_images != 0) Die("the decoder fell back to the CPU");
  const wds::GpuBatchDecoder::Stats::Phases& t = stats.seconds;
  auto ms = [&](double seconds) {
    return wds::Cat(static_cast<int64_t>(1e6 * seconds / stats.batches) / 1000.0);
  };
  *phases = wds::Cat("{\"parse\": ", ms(t.parse), ", \"wait\": ", ms(t.wait),
                     ", \"gather\": ", ms(t.gather), ", \"nvjpeg\": ", ms(t.nvjpeg),
                     ", \"cpu_decode\": ", ms(t.cpu_decode), ", \"kernel\": ", ms(t.kernel), "}");
  cudaFree(out);
  cudaStreamDestroy(stream);
  return static_cast<double>(batches) * batch * rounds / s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: nvjpeg_bench DIR [--images N] [--batch B]... [--rounds R]");
  std::string dir = argv[1];
  size_t images = 1024;
  int rounds = 3;
  std::vector<int> batches;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--images") images = std::strtoul(argv[i + 1], nullptr, 10);
    else if (a == "--batch") batches.push_back(std::atoi(argv[i + 1]));
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else Die("unknown option " + a);
  }
  if (batches.empty()) batches = {64, 256};
  const std::vector<std::string> jpegs = ReadJpegs(dir, images);
  const std::vector<wds::Buffer> full = MakeJobs(jpegs, 0, false);
  const std::vector<wds::Buffer> cropped = MakeJobs(jpegs, 224, true);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::string json = wds::Cat("{\"gpu\": \"", prop.name, "\", \"images\": ", jpegs.size());
  std::string name;
  for (int b : batches) {
    bool hardware = false;
    const double raw = Raw(jpegs, b, rounds, /*pinned_input=*/true, 0, &hardware);
    const double raw_pageable = Raw(jpegs, b, rounds, /*pinned_input=*/false, 0, &hardware);
#ifdef NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
    const double raw_interpolated = Raw(jpegs, b, rounds, /*pinned_input=*/true,
                                        NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, &hardware);
#else
    const double raw_interpolated = 0;
#endif
    std::string phases;
    std::string crop_phases;
    std::string unstaged_phases;
    const double ours = Decoder(full, b, rounds, true, &name, &phases);
    const double ours_crop = Decoder(cropped, b, rounds, true, &name, &crop_phases);
    const double ours_unstaged = Decoder(full, b, rounds, false, &name, &unstaged_phases);
    json += wds::Cat(", \"batch", b, "\": {\"raw_nvjpeg_", hardware ? "hardware" : "hybrid",
                     "_img_s\": ", static_cast<int64_t>(raw),
                     ", \"raw_from_pageable_img_s\": ", static_cast<int64_t>(raw_pageable),
                     ", \"raw_chroma_interpolated_img_s\": ", static_cast<int64_t>(raw_interpolated),
                     ", \"decoder_full_size_img_s\": ", static_cast<int64_t>(ours),
                     ", \"decoder_crop224_float_img_s\": ", static_cast<int64_t>(ours_crop),
                     ", \"decoder_unstaged_full_size_img_s\": ", static_cast<int64_t>(ours_unstaged),
                     ", \"decoder_over_raw\": ", static_cast<int64_t>(1000 * ours / raw) / 1000.0,
                     ", \"decoder_ms_per_batch\": ", phases,
                     ", \"decoder_crop224_ms_per_batch\": ", crop_phases,
                     ", \"decoder_unstaged_ms_per_batch\": ", unstaged_phases, "}");
  }
  json += wds::Cat(", \"decoder\": \"", name, "\"}");
  std::puts(json.c_str());
  return 0;
}
