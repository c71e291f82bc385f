// The device cases of GPU decode (wds/gpu/gpu_decode.h): the device decoder
// against the host decoder on the same jobs (nvJPEG's IDCT differs from
// libjpeg-turbo's by up to 2 per channel), errors, and device memory over
// restarts. They run where a GPU is (scripts/gpu_check.sh) and skip elsewhere.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/gpu_job.h"
#include "gpu_jobs_testing.h"
#include "gtest/gtest.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"

namespace wds::gpu {
namespace {

using ::testing::StartsWith;

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// DeviceTestJobs is a batch of TestShard's 15 images as GPU jobs, made in the
// Loader's pinned batch pool when `pinned`.
BytesList DeviceTestJobs(const ImageDecodeOptions& image, const std::string& spec,
                         const GpuDecodeOptions& gpu = {}, bool pinned = false) {
  TempDir dir;
  Loader loader(Source(TestShard(dir)).DecodeOnGpu(spec, image, gpu).Batched(15),
                {.workers = 1, .pin_memory = pinned, .device = 0});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  EXPECT_TRUE(batch.ok()) << batch.status();
  return std::get<BytesList>(*(*batch)->Find("jpg"));
}

std::vector<uint8_t> OnDevice(GpuBatchDecoder& decoder, const BytesList& jobs) {
  absl::StatusOr<GpuBatchLayout> layout = GpuJobLayout(jobs);
  EXPECT_TRUE(layout.ok());
  void* out = nullptr;
  EXPECT_EQ(cudaMalloc(&out, layout->nbytes()), cudaSuccess);
  absl::Status s = decoder.Decode(jobs, nullptr, nullptr, out, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<uint8_t> host(layout->nbytes());
  EXPECT_EQ(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(out);
  return host;
}

// nvJPEG reading the jobs in place decodes exactly what it decodes from
// pinned staging: the same bytes, the same decoder.
TEST(GpuBatchDecoderDeviceTest, UnstagedInputsDecodeTheSamePixels) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto staged = GpuBatchDecoder::Create(0);
  auto unstaged = GpuBatchDecoder::Create(0, {.stage_inputs = false});
  ASSERT_TRUE(staged.ok() && unstaged.ok());
  ASSERT_EQ((*unstaged)->decoder(), (*staged)->decoder());
  const BytesList jobs = DeviceTestJobs({.resize = {ResizeMode::kStretch, 40, 30}}, "rgb8");
  EXPECT_EQ(OnDevice(**unstaged, jobs), OnDevice(**staged, jobs));
  EXPECT_EQ((*unstaged)->stats().images, 15);
  EXPECT_EQ((*unstaged)->stats().images_read_in_place, 15);
  EXPECT_EQ((*staged)->stats().images_read_in_place, 0);
}

// A Loader with pin_memory makes its jobs in page-locked memory; the decoder
// reads those in place (no staging) and decodes the same pixels.
TEST(GpuBatchDecoderDeviceTest, PinnedJobsAreReadInPlaceAndDecodeTheSamePixels) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto decoder = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const ImageDecodeOptions image = {.resize = {ResizeMode::kStretch, 40, 30}};
  const BytesList pinned = DeviceTestJobs(image, "rgb8", {}, /*pinned=*/true);
  const BytesList pageable = DeviceTestJobs(image, "rgb8");
  ASSERT_EQ(pinned.size(), 15u);
  for (const Buffer& job : pinned) ASSERT_TRUE(ReadJob(job)->pinned);
  EXPECT_FALSE(ReadJob(pageable[0])->pinned);
  const std::vector<uint8_t> in_place = OnDevice(**decoder, pinned);
  EXPECT_EQ((*decoder)->stats().images_read_in_place, 15);
  EXPECT_EQ(in_place, OnDevice(**decoder, pageable));
  EXPECT_EQ((*decoder)->stats().images_read_in_place, 15) << "the pageable jobs were staged";
}

TEST(GpuBatchDecoderDeviceTest, DeviceOutputIsTheHostDecodersWithinTwo) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto device = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(device.ok()) << device.status();
  auto host = GpuBatchDecoder::Create(GpuBatchDecoder::kHost);
  std::cout << "device decoder: " << (*device)->decoder() << "\n";
  const BytesList jobs = DeviceTestJobs({.resize = {ResizeMode::kStretch, 40, 30}}, "rgb8");
  const std::vector<uint8_t> gpu = OnDevice(**device, jobs);
  absl::StatusOr<Array> cpu = (*host)->DecodeToArray(jobs, nullptr, nullptr);
  ASSERT_TRUE(cpu.ok());
  int worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    worst = std::max(worst, std::abs(int{gpu[i]} - int{cpu->data_as<uint8_t>()[i]}));
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ((*device)->stats().worker_decoded_images, 1);
#if WDS_TEST_NVJPEG
  EXPECT_EQ((*device)->stats().nvjpeg_images, 14);
  EXPECT_EQ((*device)->stats().cpu_fallback_images, 0);
#endif
}

// nvJPEG refuses the scan, the CPU decoder too: the error names the job.
TEST(GpuBatchDecoderDeviceTest, UndecodableJpegFailsNamingTheShardKeyAndField) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  absl::StatusOr<std::optional<Sample>> batch = FirstBatch(dir, UndefinedHuffmanTable());
  ASSERT_TRUE(batch.ok()) << batch.status();
  const auto& jobs = std::get<BytesList>(*(*batch)->Find("jpg"));
  const auto& keys = std::get<TextList>(*(*batch)->Find(kKeyField));
  const auto& urls = std::get<TextList>(*(*batch)->Find(kUrlField));
  auto device = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(device.ok()) << device.status();
  void* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, GpuJobLayout(jobs)->nbytes()), cudaSuccess);
  absl::Status s = (*device)->Decode(jobs, &keys, &urls, out, nullptr);
  cudaFree(out);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(ToStd(s.message()),
              StartsWith(Cat("decode on cuda: ", dir.path(),
                             "/shard-000001.tar: key s15: field jpg: ")));
}

