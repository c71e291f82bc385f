// Tests of decoding on the GPU end to end (wds/gpu/gpu_decode.h): the jobs the
// workers make, their columns in batches, and GpuBatchDecoder. The host
// decoder stands in for the device: same jobs, same draws, same arithmetic.
// No CUDA here (this binary runs under the sanitizers too); the device cases
// are gpu_jobs_device_test's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/gpu_job.h"
#include "gpu/job_column.h"
#include "gtest/gtest.h"
#include "gpu_jobs_testing.h"
#include "jpeg_variants.h"
#include "util/test_util.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds::gpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ----------------------------------------------------------------------------
// The job format

JobHeader SomeHeader() {
  JobHeader h;
  h.kind = JobKind::kJpeg;
  h.hardware = true;
  h.flip = true;
  h.width = 500;
  h.height = 375;
  h.crop = {10, 20, 300, 200};
  h.output.dtype = DType::kFloat16;
  h.output.channels_first = true;
  h.output.width = 224;
  h.output.height = 160;
  h.output.normalize = kImageNetNormalize;
  return h;
}

// ValidJob is a job of header `h` whose payload is a JPEG of the header's size.
Buffer ValidJob(const JobHeader& h, BufferPool* pool = nullptr) {
  JpegRecipe r;
  r.width = h.width;
  r.height = h.height;
  return MakeJob(h, EncodeJpeg(r), pool);
}

// PinnedLookingAllocator is ordinary memory that says it is page-locked, as
// the CUDA host allocator a Loader with pin_memory pools its batches in does.
class PinnedLookingAllocator final : public HostAllocator {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    return std::aligned_alloc(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment *
                                                  kHostAlignment);
  }
  void Deallocate(void* p, size_t) override { std::free(p); }
  bool pinned() const override { return true; }
  std::string_view name() const override { return "pinned-looking"; }
};

std::shared_ptr<BufferPool> PinnedLookingPool() {
  return std::make_shared<BufferPool>(std::make_shared<PinnedLookingAllocator>());
}

TEST(GpuJobTest, HeaderAndPayloadRoundTrip) {
  const Buffer job = MakeJob(SomeHeader(), "payload bytes");
  EXPECT_EQ(job.size(), kJobHeaderBytes + 13);
  std::string_view payload;
  const std::optional<JobHeader> h = ReadJob(job, &payload);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(payload, "payload bytes");
  EXPECT_EQ(h->kind, JobKind::kJpeg);
  EXPECT_TRUE(h->hardware);
  EXPECT_TRUE(h->flip);
  EXPECT_EQ(h->width, 500);
  EXPECT_EQ(h->height, 375);
  EXPECT_EQ(h->crop, (ImageRect{10, 20, 300, 200}));
  EXPECT_EQ(h->output.dtype, DType::kFloat16);
  EXPECT_TRUE(h->output.channels_first);
  EXPECT_EQ(h->output.width, 224);
  EXPECT_EQ(h->output.height, 160);
  EXPECT_EQ(h->output.normalize.mean, kImageNetNormalize.mean);
  EXPECT_EQ(h->output.normalize.std, kImageNetNormalize.std);
}

TEST(GpuJobTest, SiteEndsTheJobAndIsReadBackApartFromThePayload) {
  JobHeader h = SomeHeader();
  std::string site;
  AppendSite(site, "s3://bucket/train-000001.tar", "n01440764_10026", "jpg");
  EXPECT_EQ(site, "s3://bucket/train-000001.tar: key n01440764_10026: field jpg");
  h.site = site;
  const Buffer job = MakeJob(h, "payload bytes");
  EXPECT_EQ(job.size(), kJobHeaderBytes + 13 + site.size());
  std::string_view payload;
  const std::optional<JobHeader> read = ReadJob(job, &payload);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(payload, "payload bytes");
  EXPECT_EQ(read->site, site);
  std::string no_url;
  AppendSite(no_url, "", "k", "png");
  EXPECT_EQ(no_url, "key k: field png");
  // Without a site, the payload is everything after the header.
  EXPECT_EQ(ReadJob(MakeJob(SomeHeader(), "x"))->site, "");
}

TEST(GpuJobTest, SiteLongerThanTheJobIsNoJob) {
  JobHeader h = SomeHeader();
  h.site = "key k: field jpg";
  Buffer job = MakeJob(h, "x");
  ASSERT_TRUE(ReadJob(job).has_value());
  job.mutable_data()[68] = static_cast<uint8_t>(1 + 16 + 1);  // one byte more than follows
  EXPECT_FALSE(ReadJob(job).has_value());
  job.mutable_data()[68] = 1 + 16;  // the payload is empty, the site all the rest
  std::string_view payload;
  ASSERT_TRUE(ReadJob(job, &payload).has_value());
  EXPECT_EQ(payload, "");
  EXPECT_EQ(ReadJob(job)->site, "xkey k: field jpg");
}

TEST(GpuJobTest, BytesThatAreNoJobAreNotReadAsOne) {
  EXPECT_FALSE(ReadJob(Buffer::Copy("\xff\xd8\xff\xe0 a JPEG")).has_value());
  EXPECT_FALSE(ReadJob(Buffer::Copy("WDSGPUJ1")).has_value());  // too short
  Buffer job = MakeJob(SomeHeader(), "x");
  job.mutable_data()[8] = 7;  // an unknown kind
  EXPECT_FALSE(ReadJob(job).has_value());
  JobHeader empty = SomeHeader();
  empty.output.width = 0;
  EXPECT_FALSE(ReadJob(MakeJob(empty, "x")).has_value());
}

