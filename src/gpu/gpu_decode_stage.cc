// GpuDecodeStage: the workers' half of decoding on the GPU. Each image field
// becomes a GPU job (gpu/gpu_job.h) drawn from the decode stream's rng exactly
// as the CPU decoder would draw: MakePlan for a JPEG nvJPEG takes, DecodeImage
// itself for everything else.
#include <string>
#include <utility>

#include "gpu/gpu_job.h"
#include "gpu/image_route.h"
#include "gpu/output_spec.h"
#include "image/codecs.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/internal/base/status_macros.h"

namespace wds {
namespace {

using gpu::GpuOutput;
using gpu::JobHeader;
using gpu::JobKind;

// JobOutput is `output` with this image's own size where the spec keeps it
// (ResizeMode::kNone).
GpuOutput JobOutput(const GpuOutput& output, int width, int height) {
  GpuOutput out = output;
  if (out.width == 0) {
    out.width = width;
    out.height = height;
  }
  return out;
}

absl::StatusOr<Buffer> MakeImageJob(std::string_view data, const ImageSpec& spec,
                                    const ImageDecodeOptions& options, const GpuOutput& output,
                                    std::string_view site, Rng& rng, BufferPool* pool) {
  gpu::GpuImagePlan plan = gpu::PlanGpuImage(data, spec, options, rng);
  JobHeader h;
  h.site = site;
  if (plan.decision.route == gpu::ImageRoute::kGpu) {
    WDS_RETURN_IF_ERROR(plan.plan.status());
    h.kind = JobKind::kJpeg;
    h.hardware = plan.decision.hardware;
    h.flip = plan.plan->flip;
    h.width = plan.plan->width;
    h.height = plan.plan->height;
    h.crop = plan.plan->crop;
    h.output = JobOutput(output, plan.plan->out_width, plan.plan->out_height);
    return gpu::MakeJob(h, data, pool);
  }
  // What nvJPEG does not take is decoded here, by the CPU decoder, at the
  // output size: the draws are DecodeImage's own, as on the CPU path.
  WDS_ASSIGN_OR_RETURN(Array pixels, DecodeImage(data, gpu::kJobPixelSpec, options, rng));
  h.kind = JobKind::kPixels;
  h.width = static_cast<int32_t>(pixels.shape[1]);
  h.height = static_cast<int32_t>(pixels.shape[0]);
  h.crop = ImageRect{0, 0, h.width, h.height};
  h.output = JobOutput(output, h.width, h.height);
  return gpu::MakeJob(h, pixels.data.view(), pool);
}

// JobPool is where a worker makes its jobs: the wiring's job pool (a
// Loader's pinned batch pool, so that the device decoder reads the jobs in
// place instead of gathering them into staging on the consumer's thread),
// else the pool for bytes.
BufferPool* JobPool(const WorkerContext::Wiring& wiring) {
  return wiring.job_pool != nullptr ? wiring.job_pool.get() : wiring.read_pool.get();
}

}  // namespace

absl::StatusOr<FieldDecoder> GpuJobDecoder(std::string_view image_spec, ImageDecodeOptions image,
                                           GpuDecodeOptions gpu_options) {
  absl::StatusOr<GpuOutput> output = gpu::ResolveGpuOutput(image_spec, image, gpu_options);
  if (!output.ok()) return output.status();
  const ImageSpec spec = *ParseImageSpec(image_spec);
  return FieldDecoder([spec, image, output = *output](
                          std::string_view field, const Buffer& data,
                          DecodeContext& ctx) -> absl::StatusOr<std::optional<Value>> {
    if (!IsImageExtension(FieldExtension(field))) return std::nullopt;
    BufferPool* pool = ctx.worker != nullptr ? JobPool(WiringOf(*ctx.worker)) : nullptr;
    thread_local std::string site;  // reused: no allocation per image
    site.clear();
    gpu::AppendSite(site, ctx.url, ctx.key, field);
    WDS_ASSIGN_OR_RETURN(Buffer job,
                         MakeImageJob(data.view(), spec, image, output, site, *ctx.rng, pool));
    return Value(std::move(job));
  });
}

StageFactory GpuDecodeStage(std::string_view image_spec, ImageDecodeOptions image,
                            GpuDecodeOptions gpu_options, DecodeOptions options) {
  absl::StatusOr<FieldDecoder> jobs = GpuJobDecoder(image_spec, std::move(image), gpu_options);
  if (!jobs.ok()) return FailingStage(jobs.status());
  std::vector<FieldDecoder> decoders = {*std::move(jobs)};
  for (FieldDecoder& basic : BasicDecoders()) decoders.push_back(std::move(basic));
  return DecodeStage(std::move(decoders), std::move(options));
}

}  // namespace wds