// 200 loader restarts feeding one decoder (a consumer's decoder outlives its
// loaders), then decoders made and dropped: device memory stays flat.
TEST(GpuBatchDecoderDeviceTest, DeviceMemoryIsFlatOver200LoaderRestarts) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  const Pipeline recipe =
      Source(TestShard(dir))
          .DecodeOnGpu("torchrgb", {.resize = {ResizeMode::kCenterCrop, 32, 32}},
                       {.normalize = kImageNetNormalize})
          .Batched(15);
  auto decoder = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  auto restart = [&] {
    Loader loader(recipe, {.workers = 1});
    absl::StatusOr<std::optional<Sample>> batch = loader.Next();
    ASSERT_TRUE(batch.ok() && batch->has_value()) << batch.status();
    (void)OnDevice(**decoder, std::get<BytesList>(*(*batch)->Find("jpg")));
  };
  restart();  // the context's and nvJPEG's first allocations
  size_t free_before = 0, total = 0, free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  for (int i = 0; i < 200; ++i) restart();
  for (int i = 0; i < 5; ++i) {
    decoder->reset();
    decoder = GpuBatchDecoder::Create(0);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    restart();
  }
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  const double lost_mb = (static_cast<double>(free_before) - static_cast<double>(free_after)) / 1e6;
  std::cout << "device memory lost over 200 loader restarts and 5 decoders: " << lost_mb << " MB\n";
  EXPECT_LT(lost_mb, 4.0);
}