TEST(GpuJobTest, CropOutsideTheImageOrSidesBeyondTheBoundAreNoJob) {
  JobHeader h = SomeHeader();
  h.crop = {300, 0, 201, 375};  // one column past the right edge
  EXPECT_FALSE(ReadJob(MakeJob(h, "x")).has_value());
  h.crop = {0, -1, 10, 10};
  EXPECT_FALSE(ReadJob(MakeJob(h, "x")).has_value());
  h = SomeHeader();
  h.output.width = kMaxJobSide + 1;
  EXPECT_FALSE(ReadJob(MakeJob(h, "x")).has_value());
  h = SomeHeader();
  h.crop = {0, 0, 500, 375};  // the whole image
  EXPECT_TRUE(ReadJob(MakeJob(h, "x")).has_value());
}

TEST(GpuJobTest, JpegFrameSizeWalksTheSegmentsToTheFrameHeader) {
  JpegRecipe r;
  r.width = 300;
  r.height = 17;
  EXPECT_EQ(JpegFrameSize(EncodeJpeg(r)), std::make_pair(300, 17));
  r.progressive = true;  // SOF2
  EXPECT_EQ(JpegFrameSize(EncodeJpeg(r)), std::make_pair(300, 17));
  const std::string jpeg = EncodeJpeg(r);
  EXPECT_EQ(JpegFrameSize(jpeg.substr(0, 30)), std::nullopt);  // cut before the frame
  EXPECT_EQ(JpegFrameSize("\xff\xd8\xff\xda\x00\x08"), std::nullopt);  // a scan first
  EXPECT_EQ(JpegFrameSize("not a jpeg"), std::nullopt);
}

// Any bytes field may start with the magic: a job whose header lies about
// its JPEG's size is refused, never decoded into a slot of the wrong size.
TEST(GpuJobTest, JobWhoseSizeIsNotItsJpegsIsRefused) {
  JpegRecipe r;  // 64x48
  JobHeader h;
  h.kind = JobKind::kJpeg;
  h.width = 32;
  h.height = 48;
  h.crop = {0, 0, 32, 48};
  h.output.width = 32;
  h.output.height = 48;
  const TextList keys = {"liar"};
  absl::StatusOr<GpuBatchLayout> layout = GpuJobLayout({MakeJob(h, EncodeJpeg(r))}, &keys);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().message(),
            "decode on cuda: key liar: a GPU job says its JPEG is 32x48, its frame header says "
            "64x48");
  // A job's own site names it before the batch's keys do.
  h.site = "shard.tar: key liar: field jpg";
  layout = GpuJobLayout({MakeJob(h, EncodeJpeg(r))}, &keys);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().message(),
            "decode on cuda: shard.tar: key liar: field jpg: a GPU job says its JPEG is 32x48, "
            "its frame header says 64x48");
}

TEST(GpuJobTest, JobsFromAPinnedPoolSayTheyArePinned) {
  const std::shared_ptr<BufferPool> pinned = PinnedLookingPool();
  BufferPool plain;
  JobHeader h = SomeHeader();
  h.pinned = true;  // ignored: MakeJob says where it put the job
  EXPECT_TRUE(ReadJob(MakeJob(h, "x", pinned.get()))->pinned);
  EXPECT_FALSE(ReadJob(MakeJob(h, "x", &plain))->pinned);
  EXPECT_FALSE(ReadJob(MakeJob(h, "x"))->pinned);
  EXPECT_TRUE(ReadJob(MakeJob(SomeHeader(), "x", pinned.get()))->pinned);
}

TEST(GpuJobTest, ColumnIsPinnedWhenEveryJobIs) {
  const std::shared_ptr<BufferPool> pinned = PinnedLookingPool();
  const JobHeader h = SomeHeader();
  absl::StatusOr<JobColumn> all =
      ParseJobColumn({ValidJob(h, pinned.get()), ValidJob(h, pinned.get())}, nullptr, nullptr);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->pinned);
  absl::StatusOr<JobColumn> some =
      ParseJobColumn({ValidJob(h, pinned.get()), ValidJob(h)}, nullptr, nullptr);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_FALSE(some->pinned);
}

