// Shards and batches of GPU jobs shared by gpu_jobs_test (host) and
// gpu_jobs_device_test (CUDA).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "jpeg_variants.h"
#include "util/test_util.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/internal/base/strings.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds::gpu {

using gpu_testing::EncodeJpeg;
using gpu_testing::JpegRecipe;
using wds::testing::MakeTar;
using wds::testing::TarEntry;
using wds::testing::TempDir;

// WorkerDecoders is GpuWorkerDecoders::Create(device), or null after a test
// failure saying why.
inline std::shared_ptr<GpuWorkerDecoders> WorkerDecoders(int device) {
  absl::StatusOr<std::shared_ptr<GpuWorkerDecoders>> made = GpuWorkerDecoders::Create(device);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *made : nullptr;
}

// Two shards of JPEGs of several sizes and subsamplings, a progressive one and
// a CMYK JPEG (decoded in the worker), each with a class; `extra_jpeg`, if
// given, is sample s15. Returns the shards' brace pattern; s08 and later are
// in shard-000001.tar.
inline std::string TestShard(const TempDir& dir, const std::string& extra_jpeg = "") {
  std::vector<TarEntry> entries;
  std::vector<TarEntry> first;
  for (int i = 0; i < 14; ++i) {
    if (i == 8) first = std::move(entries), entries.clear();
    JpegRecipe r;
    r.width = 64 + 4 * i;
    r.height = 48 + 2 * (i % 5);
    r.luma_h = i % 3 == 0 ? 1 : 2;
    r.luma_v = i % 2 == 0 ? 2 : 1;
    r.progressive = i == 5;
    const std::string key = Cat("s", i < 10 ? "0" : "", i);
    entries.push_back({key + ".jpg", EncodeJpeg(r)});
    entries.push_back({key + ".cls", std::to_string(i)});
  }
  JpegRecipe cmyk;
  cmyk.components = 4;
  entries.push_back({"s14.jpg", EncodeJpeg(cmyk)});
  entries.push_back({"s14.cls", "14"});
  if (!extra_jpeg.empty()) {
    entries.push_back({"s15.jpg", extra_jpeg});
    entries.push_back({"s15.cls", "15"});
  }
  dir.Write("shard-000000.tar", MakeTar(first));
  dir.Write("shard-000001.tar", MakeTar(entries));
  return dir.path() + "/shard-{000000..000001}.tar";
}

inline Pipeline Source(const std::string& shard) {
  absl::StatusOr<Pipeline> p = WebDataset(shard, {.seed = 7});
  EXPECT_TRUE(p.ok()) << p.status();
  return p->Shuffle(6);
}

// CorruptScan keeps the header and the end-of-image marker and puts a marker
// libjpeg does not know in the scan: the worker's walk of the markers sends
// it to the CPU decoder, which fails on it there, as on the CPU path.
inline std::string CorruptScan() {
  std::string jpeg = EncodeJpeg(JpegRecipe{});
  jpeg.insert(jpeg.find("\xff\xda") + 30, "\xff\x06");
  return jpeg;
}

// UndefinedHuffmanTable's scan uses Huffman tables 3, which no DHT defines:
// its header and markers are sound, so the worker plans it for nvJPEG, and
// the CPU decoder fails on it only at the consumer (nvJPEG refuses it too).
inline std::string UndefinedHuffmanTable() {
  std::string jpeg = EncodeJpeg(JpegRecipe{});
  jpeg[jpeg.find("\xff\xda") + 6] = '\x33';  // the first component's DC and AC tables
  return jpeg;
}

// FirstBatch is the first batch of 16 (every sample) of TestShard(dir, extra).
inline absl::StatusOr<std::optional<Sample>> FirstBatch(const TempDir& dir, const std::string& extra) {
  Loader loader(Source(TestShard(dir, extra))
                    .DecodeOnGpu("rgb8", {.resize = {ResizeMode::kStretch, 16, 16}})
                    .Batched(16),
                {.workers = 1});
  return loader.Next();
}

}  // namespace wds::gpu