// TestStream is a non-blocking CUDA stream, synchronized and destroyed with
// its scope (also when an ASSERT leaves early).
class TestStream {
 public:
  TestStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  ~TestStream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Finish(out, stream) copied back to the host.
std::vector<uint8_t> Finished(PendingImages& pending, cudaStream_t stream) {
  void* out = nullptr;
  EXPECT_EQ(cudaMalloc(&out, pending.layout().nbytes()), cudaSuccess);
  absl::Status s = pending.Finish(out, stream);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<uint8_t> host(pending.layout().nbytes());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(out);
  return host;
}

// Two batches (other images at every offset) decoded ahead on a worker's
// stream, finished on the consumer's after the decoder is gone: Decode's
// bytes, and again on a second Finish.
TEST(GpuBatchDecoderDeviceTest, DecodeAheadFinishedOnAnotherStreamIsDecode) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const BytesList jobs = DeviceTestJobs({.resize = {ResizeMode::kCenterCrop, 40, 30}}, "torchrgb",
                                        {.normalize = kImageNetNormalize});
  const BytesList reversed(jobs.rbegin(), jobs.rend());
  auto reference = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::vector<uint8_t> want = OnDevice(**reference, jobs);
  const std::vector<uint8_t> want_reversed = OnDevice(**reference, reversed);
  ASSERT_NE(want, want_reversed);
  const TestStream worker;
  const TestStream consumer;
  auto decoder = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  ASSERT_EQ((*decoder)->decoder(), (*reference)->decoder());
  absl::StatusOr<std::shared_ptr<PendingImages>> first =
      (*decoder)->DecodeAhead(jobs, nullptr, nullptr, worker);
  absl::StatusOr<std::shared_ptr<PendingImages>> second =
      (*decoder)->DecodeAhead(reversed, nullptr, nullptr, worker);
  ASSERT_TRUE(first.ok() && second.ok());
  decoder->reset();
  EXPECT_EQ((*first)->TypeName(), "images decoded on cuda:0, not yet finished into a batch");
  EXPECT_EQ(Finished(**second, consumer), want_reversed);
  EXPECT_EQ(Finished(**first, consumer), want);
  EXPECT_EQ(Finished(**first, consumer), want);
  first->reset();
  second->reset();
}

// Batches of other sizes and other shares of the hardware and hybrid
// backends (the progressive JPEG s05 goes to the hybrid one) decoded back to
// back ahead of their finishes, with no host wait between them: nvJPEG's
// states are initialised again for each new size only once their last batch
// is done. Each batch is Decode's bytes.
TEST(GpuBatchDecoderDeviceTest, BatchesOfChangingSizesDecodeBackToBack) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const BytesList jobs = DeviceTestJobs({.resize = {ResizeMode::kStretch, 40, 30}}, "rgb8");
  const std::vector<std::pair<size_t, size_t>> spans = {{0, 15}, {0, 5},  {3, 12}, {6, 15},
                                                        {5, 6},  {0, 15}, {8, 10}};
  std::vector<BytesList> batches;
  for (const auto& [from, to] : spans) batches.emplace_back(jobs.begin() + from, jobs.begin() + to);
  auto reference = GpuBatchDecoder::Create(0);
  auto decoder = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(reference.ok() && decoder.ok());
  ASSERT_EQ((*decoder)->decoder(), (*reference)->decoder());
  std::vector<std::vector<uint8_t>> want;
  for (const BytesList& b : batches) want.push_back(OnDevice(**reference, b));
  const TestStream worker;
  const TestStream consumer;
  std::vector<std::shared_ptr<PendingImages>> pending;
  for (const BytesList& b : batches) {
    absl::StatusOr<std::shared_ptr<PendingImages>> p =
        (*decoder)->DecodeAhead(b, nullptr, nullptr, worker);
    ASSERT_TRUE(p.ok()) << p.status();
    pending.push_back(*std::move(p));
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    EXPECT_EQ(Finished(*pending[i], consumer), want[i]) << "batch " << i;
  }
  EXPECT_EQ((*decoder)->stats().images, (*reference)->stats().images);
  pending.clear();
}

// HoldBack makes `stream` wait `ms` milliseconds on the host before what is
// enqueued after it: a consumer whose kernels run late. `ms` must outlive
// the wait.
void HoldBack(cudaStream_t stream, const int& ms) {
  ASSERT_EQ(cudaLaunchHostFunc(
                stream,
                [](void* ms) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
                },
                const_cast<int*>(&ms)),
            cudaSuccess);
}