TEST(GpuJobTest, PackedColumnUnpacksToTheSameJobsNoLongerPinned) {
  const std::shared_ptr<BufferPool> pinned = PinnedLookingPool();
  JobHeader other = SomeHeader();
  other.site = "shard.tar: key b: field jpg";
  const BytesList jobs = {MakeJob(SomeHeader(), "first payload", pinned.get()),
                          MakeJob(other, "", pinned.get()), MakeJob(SomeHeader(), "third")};
  std::string packed(GpuJobsPackedSize(jobs), '\0');
  EXPECT_EQ(packed.size(), 8 * 4 + jobs[0].size() + jobs[1].size() + jobs[2].size());
  PackGpuJobs(jobs, reinterpret_cast<uint8_t*>(packed.data()));
  const Buffer block = Buffer::Copy(packed);
  absl::StatusOr<BytesList> back = UnpackGpuJobs(block);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::string_view payload;
    std::string_view original_payload;
    const std::optional<JobHeader> h = ReadJob((*back)[i], &payload);
    const std::optional<JobHeader> original = ReadJob(jobs[i], &original_payload);
    ASSERT_TRUE(h.has_value() && original.has_value()) << i;
    EXPECT_EQ(payload, original_payload) << i;
    EXPECT_EQ(h->site, original->site) << i;
    EXPECT_FALSE(h->pinned) << i;
    // Every byte but the pinned flag is the original's.
    std::string bytes((*back)[i].view());
    std::string original_bytes(jobs[i].view());
    bytes[9] = original_bytes[9] = 0;
    EXPECT_EQ(bytes, original_bytes) << i;
  }
  EXPECT_TRUE(ReadJob(jobs[0])->pinned);  // the originals are untouched
  // The jobs are slices of the packed block.
  EXPECT_EQ((*back)[0].data(), block.data() + 8 * 4);
  EXPECT_EQ((*back)[1].data(), (*back)[0].data() + jobs[0].size());

  std::string empty(GpuJobsPackedSize({}), '\0');
  PackGpuJobs({}, reinterpret_cast<uint8_t*>(empty.data()));
  absl::StatusOr<BytesList> none = UnpackGpuJobs(Buffer::Copy(empty));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(GpuJobTest, MalformedPackedJobsAreRefusedNamingWhat) {
  const BytesList jobs = {MakeJob(SomeHeader(), "payload"), MakeJob(SomeHeader(), "more")};
  std::string packed(GpuJobsPackedSize(jobs), '\0');
  PackGpuJobs(jobs, reinterpret_cast<uint8_t*>(packed.data()));
  const std::string n = std::to_string(packed.size());
  auto message = [](std::string_view bytes) {
    absl::StatusOr<BytesList> r = UnpackGpuJobs(Buffer::Copy(bytes));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    return std::string(r.status().message());
  };
  EXPECT_EQ(message("1234567"), "packed GPU jobs (7 bytes): too short for the count");
  std::string many = packed;
  many[0] = 9;  // fewer bytes than 9 lengths: the first that passes the end
  EXPECT_EQ(message(many), "packed GPU jobs (" + n + " bytes): job 1's length " +
                               std::to_string(jobs[1].size()) + " passes the end");
  many[7] = 1;  // 2^56 + 9: more lengths than bytes
  EXPECT_EQ(message(many), "packed GPU jobs (" + n + " bytes): a count of " +
                               std::to_string((1ull << 56) + 9) + " jobs");
  std::string longer = packed;
  longer[16] = static_cast<char>(longer[16] + 1);  // the second job's length
  EXPECT_EQ(message(longer), "packed GPU jobs (" + n + " bytes): job 1's length " +
                                 std::to_string(jobs[1].size() + 1) + " passes the end");
  EXPECT_EQ(message(packed + "xy"), "packed GPU jobs (" + std::to_string(packed.size() + 2) +
                                        " bytes): 2 bytes after the last job");
  std::string not_a_job = packed;
  not_a_job[24 + jobs[0].size()] = 'X';  // the second job's magic
  EXPECT_EQ(message(not_a_job), "packed GPU jobs (" + n + " bytes): job 1 is not a GPU job");
}

TEST(GpuJobTest, ColumnIsJobsOnly) {
  const Buffer job = MakeJob(SomeHeader(), "x");
  EXPECT_TRUE(IsGpuJobColumn(Value(BytesList{job, job})));
  EXPECT_FALSE(IsGpuJobColumn(Value(BytesList{job, Buffer::Copy("plain bytes")})));
  EXPECT_FALSE(IsGpuJobColumn(Value(BytesList{})));
  EXPECT_FALSE(IsGpuJobColumn(Value(job)));
  EXPECT_FALSE(IsGpuJobColumn(Value(int64_t{3})));
}

TEST(GpuJobTest, LayoutIsTheBatchOfTheOutput) {
  JobHeader h = SomeHeader();
  absl::StatusOr<GpuBatchLayout> nchw = GpuJobLayout({ValidJob(h), ValidJob(h)});
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  EXPECT_EQ(nchw->dtype, DType::kFloat16);
  EXPECT_EQ(nchw->shape, (std::vector<int64_t>{2, 3, 160, 224}));
  EXPECT_EQ(nchw->nbytes(), size_t{2} * 3 * 160 * 224 * 2);
  h.output.channels_first = false;
  h.output.dtype = DType::kUInt8;
  absl::StatusOr<GpuBatchLayout> nhwc = GpuJobLayout({ValidJob(h)});
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  EXPECT_EQ(nhwc->shape, (std::vector<int64_t>{1, 160, 224, 3}));
}

TEST(GpuJobTest, ImagesOfDifferentSizesAreRefusedNamingTheKeyAndBothSizes) {
  JobHeader a = SomeHeader();
  JobHeader b = SomeHeader();
  b.output.width = 100;
  const TextList keys = {"k0", "k1"};
  const TextList urls = {"s.tar", "s.tar"};
  absl::StatusOr<GpuBatchLayout> layout =
      GpuJobLayout({ValidJob(a), ValidJob(b)}, &keys, &urls);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ToStd(layout.status().message()), StartsWith("decode on cuda: s.tar: key k1: its output"));
  EXPECT_THAT(layout.status().message(), HasSubstr("float16 100x160"));
  EXPECT_THAT(layout.status().message(), HasSubstr("float16 224x160"));
  EXPECT_THAT(layout.status().message(), HasSubstr("need a resize"));
}

TEST(GpuJobTest, BytesInAJobColumnThatAreNoJobAreRefusedNamingTheKey) {
  const TextList keys = {"k0", "k1"};
  absl::StatusOr<GpuBatchLayout> layout =
      GpuJobLayout({ValidJob(SomeHeader()), Buffer::Copy("plain")}, &keys, nullptr);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().message(),
            "decode on cuda: key k1: not a GPU job (bytes that GpuDecodeStage did not make)");
}

TEST(GpuJobTest, PixelsOfTheWrongSizeAreRefused) {
  JobHeader h;
  h.kind = JobKind::kPixels;
  h.width = h.output.width = 4;
  h.height = h.output.height = 2;
  h.crop = {0, 0, 4, 2};
  absl::StatusOr<GpuBatchLayout> layout = GpuJobLayout({MakeJob(h, std::string(23, 'x'))});
  ASSERT_FALSE(layout.ok());
  EXPECT_THAT(layout.status().message(),
              HasSubstr("image 0 of the batch: pixels of 4x2 need 24 bytes, the job has 23"));
}

// ----------------------------------------------------------------------------
// The stage and the loader: the GPU path against the CPU path

struct Drawn {
  std::vector<std::string> keys;
  std::vector<int64_t> classes;
  std::vector<Array> images;  // one [B, ...] array per batch
  std::vector<std::string> states;
};

// Who decodes the GPU job columns in Draw.
enum class DecodedBy {
  kConsumer,      // the consumer, with DecodeGpuJobsOnHost
  kWorkers,       // the workers (LoaderOptions::decode_gpu_jobs_on_host)
  kWorkersAhead,  // the workers' GpuWorkerDecoders, finished by the consumer
};

// FinishPending replaces every PendingImages of `batch` with the array it
// finishes into, and counts them.
int FinishPending(Sample& batch) {
  int finished = 0;
  for (Sample::Field& f : batch) {
    const auto* object = std::get_if<ObjectRef>(&f.second);
    if (object == nullptr) continue;
    auto* pending = dynamic_cast<PendingImages*>(object->get());
    EXPECT_NE(pending, nullptr) << "field " << f.first;
    if (pending == nullptr) continue;
    Array out = Array::Allocate(pending->layout().dtype, pending->layout().shape);
    EXPECT_TRUE(pending->Finish(out.data.mutable_data(), nullptr).ok());
    f.second = std::move(out);
    ++finished;
  }
  return finished;
}

// Draw runs a Loader over `pipeline`, its GPU job columns decoded on the host
// as `by` says (`decoders`, when given, are kWorkersAhead's).
Drawn Draw(const Pipeline& pipeline, int workers, DecodedBy by = DecodedBy::kConsumer,
           std::shared_ptr<GpuWorkerDecoders> decoders = nullptr) {
  Drawn run;
  if (by == DecodedBy::kWorkersAhead && decoders == nullptr) {
    decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  }
  Loader loader(pipeline, {.workers = workers,
                           .decode_gpu_jobs_on_host = by == DecodedBy::kWorkers,
                           .gpu_decoders = by == DecodedBy::kWorkersAhead ? decoders : nullptr});
  while (true) {
    absl::StatusOr<std::string> state = loader.State();
    EXPECT_TRUE(state.ok()) << state.status();
    absl::StatusOr<std::optional<Sample>> batch = loader.Next();
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || !batch->has_value()) break;
    run.states.push_back(state.ok() ? *state : "");
    Sample& b = **batch;
    for (const Sample::Field& f : b) {
      EXPECT_FALSE(by != DecodedBy::kConsumer && IsGpuJobColumn(f.second)) << "field " << f.first;
    }
    // Read while the workers decode (ThreadSanitizer checks the accounting).
    if (decoders != nullptr) EXPECT_GE(decoders->stats().images, 0);
    EXPECT_EQ(FinishPending(b), by == DecodedBy::kWorkersAhead ? 1 : 0);
    EXPECT_TRUE(DecodeGpuJobsOnHost(b).ok());
    for (const std::string& k : std::get<TextList>(*b.Find(kKeyField))) run.keys.push_back(k);
    const Array* cls = b.GetArray("cls");
    for (int64_t i = 0; cls != nullptr && i < cls->shape[0]; ++i) {
      run.classes.push_back(cls->data_as<int64_t>()[i]);
    }
    run.images.push_back(*b.GetArray("jpg"));
  }
  return run;
}

int LargestDifference(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.dtype, DType::kUInt8);
  int worst = 0;
  for (int64_t i = 0; i < a.num_elements() && a.shape == b.shape; ++i) {
    worst = std::max(worst, std::abs(int{a.data_as<uint8_t>()[i]} - int{b.data_as<uint8_t>()[i]}));
  }
  return worst;
}

// ExpectSameDraws: `got` has `images` images in `batches` batches, and the
// keys, classes, states and pixels of `want`.
void ExpectSameDraws(const Drawn& got, const Drawn& want, size_t images, size_t batches) {
  ASSERT_EQ(got.keys.size(), images);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.classes, want.classes);
  EXPECT_EQ(got.states, want.states);
  ASSERT_EQ(got.images.size(), batches);
  ASSERT_EQ(want.images.size(), batches);
  for (size_t b = 0; b < batches; ++b) {
    EXPECT_EQ(got.images[b].shape, want.images[b].shape);
    EXPECT_EQ(LargestDifference(got.images[b], want.images[b]), 0) << "batch " << b;
  }
}

// RandomCropsAndFlips are options that draw a crop and a flip per image.
ImageDecodeOptions RandomCropsAndFlips() {
  ImageDecodeOptions image;
  image.resize = {ResizeMode::kRandomResizedCrop, 40, 32};
  image.hflip = 0.5;
  return image;
}

TEST(GpuDecodeStageTest, RandomCropsFlipsKeysOrderAndStateAreTheCpuPaths) {
  TempDir dir;
  const std::string shard = TestShard(dir);
  const ImageDecodeOptions image = RandomCropsAndFlips();
  const Drawn cpu = Draw(Source(shard).Decode("rgb8", image).Batched(4), 2);
  const Drawn gpu = Draw(Source(shard).DecodeOnGpu("rgb8", image).Batched(4), 2);
  ASSERT_EQ(cpu.keys.size(), 15u);
  EXPECT_EQ(gpu.keys, cpu.keys);
  EXPECT_EQ(gpu.classes, cpu.classes);
  EXPECT_EQ(gpu.states, cpu.states);
  ASSERT_EQ(gpu.images.size(), cpu.images.size());
  for (size_t b = 0; b < cpu.images.size(); ++b) {
    // The same crops and flips; the CPU path decodes the crop's window with
    // libjpeg, the GPU path the whole image: chroma upsampling at the
    // window's edge may differ by a little.
    EXPECT_LE(LargestDifference(gpu.images[b], cpu.images[b]), 3) << "batch " << b;
  }
}