// The block of a batch finished late is reused only after its kernels ran:
// batch A is finished on a stream held back 600 ms, then on one held back
// 50 ms, and dropped at once; batch B (other images, so other pixels at every
// offset) is decoded into A's block, the pool's one idle block, meanwhile.
// A's outputs are still A's: B waited for the second finish, which waited for
// the first (without that chain, B would overwrite the block before the
// first kernel reads it).
TEST(GpuBatchDecoderDeviceTest, BlockIsReusedOnlyAfterEveryFinishOfItsBatchHasRun) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const ImageDecodeOptions image = {.resize = {ResizeMode::kStretch, 40, 30}};
  const BytesList a_jobs = DeviceTestJobs(image, "rgb8");
  const BytesList b_jobs(a_jobs.rbegin(), a_jobs.rend());
  auto reference = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::vector<uint8_t> want_a = OnDevice(**reference, a_jobs);
  const std::vector<uint8_t> want_b = OnDevice(**reference, b_jobs);
  ASSERT_NE(want_a, want_b);
  const TestStream worker;
  const TestStream first;
  const TestStream second;
  auto decoder = GpuBatchDecoder::Create(0);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  ASSERT_EQ((*decoder)->decoder(), (*reference)->decoder());
  const size_t bytes = GpuJobLayout(a_jobs)->nbytes();
  static const int kLong = 600;
  static const int kShort = 50;
  std::vector<void*> outs(3, nullptr);
  for (void*& out : outs) ASSERT_EQ(cudaMalloc(&out, bytes), cudaSuccess);
  {
    absl::StatusOr<std::shared_ptr<PendingImages>> a =
        (*decoder)->DecodeAhead(a_jobs, nullptr, nullptr, worker);
    ASSERT_TRUE(a.ok()) << a.status();
    HoldBack(first, kLong);
    ASSERT_TRUE((*a)->Finish(outs[0], first).ok());
    HoldBack(second, kShort);
    ASSERT_TRUE((*a)->Finish(outs[1], second).ok());
  }  // A is dropped: its block goes back to the pool while both kernels wait
  absl::StatusOr<std::shared_ptr<PendingImages>> b =
      (*decoder)->DecodeAhead(b_jobs, nullptr, nullptr, worker);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->Finish(outs[2], worker).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got(bytes);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(cudaMemcpy(got.data(), outs[i], bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, i < 2 ? want_a : want_b) << "output " << i;
    cudaFree(outs[i]);
  }
}

// 200 loaders whose workers decode ahead with the same decoders, each batch
// finished: device memory stays flat, and the workers share their decoders.
TEST(GpuBatchDecoderDeviceTest, WorkerDecodersKeepDeviceMemoryFlatOver200LoaderRestarts) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  const Pipeline recipe =
      Source(TestShard(dir))
          .DecodeOnGpu("torchrgb", {.resize = {ResizeMode::kCenterCrop, 32, 32}},
                       {.normalize = kImageNetNormalize})
          .Batched(4);
  absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> decoders =
      GpuWorkerDecoders::Create(0, {}, /*decoders=*/2);
  ASSERT_TRUE(decoders.ok()) << decoders.status();
  auto restart = [&] {
    Loader loader(recipe, {.workers = 2, .gpu_decoders = *decoders});
    int batches = 0;
    while (true) {
      absl::StatusOr<std::optional<Sample>> batch = loader.Next();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!batch->has_value()) break;
      PendingImages* pending = AsPendingImages(*(*batch)->Find("jpg"));
      ASSERT_NE(pending, nullptr);
      (void)Finished(*pending, nullptr);
      ++batches;
    }
    EXPECT_EQ(batches, 4);
  };
  // Warm-up: each decoder's pool grows to the most batches it had in flight
  // (a few 1 MiB blocks here); a leak would grow with the restarts.
  for (int i = 0; i < 3; ++i) restart();
  size_t free_before = 0, total = 0, free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  for (int i = 0; i < 200; ++i) restart();
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  const double lost_mb = (static_cast<double>(free_before) - static_cast<double>(free_after)) / 1e6;
  std::cout << "device memory lost over 200 loaders decoding in their workers: " << lost_mb
            << " MB; decoders: " << (*decoders)->decoders() << "\n";
  EXPECT_LT(lost_mb, 16.0);
  EXPECT_EQ((*decoders)->decoders(), 2) << "one per worker, made up front";
  EXPECT_EQ((*decoders)->stats().images, 203 * 15);
}

}  // namespace
}  // namespace wds::gpu