TEST(GpuDecodeStageTest, FullSizeImagesAreTheCpuDecodersPixels) {
  TempDir dir;
  std::vector<TarEntry> entries;
  for (int i = 0; i < 6; ++i) {
    JpegRecipe r;
    r.luma_h = i % 2 + 1;
    entries.push_back({Cat("k", i, ".jpg"), EncodeJpeg(r)});
  }
  const std::string shard = dir.Write("same-size.tar", MakeTar(entries));
  const Drawn cpu = Draw(Source(shard).Decode("rgb8").Batched(3), 1);
  const Drawn gpu = Draw(Source(shard).DecodeOnGpu("rgb8").Batched(3), 1);
  ASSERT_EQ(gpu.images.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(gpu.images[b].shape, (std::vector<int64_t>{3, 48, 64, 3}));
    EXPECT_EQ(LargestDifference(gpu.images[b], cpu.images[b]), 0);
  }
}

TEST(GpuDecodeStageTest, TorchSpecGivesNormalizedChannelsFirstFloats) {
  TempDir dir;
  const std::string shard = TestShard(dir);
  ImageDecodeOptions image;
  image.resize = {ResizeMode::kCenterCrop, 24, 24};
  const Drawn rgb8 = Draw(Source(shard).DecodeOnGpu("rgb8", image).Batched(5), 1);
  const Drawn torch = Draw(
      Source(shard).DecodeOnGpu("torchrgb", image, {.normalize = kImageNetNormalize}).Batched(5),
      1);
  ASSERT_EQ(torch.images.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    const Array& u = rgb8.images[b];
    const Array& f = torch.images[b];
    ASSERT_EQ(f.dtype, DType::kFloat32);
    ASSERT_EQ(f.shape, (std::vector<int64_t>{5, 3, 24, 24}));
    for (int n = 0; n < 5; ++n) {
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < 24 * 24; i += 37) {
          const float v = u.data_as<uint8_t>()[(n * 24 * 24 + i) * 3 + c];
          const float want = (v / 255.0f - kImageNetNormalize.mean[c]) / kImageNetNormalize.std[c];
          EXPECT_NEAR(f.data_as<float>()[(n * 3 + c) * 24 * 24 + i], want, 1e-5f);
        }
      }
    }
  }
}

TEST(GpuDecodeStageTest, SpecTheGpuCannotServeIsRefusedWhenTheLoaderStarts) {
  TempDir dir;
  Loader loader(Source(TestShard(dir)).DecodeOnGpu("l8").Batched(4), {.workers = 1});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("decode on cuda: image spec \"l8\" has 1 channel"));
}

TEST(GpuDecodeStageTest, CorruptPngFailsInTheWorkerThroughTheHandler) {
  TempDir dir;
  std::vector<TarEntry> entries = {{"a.jpg", EncodeJpeg(JpegRecipe{})},
                                   {"b.png", std::string("\x89PNG\r\n\x1a\n garbage", 17)},
                                   {"c.jpg", EncodeJpeg(JpegRecipe{})}};
  const std::string shard = dir.Write("corrupt-png.tar", MakeTar(entries));
  // Reraise: the error names the shard and the key, as on the CPU path.
  {
    Loader loader(Source(shard).DecodeOnGpu("rgb8").Batched(3), {.workers = 1});
    absl::StatusOr<std::optional<Sample>> batch = loader.Next();
    ASSERT_FALSE(batch.ok());
    EXPECT_THAT(batch.status().message(), HasSubstr("corrupt-png.tar: key b"));
  }
  // Warn-and-continue: the sample is dropped, the others batch.
  {
    const Drawn run = Draw(
        Source(shard).DecodeOnGpu("rgb8", {}, {}, {.handler = Handler::kWarnAndContinue}).Batched(3),
        1);
    EXPECT_EQ(run.keys, (std::vector<std::string>{"a", "c"}));
  }
}

TEST(GpuDecodeStageTest, TruncatedJpegFailsInTheWorkerAsOnTheCpuPath) {
  TempDir dir;
  const std::string jpeg = EncodeJpeg(JpegRecipe{});
  absl::StatusOr<std::optional<Sample>> batch = FirstBatch(dir, jpeg.substr(0, jpeg.size() / 2));
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(ToStd(batch.status().message()),
              StartsWith(Cat(dir.path(), "/shard-000001.tar: key s15: field jpg: truncated JPEG")));
}

TEST(GpuDecodeStageTest, StrayMarkerInTheScanFailsInTheWorkerAsOnTheCpuPath) {
  TempDir dir;
  const std::string shard = TestShard(dir, CorruptScan());
  const ImageDecodeOptions size16 = {.resize = {ResizeMode::kStretch, 16, 16}};
  Loader cpu(Source(shard).Decode("rgb8", size16).Batched(16), {.workers = 1});
  Loader gpu(Source(shard).DecodeOnGpu("rgb8", size16).Batched(16), {.workers = 1});
  absl::StatusOr<std::optional<Sample>> on_cpu = cpu.Next();
  absl::StatusOr<std::optional<Sample>> on_gpu = gpu.Next();
  ASSERT_FALSE(on_cpu.ok());
  ASSERT_FALSE(on_gpu.ok());
  EXPECT_EQ(on_gpu.status(), on_cpu.status());
  EXPECT_THAT(ToStd(on_gpu.status().message()),
              StartsWith(Cat(dir.path(), "/shard-000001.tar: key s15: field jpg: corrupt JPEG: "
                                              "Unsupported marker type 0x06")));
  // Under warn-and-continue the worker drops it before batching, as the CPU path does.
  const Drawn skipping = Draw(
      Source(shard).DecodeOnGpu("rgb8", size16, {}, {.handler = Handler::kWarnAndContinue}).Batched(16),
      1);
  EXPECT_EQ(skipping.keys.size(), 15u);
  EXPECT_EQ(std::count(skipping.keys.begin(), skipping.keys.end(), "s15"), 0);
}

TEST(GpuDecodeStageTest, UndecodableScanFailsAtTheConsumerNamingTheShardKeyAndField) {
  TempDir dir;
  absl::StatusOr<std::optional<Sample>> batch = FirstBatch(dir, UndefinedHuffmanTable());
  ASSERT_TRUE(batch.ok()) << batch.status();
  absl::Status s = DecodeGpuJobsOnHost(**batch);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(ToStd(s.message()), StartsWith(Cat("decode on cuda: ", dir.path(),
                                                 "/shard-000001.tar: key s15: field jpg: ")));
}

// A consumer given the job column alone (the batches of to_tuple("jpg",
// "cls") carry no keys or URLs) still names the shard, key and field: the
// jobs carry them.
TEST(GpuDecodeStageTest, UndecodableScanIsNamedWithoutTheBatchsKeys) {
  TempDir dir;
  absl::StatusOr<std::optional<Sample>> batch = FirstBatch(dir, UndefinedHuffmanTable());
  ASSERT_TRUE(batch.ok()) << batch.status();
  absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> decoder =
      GpuBatchDecoder::Create(GpuBatchDecoder::kHost);
  ASSERT_TRUE(decoder.ok());
  const auto& jobs = std::get<BytesList>(*(*batch)->Find("jpg"));
  absl::StatusOr<Array> out = (*decoder)->DecodeToArray(jobs, nullptr, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(ToStd(out.status().message()), StartsWith(Cat("decode on cuda: ", dir.path(),
                                                            "/shard-000001.tar: key s15: field jpg: ")));
  // DecodeAhead (a worker's half) fails the same way.
  absl::StatusOr<std::shared_ptr<PendingImages>> pending =
      (*decoder)->DecodeAhead(jobs, nullptr, nullptr, nullptr);
  ASSERT_FALSE(pending.ok());
  EXPECT_EQ(pending.status(), out.status());
  // Failed batches add no count (though the images before s15 were decoded).
  const GpuBatchDecoder::Stats& stats = (*decoder)->stats();
  EXPECT_EQ(stats.batches, 0);
  EXPECT_EQ(stats.images, 0);
  EXPECT_EQ(stats.cpu_fallback_images, 0);
  EXPECT_EQ(stats.worker_decoded_images, 0);
  EXPECT_GT(stats.seconds.cpu_decode, 0);
}

TEST(GpuDecodeStageTest, WorkersDecodingOnTheHostGiveTheConsumersArrays) {
  TempDir dir;
  const Pipeline p = Source(TestShard(dir)).DecodeOnGpu("rgb8", RandomCropsAndFlips()).Batched(4);
  const Drawn by_consumer = Draw(p, 2);
  const Drawn by_workers = Draw(p, 2, DecodedBy::kWorkers);
  ExpectSameDraws(by_workers, by_consumer, 15, 4);
}

// The workers decode ahead (GpuWorkerDecoders, here on the host) and the
// consumer finishes each batch: the same pixels, keys, order and states.
TEST(GpuDecodeStageTest, WorkersDecodingAheadGiveTheConsumersArrays) {
  TempDir dir;
  const Pipeline p = Source(TestShard(dir)).DecodeOnGpu("rgb8", RandomCropsAndFlips()).Batched(4);
  const std::shared_ptr<GpuWorkerDecoders> decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  ASSERT_NE(decoders, nullptr);
  EXPECT_EQ(decoders->device(), GpuBatchDecoder::kHost);
  EXPECT_EQ(decoders->decoder(), "cpu");
  EXPECT_FALSE(decoders->nvjpeg_hardware());
  const Drawn by_consumer = Draw(p, 2);
  const Drawn ahead = Draw(p, 2, DecodedBy::kWorkersAhead, decoders);
  ExpectSameDraws(ahead, by_consumer, 15, 4);
  const GpuBatchDecoder::Stats stats = decoders->stats();
  EXPECT_EQ(stats.batches, 4);
  EXPECT_EQ(stats.images, 15);
  EXPECT_EQ(stats.worker_decoded_images, 1);  // the CMYK JPEG
  EXPECT_EQ(stats.cpu_fallback_images, 14);
  EXPECT_GE(decoders->decoders(), 1);
  EXPECT_LE(decoders->decoders(), 2);
}

// The decoders outlive a Loader: the next one's workers lease the same ones.
TEST(GpuDecodeStageTest, WorkerDecodersAreKeptFromLoaderToLoader) {
  TempDir dir;
  const Pipeline p = Source(TestShard(dir))
                         .DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 8, 8}})
                         .Batched(5);
  const std::shared_ptr<GpuWorkerDecoders> decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  ASSERT_NE(decoders, nullptr);
  for (int run = 1; run <= 3; ++run) {
    EXPECT_EQ(Draw(p, 2, DecodedBy::kWorkersAhead, decoders).keys.size(), 15u);
    EXPECT_EQ(decoders->stats().images, 15 * run);
  }
  EXPECT_GE(decoders->decoders(), 1);
  EXPECT_LE(decoders->decoders(), 2) << "at most one decoder per worker running at once";
}

// Every job column of a batch is decoded, with one decoder; a column that
// fails stops there, naming its job, the columns before it replaced.
TEST(GpuDecodeStageTest, WorkerDecodersDecodeEveryColumnAndStopAtTheFirstThatFails) {
  TempDir good_dir;
  TempDir bad_dir;
  absl::StatusOr<std::optional<Sample>> good = FirstBatch(good_dir, "");
  absl::StatusOr<std::optional<Sample>> bad = FirstBatch(bad_dir, UndefinedHuffmanTable());
  ASSERT_TRUE(good.ok() && bad.ok());
  const Value jobs = *(*good)->Find("jpg");
  Sample batch = **good;
  batch.Set("again", jobs);
  const std::shared_ptr<GpuWorkerDecoders> decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  ASSERT_NE(decoders, nullptr);
  ASSERT_TRUE(decoders->DecodeAhead(batch).ok());
  EXPECT_TRUE(std::holds_alternative<ObjectRef>(*batch.Find("jpg")));
  EXPECT_TRUE(std::holds_alternative<ObjectRef>(*batch.Find("again")));
  EXPECT_EQ(decoders->stats().batches, 2);
  EXPECT_EQ(decoders->stats().images, 30);

  Sample mixed = **good;
  mixed.Set("bad", *(*bad)->Find("jpg"));
  mixed.Set("last", jobs);
  absl::Status s = decoders->DecodeAhead(mixed);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(ToStd(s.message()), StartsWith(Cat("decode on cuda: ", bad_dir.path(),
                                                 "/shard-000001.tar: key s15: field jpg: ")));
  EXPECT_TRUE(std::holds_alternative<ObjectRef>(*mixed.Find("jpg")));
  EXPECT_TRUE(IsGpuJobColumn(*mixed.Find("bad")));
  EXPECT_TRUE(IsGpuJobColumn(*mixed.Find("last")));
  EXPECT_EQ(decoders->decoders(), 1);
}

TEST(GpuDecodeStageTest, DecodingOnTheHostAndAheadExcludeEachOther) {
  TempDir dir;
  const std::shared_ptr<GpuWorkerDecoders> decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  ASSERT_NE(decoders, nullptr);
  Loader loader(Source(TestShard(dir)).DecodeOnGpu("rgb8").Batched(4),
                {.decode_gpu_jobs_on_host = true, .gpu_decoders = decoders});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToStd(batch.status().message()),
            "LoaderOptions: decode_gpu_jobs_on_host and gpu_decoders exclude each other");
}

TEST(GpuDecodeStageTest, WorkersDecodeIntoTheLoadersBatchPool) {
  TempDir dir;
  const Pipeline p =
      Source(TestShard(dir)).DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 8, 8}}).Batched(4);
  // Acquires from the batch pool over an epoch of 4 batches.
  auto acquires = [&p](bool in_workers) {
    Loader loader(p, {.workers = 1, .decode_gpu_jobs_on_host = in_workers});
    int batches = 0;
    while (true) {
      absl::StatusOr<std::optional<Sample>> batch = loader.Next();
      EXPECT_TRUE(batch.ok()) << batch.status();
      if (!batch.ok() || !batch->has_value()) break;
      ++batches;
    }
    EXPECT_EQ(batches, 4);
    const BufferPoolStats stats = loader.pool()->stats();
    return stats.allocations + stats.reuses;
  };
  EXPECT_EQ(acquires(true) - acquires(false), 4) << "one block of the pool per decoded column";
}

// A Loader with pin_memory gives its workers its pinned batch pool as the job
// pool: they make their jobs there, for the device decoder to read in place
// (JobColumn::pinned), and in the pool for bytes otherwise.
TEST(GpuDecodeStageTest, WorkersMakeTheirJobsInTheJobPoolElseThePoolForBytes) {
  const std::string jpeg = EncodeJpeg(JpegRecipe{});
  absl::StatusOr<FieldDecoder> decoder = GpuJobDecoder("rgb8");
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  for (bool pinned_batches : {true, false}) {
    const std::shared_ptr<BufferPool> batches =
        pinned_batches ? PinnedLookingPool() : std::make_shared<BufferPool>();
    const auto bytes = std::make_shared<BufferPool>();
    WorkerContext worker;
    WorkerContext::Wiring& wiring = Rewire(worker);
    wiring.pool = batches;
    wiring.read_pool = bytes;
    if (pinned_batches) wiring.job_pool = batches;
    Rng rng(0);
    DecodeContext ctx{"k", &rng, &worker, "shard.tar"};
    absl::StatusOr<std::optional<Value>> job = (*decoder)("jpg", Buffer::Copy(jpeg), ctx);
    ASSERT_TRUE(job.ok()) << job.status();
    const std::optional<JobHeader> h = ReadJob(std::get<Buffer>(**job));
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->pinned, pinned_batches);
    EXPECT_EQ(h->site, "shard.tar: key k: field jpg");
    EXPECT_EQ(batches->stats().allocations, pinned_batches ? 1 : 0);
    EXPECT_EQ(bytes->stats().allocations, pinned_batches ? 0 : 1);
  }
}

TEST(GpuDecodeStageTest, UndecodableScanDecodedInAWorkerIsTheLoadersErrorNamingTheSite) {
  TempDir dir;
  Loader loader(Source(TestShard(dir, UndefinedHuffmanTable()))
                    .DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 16, 16}})
                    .Batched(16),
                {.workers = 1, .decode_gpu_jobs_on_host = true});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(ToStd(batch.status().message()),
              StartsWith(Cat("decode on cuda: ", dir.path(),
                             "/shard-000001.tar: key s15: field jpg: ")));
}

TEST(GpuDecodeStageTest, UndecodableScanDecodedAheadIsTheLoadersErrorNamingTheSite) {
  TempDir dir;
  const std::shared_ptr<GpuWorkerDecoders> decoders = WorkerDecoders(GpuBatchDecoder::kHost);
  ASSERT_NE(decoders, nullptr);
  Loader loader(Source(TestShard(dir, UndefinedHuffmanTable()))
                    .DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 16, 16}})
                    .Batched(16),
                {.workers = 1, .gpu_decoders = decoders});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(
      ToStd(batch.status().message()),
      StartsWith(Cat("decode on cuda: ", dir.path(), "/shard-000001.tar: key s15: field jpg: ")));
  // The decoder that failed is usable: the next epoch decodes again (and
  // fails the same way, at the same image).
  absl::StatusOr<std::optional<Sample>> again = loader.Next();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), batch.status().message());
  EXPECT_EQ(decoders->decoders(), 1);
}

// ----------------------------------------------------------------------------
// GpuBatchDecoder

TEST(GpuBatchDecoderTest, DecodeAheadThenFinishIsDecode) {
  TempDir dir;
  for (const ImageDecodeOptions& image :
       {RandomCropsAndFlips(), ImageDecodeOptions{.resize = {ResizeMode::kCenterCrop, 24, 24}}}) {
    Loader loader(Source(TestShard(dir)).DecodeOnGpu("torchrgb", image).Batched(15),
                  {.workers = 1});
    absl::StatusOr<std::optional<Sample>> batch = loader.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    const auto& jobs = std::get<BytesList>(*(*batch)->Find("jpg"));
    absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> decoder =
        GpuBatchDecoder::Create(GpuBatchDecoder::kHost);
    ASSERT_TRUE(decoder.ok());
    absl::StatusOr<Array> decoded = (*decoder)->DecodeToArray(jobs, nullptr, nullptr);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    absl::StatusOr<std::shared_ptr<PendingImages>> pending =
        (*decoder)->DecodeAhead(jobs, nullptr, nullptr, nullptr);
    ASSERT_TRUE(pending.ok()) << pending.status();
    EXPECT_EQ((*decoder)->stats().batches, 2);
    EXPECT_EQ((*decoder)->stats().images, 30);
    // The pending images keep what they need: the decoder and the jobs may go.
    decoder->reset();
    (*batch).reset();
    const PendingImages& p = **pending;
    EXPECT_EQ(p.device(), GpuBatchDecoder::kHost);
    EXPECT_EQ(p.TypeName(), "images decoded on the host, not yet finished into a batch");
    EXPECT_EQ(p.layout().shape, decoded->shape);
    EXPECT_EQ(p.layout().dtype, DType::kFloat32);
    EXPECT_TRUE(p.layout().channels_first);
    for (int finish = 0; finish < 2; ++finish) {  // finishing again writes the same
      std::vector<uint8_t> out(decoded->nbytes(), 0xee);
      ASSERT_TRUE((*pending)->Finish(out.data(), nullptr).ok());
      EXPECT_EQ(std::memcmp(out.data(), decoded->data.data(), out.size()), 0)
          << "finish " << finish;
    }
  }
}

TEST(GpuBatchDecoderTest, HostDecoderCountsWhatItDecoded) {
  TempDir dir;
  Loader loader(Source(TestShard(dir)).DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 8, 8}})
                    .Batched(15),
                {.workers = 1});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> decoder =
      GpuBatchDecoder::Create(GpuBatchDecoder::kHost);
  ASSERT_TRUE(decoder.ok());
  const auto& jobs = std::get<BytesList>(*(*batch)->Find("jpg"));
  const auto before = std::chrono::steady_clock::now();
  absl::StatusOr<Array> out = (*decoder)->DecodeToArray(jobs, nullptr, nullptr);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape, (std::vector<int64_t>{15, 8, 8, 3}));
  const GpuBatchDecoder::Stats& stats = (*decoder)->stats();
  EXPECT_EQ(stats.batches, 1);
  EXPECT_EQ(stats.images, 15);
  EXPECT_EQ(stats.worker_decoded_images, 1);  // the CMYK JPEG
  EXPECT_EQ(stats.cpu_fallback_images, 14);
  EXPECT_EQ((*decoder)->decoder(), "cpu");
  // The host decoder's time: parsing, the CPU decoder and the resize; it has
  // no staging, no nvJPEG. The phases are parts of the call's wall time.
  const GpuBatchDecoder::Stats::Phases& t = stats.seconds;
  EXPECT_GT(t.parse, 0);
  EXPECT_GT(t.cpu_decode, 0);
  EXPECT_GT(t.kernel, 0);
  EXPECT_EQ(t.wait, 0);
  EXPECT_EQ(t.gather, 0);
  EXPECT_EQ(t.nvjpeg, 0);
  EXPECT_LE(t.parse + t.cpu_decode + t.kernel, wall);
}

TEST(GpuBatchDecoderTest, NegativeDeviceOtherThanHostIsRefused) {
  absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> decoder = GpuBatchDecoder::Create(-2);
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuBatchDecoderTest, DeviceDecoderWithoutADeviceIsUnavailableNamingWhy) {
  absl::StatusOr<std::unique_ptr<GpuBatchDecoder>> decoder = GpuBatchDecoder::Create(0);
  if (decoder.ok()) GTEST_SKIP() << "a CUDA device is present: gpu_jobs_device_test runs";
  EXPECT_EQ(decoder.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ToStd(decoder.status().message()), StartsWith("decode on cuda:0: "));
}

TEST(GpuBatchDecoderTest, WorkerDecodersWithoutADeviceAreUnavailableNamingWhy) {
  absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> decoders = GpuWorkerDecoders::Create(0);
  if (decoders.ok()) GTEST_SKIP() << "a CUDA device is present: gpu_jobs_device_test runs";
  EXPECT_EQ(decoders.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ToStd(decoders.status().message()), StartsWith("decode on cuda:0: "));
}

}  // namespace
}  // namespace wds::gpu
