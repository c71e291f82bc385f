// Tests for the LibTorch layer: zero-copy tensors over Arrays (dtypes, memory
// lifetime, NCHW views, errors), batch conversion by position and by name, and
// DevicePrefetcher (order, epochs, errors, Loader sources). The CUDA tests run
// only where LibTorch has CUDA and a GPU is visible.
#include <torch/cuda.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gpu/gpu_jobs_testing.h"
#include "gpu/jpeg_variants.h"
#include "gtest/gtest.h"
#include "torch/torch_dtype.h"
#include "util/test_util.h"
#include "wds/gpu/gpu_decode.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/torch/prefetcher.h"
#include "wds/torch/tensor.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using gpu::WorkerDecoders;

// ExpectThrows runs `fn` and expects exactly an E whose message holds `substr`
// (an exception of another type escapes and fails the test).
template <typename E, typename Fn>
void ExpectThrows(Fn&& fn, const std::string& substr) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one with \"" << substr << "\"";
  } catch (const E& e) {
    std::string message;
    if constexpr (std::is_base_of_v<c10::Error, E>) {
      message = e.what_without_backtrace();
    } else {
      message = e.what();
    }
    EXPECT_THAT(message, HasSubstr(substr));
  }
}

// FlagOwner owns bytes and records its destruction.
struct FlagOwner {
  FlagOwner(bool* destroyed, std::vector<uint8_t> bytes) : destroyed(destroyed), bytes(bytes) {}
  ~FlagOwner() { *destroyed = true; }
  bool* destroyed;
  std::vector<uint8_t> bytes;
};

// FlaggedArray is a uint8 array of `shape` holding 0, 1, 2, ... whose storage
// sets *destroyed when it is freed.
Array FlaggedArray(bool* destroyed, std::vector<int64_t> shape) {
  Array a;
  a.dtype = DType::kUInt8;
  a.shape = std::move(shape);
  std::vector<uint8_t> bytes(static_cast<size_t>(a.num_elements()));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  auto owner = std::make_shared<FlagOwner>(destroyed, std::move(bytes));
  a.data = Buffer::View(owner, owner->bytes.data(), owner->bytes.size());
  return a;
}

template <typename T>
Array MakeArray(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  Array a = Array::Allocate(dtype, std::move(shape));
  EXPECT_EQ(a.nbytes(), values.size() * sizeof(T));
  std::memcpy(a.mutable_data<uint8_t>(), values.data(), values.size() * sizeof(T));
  return a;
}

Array Iota(DType dtype, std::vector<int64_t> shape) {
  Array a = Array::Allocate(dtype, std::move(shape));
  for (size_t i = 0; i < a.nbytes(); ++i) a.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i);
  return a;
}

const void* DataOf(const Array& a) { return a.data.data(); }

// ImageBatch is a hand-built collated batch of two samples: a uint8
// [2, 2, 2, 3] image batch, int64 labels, and per-sample keys, urls and texts.
Sample ImageBatch() {
  Sample b;
  b.Set(std::string(kKeyField), TextList{"a", "b"});
  b.Set(std::string(kUrlField), TextList{"shard-0.tar", "shard-0.tar"});
  b.Set("jpg", Iota(DType::kUInt8, {2, 2, 2, 3}));
  b.Set("cls", MakeArray<int64_t>(DType::kInt64, {2}, {3, 9}));
  b.Set("txt", TextList{"cat", "dog"});
  return b;
}

// LabelBatch is a batch with one int64 label array holding `label`.
Sample LabelBatch(int64_t label) {
  Sample b;
  b.Set("cls", MakeArray<int64_t>(DType::kInt64, {1}, {label}));
  return b;
}

int64_t Label(const TensorBatch& batch) { return batch.at("cls")[0].item<int64_t>(); }
// Label of a batch from Next(); -1 (and a failure) at the end of an epoch.
int64_t Label(const std::optional<TensorBatch>& batch) {
  if (!batch) {
    ADD_FAILURE() << "end of epoch where a batch was expected";
    return -1;
  }
  return Label(*batch);
}

// ScriptedSource yields `script` in order (nullopt entries end an epoch) and
// counts its calls; `throw_at` makes that call throw instead.
struct ScriptedSource {
  std::vector<std::optional<int64_t>> script;
  std::optional<int> throw_at;
  std::shared_ptr<int> calls = std::make_shared<int>(0);

  DevicePrefetcher::BatchSource Fn() const {
    return [script = script, throw_at = throw_at, calls = calls]() -> std::optional<Sample> {
      const int call = (*calls)++;
      if (throw_at == call)
        throw std::runtime_error("source failed at call " + std::to_string(call));
      if (call >= static_cast<int>(script.size()) || !script[call]) return std::nullopt;
      return LabelBatch(*script[call]);
    };
  }
};

// ---- dtypes ----

TEST(ToTorchDTypeTest, MapsEveryDTypeWithATorchType) {
  const std::vector<std::pair<DType, torch::Dtype>> expected = {
      {DType::kBool, torch::kBool},       {DType::kUInt8, torch::kUInt8},
      {DType::kInt8, torch::kInt8},       {DType::kInt16, torch::kInt16},
      {DType::kInt32, torch::kInt32},     {DType::kInt64, torch::kInt64},
      {DType::kFloat16, torch::kFloat16}, {DType::kFloat32, torch::kFloat32},
      {DType::kFloat64, torch::kFloat64},
  };
  for (const auto& [dtype, torch_dtype] : expected) {
    EXPECT_EQ(ToTorchDType(dtype), torch_dtype) << DTypeName(dtype);
    EXPECT_EQ(c10::elementSize(torch_dtype), DTypeSize(dtype)) << DTypeName(dtype);
  }
}

TEST(ToTorchDTypeTest, WideUnsignedIsTypeError) {
  for (DType dtype : {DType::kUInt16, DType::kUInt32, DType::kUInt64}) {
    ExpectThrows<c10::TypeError>([&] { (void)ToTorchDType(dtype); },
                                 std::string(DTypeName(dtype)) + " has no LibTorch dtype");
  }
}

TEST(ToTensorTest, ReadsTheValueOfEveryDType) {
  EXPECT_EQ(ToTensor(MakeArray<uint8_t>(DType::kBool, {2}, {1, 0}))[0].item<bool>(), true);
  EXPECT_EQ(ToTensor(MakeArray<uint8_t>(DType::kUInt8, {1}, {200})).item<uint8_t>(), 200);
  EXPECT_EQ(ToTensor(MakeArray<int8_t>(DType::kInt8, {1}, {-5})).item<int8_t>(), -5);
  EXPECT_EQ(ToTensor(MakeArray<int16_t>(DType::kInt16, {1}, {-300})).item<int16_t>(), -300);
  EXPECT_EQ(ToTensor(MakeArray<int32_t>(DType::kInt32, {1}, {-70000})).item<int32_t>(), -70000);
  EXPECT_EQ(ToTensor(MakeArray<int64_t>(DType::kInt64, {1}, {-5000000000})).item<int64_t>(),
            -5000000000);
  // 0x3C00 is 1.0 and 0xC100 is -2.5 in IEEE half precision.
  torch::Tensor half = ToTensor(MakeArray<uint16_t>(DType::kFloat16, {2}, {0x3C00, 0xC100}));
  EXPECT_EQ(half.dtype(), torch::kFloat16);
  EXPECT_EQ(half[0].item<float>(), 1.0f);
  EXPECT_EQ(half[1].item<float>(), -2.5f);
  EXPECT_EQ(ToTensor(MakeArray<float>(DType::kFloat32, {1}, {1.5f})).item<float>(), 1.5f);
  EXPECT_EQ(ToTensor(MakeArray<double>(DType::kFloat64, {1}, {-2.25})).item<double>(), -2.25);
}

TEST(ToTensorTest, WideUnsignedIsTypeErrorByDefault) {
  ExpectThrows<c10::TypeError>([] { ToTensor(MakeArray<uint16_t>(DType::kUInt16, {1}, {7})); },
                               "ToTensor: uint16 has no LibTorch dtype");
  ExpectThrows<c10::TypeError>([] { ToTensor(MakeArray<uint32_t>(DType::kUInt32, {1}, {7})); },
                               "ToTensor: uint32 has no LibTorch dtype");
  ExpectThrows<c10::TypeError>([] { ToTensor(MakeArray<uint64_t>(DType::kUInt64, {1}, {7})); },
                               "ToTensor: uint64 has no LibTorch dtype");
}

TEST(ToTensorTest, WidenUnsignedCopiesIntoTheWiderSignedType) {
  Array u16 = MakeArray<uint16_t>(DType::kUInt16, {2, 1}, {0, 65535});
  torch::Tensor t16 = ToTensor(u16, {.widen_unsigned = true});
  EXPECT_EQ(t16.dtype(), torch::kInt32);
  EXPECT_EQ(t16.sizes(), torch::IntArrayRef({2, 1}));
  EXPECT_EQ(t16[1][0].item<int32_t>(), 65535);
  EXPECT_NE(t16.data_ptr(), DataOf(u16));

  torch::Tensor t32 =
      ToTensor(MakeArray<uint32_t>(DType::kUInt32, {1}, {4294967295u}), {.widen_unsigned = true});
  EXPECT_EQ(t32.dtype(), torch::kInt64);
  EXPECT_EQ(t32[0].item<int64_t>(), 4294967295);
}

TEST(ToTensorTest, WidenUnsignedStillRejectsUInt64) {
  ExpectThrows<c10::TypeError>(
      [] { ToTensor(MakeArray<uint64_t>(DType::kUInt64, {1}, {7}), {.widen_unsigned = true}); },
      "uint64 has no LibTorch dtype");
}

// ---- memory ----

TEST(ToTensorTest, SharesMemoryWithTheArray) {
  Array a = MakeArray<float>(DType::kFloat32, {2, 3}, {0, 1, 2, 3, 4, 5});
  torch::Tensor t = ToTensor(a);
  EXPECT_EQ(t.data_ptr(), DataOf(a));
  EXPECT_EQ(t.dtype(), torch::kFloat32);
  EXPECT_EQ(t.sizes(), torch::IntArrayRef({2, 3}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t[1][2].item<float>(), 5.0f);

  t[0][1] = 42.0f;
  EXPECT_EQ(a.data_as<float>()[1], 42.0f);
  a.mutable_data<float>()[4] = -1.0f;
  EXPECT_EQ(t[1][1].item<float>(), -1.0f);
}

TEST(ToTensorTest, KeepsMemoryAliveAfterArrayAndBuffersAreDropped) {
  bool destroyed = false;
  torch::Tensor t;
  {
    Array a = FlaggedArray(&destroyed, {4});
    t = ToTensor(a);
  }
  EXPECT_FALSE(destroyed);
  EXPECT_EQ(t[3].item<uint8_t>(), 3);
  t = torch::Tensor();
  EXPECT_TRUE(destroyed);
}

TEST(ToTensorTest, ViewOfTheTensorKeepsMemoryAlive) {
  bool destroyed = false;
  torch::Tensor slice;
  {
    torch::Tensor t = ToTensor(FlaggedArray(&destroyed, {2, 3}));
    slice = t.select(0, 1);
  }
  EXPECT_FALSE(destroyed);
  EXPECT_EQ(slice[2].item<uint8_t>(), 5);
  slice = torch::Tensor();
  EXPECT_TRUE(destroyed);
}

// ---- shapes and layout ----

TEST(ToTensorTest, NchwIsAPermutedViewOfTheSameBytes) {
  Array a = Iota(DType::kUInt8, {2, 3, 4, 3});  // N, H, W, C
  torch::Tensor t = ToTensor(a, {.layout = TensorLayout::kNCHW});
  EXPECT_EQ(t.sizes(), torch::IntArrayRef({2, 3, 3, 4}));
  EXPECT_EQ(t.data_ptr(), DataOf(a));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.is_contiguous(torch::MemoryFormat::ChannelsLast));
  const uint8_t* hwc = a.data_as<uint8_t>();
  auto acc = t.accessor<uint8_t, 4>();
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int h = 0; h < 3; ++h) {
        for (int w = 0; w < 4; ++w) {
          ASSERT_EQ(acc[n][c][h][w], hwc[((n * 3 + h) * 4 + w) * 3 + c]) << n << c << h << w;
        }
      }
    }
  }
}

TEST(ToTensorTest, NchwOfAnArrayThatIsNot4DIsValueError) {
  ExpectThrows<c10::ValueError>(
      [] {
        ToTensor(Iota(DType::kUInt8, {3, 4, 3}), {.layout = TensorLayout::kNCHW});
      },
      "layout NCHW needs a 4-D [N, H, W, C] array, got shape [3, 4, 3]");
}

TEST(ToTensorTest, BufferSmallerThanTheShapeIsValueError) {
  Array a;
  a.dtype = DType::kInt32;
  a.shape = {2, 2};
  a.data = Buffer::Allocate(12);
  ExpectThrows<c10::ValueError>([&] { ToTensor(a); },
                                "int32 shape [2, 2] needs 16 bytes but its buffer holds 12");
}

TEST(ToTensorTest, NegativeDimensionIsValueError) {
  Array a;
  a.dtype = DType::kUInt8;
  a.shape = {2, -1};
  ExpectThrows<c10::ValueError>([&] { ToTensor(a); }, "negative dimension in shape [2, -1]");
}

TEST(ToTensorTest, EmptyArrayGivesAnEmptyTensor) {
  Array a;
  a.dtype = DType::kFloat32;
  a.shape = {0, 3};
  torch::Tensor t = ToTensor(a);
  EXPECT_EQ(t.sizes(), torch::IntArrayRef({0, 3}));
  EXPECT_EQ(t.dtype(), torch::kFloat32);
}

TEST(ToTensorTest, ZeroDimArrayGivesAScalarTensor) {
  Array a = MakeArray<int64_t>(DType::kInt64, {}, {42});
  torch::Tensor t = ToTensor(a);
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.item<int64_t>(), 42);
  EXPECT_EQ(t.data_ptr(), DataOf(a));
}

// ---- sample fields ----

TEST(ToTensorFieldTest, IntAndDoubleBecomeScalarTensors) {
  Sample s;
  s.Set(std::string(kKeyField), std::string("k"));
  s.Set("cls", int64_t{7});
  s.Set("score", 0.5);
  torch::Tensor cls = ToTensor(s, "cls");
  EXPECT_EQ(cls.dim(), 0);
  EXPECT_EQ(cls.dtype(), torch::kInt64);
  EXPECT_EQ(cls.item<int64_t>(), 7);
  torch::Tensor score = ToTensor(s, "score");
  EXPECT_EQ(score.dtype(), torch::kFloat64);
  EXPECT_EQ(score.item<double>(), 0.5);
}

TEST(ToTensorFieldTest, MissingFieldIsIndexErrorNamingSampleAndUrl) {
  Sample s;
  s.Set(std::string(kKeyField), std::string("k1"));
  s.Set(std::string(kUrlField), std::string("data/shard-7.tar"));
  ExpectThrows<c10::IndexError>([&] { ToTensor(s, "jpg"); },
                                "field \"jpg\" of sample \"k1\" (data/shard-7.tar): no such field");
}

TEST(ToTensorFieldTest, TextFieldIsTypeError) {
  Sample s;
  s.Set(std::string(kKeyField), std::string("k1"));
  s.Set("txt", std::string("hello"));
  ExpectThrows<c10::TypeError>([&] { ToTensor(s, "txt"); },
                               "field \"txt\" of sample \"k1\": a text value has no tensor form");
}

TEST(ToTensorFieldTest, ArrayErrorNamesTheField) {
  Sample s;
  s.Set(std::string(kKeyField), std::string("k1"));
  s.Set("depth", MakeArray<uint16_t>(DType::kUInt16, {1}, {1}));
  ExpectThrows<c10::TypeError>([&] { ToTensor(s, "depth"); },
                               "field \"depth\" of sample \"k1\": uint16 has no LibTorch dtype");
}

// ---- batches ----

TEST(ToTensorBatchTest, ConvertsTensorFieldsInOrderAndKeepsTheRest) {
  Sample batch = ImageBatch();
  TensorBatch tb = ToTensorBatch(batch);
  EXPECT_THAT(tb.names, ElementsAre("jpg", "cls"));
  ASSERT_EQ(tb.size(), 2u);
  EXPECT_EQ(tb[0].data_ptr(), DataOf(*batch.GetArray("jpg")));
  EXPECT_EQ(tb[0].sizes(), torch::IntArrayRef({2, 2, 2, 3}));
  EXPECT_EQ(tb[1].data_ptr(), DataOf(*batch.GetArray("cls")));
  EXPECT_EQ(tb.at("cls")[1].item<int64_t>(), 9);
  std::vector<std::string> rest;
  for (const auto& [name, value] : tb.rest) rest.push_back(name);
  EXPECT_THAT(rest, ElementsAre("__key__", "__url__", "txt"));
  EXPECT_EQ(std::get<TextList>(*tb.rest.Find("txt")), (TextList{"cat", "dog"}));
}

TEST(ToTensorBatchTest, ToTensorsGivesTheTensorsByPosition) {
  Sample batch = ImageBatch();
  std::vector<torch::Tensor> tensors = ToTensors(batch);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].data_ptr(), DataOf(*batch.GetArray("jpg")));
  EXPECT_EQ(tensors[1].data_ptr(), DataOf(*batch.GetArray("cls")));
}

TEST(ToTensorBatchTest, NamedFieldsComeInTheRequestedOrder) {
  Sample batch = ImageBatch();
  TensorBatch tb = ToTensorBatch(batch, {"cls", "jpg"});
  EXPECT_THAT(tb.names, ElementsAre("cls", "jpg"));
  EXPECT_EQ(tb[0].data_ptr(), DataOf(*batch.GetArray("cls")));
  EXPECT_EQ(tb[1].data_ptr(), DataOf(*batch.GetArray("jpg")));
  std::vector<std::string> rest;
  for (const auto& [name, value] : tb.rest) rest.push_back(name);
  EXPECT_THAT(rest, ElementsAre("__key__", "__url__", "txt"));
}

TEST(ToTensorBatchTest, MissingNamedFieldIsIndexErrorNamingTheBatch) {
  ExpectThrows<c10::IndexError>(
      [] {
        ToTensorBatch(ImageBatch(), {"jpg", "seg"});
      },
      "field \"seg\" of batch from sample \"a\" (shard-0.tar): no such field");
}

TEST(ToTensorBatchTest, NamedTextListFieldIsTypeError) {
  ExpectThrows<c10::TypeError>([] { ToTensors(ImageBatch(), {"txt"}); },
                               "field \"txt\" of batch from sample \"a\" (shard-0.tar): a text "
                               "list value has no tensor form");
}

TEST(ToTensorBatchTest, NchwAppliesToImageBatchesOnly) {
  for (const std::vector<std::string>& fields :
       {std::vector<std::string>{}, std::vector<std::string>{"jpg", "cls"}}) {
    TensorBatch tb = ToTensorBatch(ImageBatch(), fields, {.layout = TensorLayout::kNCHW});
    EXPECT_EQ(tb.at("jpg").sizes(), torch::IntArrayRef({2, 3, 2, 2}));
    EXPECT_EQ(tb.at("cls").sizes(), torch::IntArrayRef({2}));
  }
}

// A column decoded elsewhere (GPU jobs, bytes with no tensor form) takes its
// made tensor in its place, as it is: no layout change, no copy.
TEST(ToTensorBatchTest, MadeTensorsTakeTheirFieldsPlacesAsTheyAre) {
  Sample batch = ImageBatch();
  batch.Set("jobs", BytesList{Buffer::Copy("a"), Buffer::Copy("b")});
  const torch::Tensor made = torch::arange(24, torch::kFloat32).reshape({2, 3, 2, 2});
  for (const std::vector<std::string>& fields :
       {std::vector<std::string>{}, std::vector<std::string>{"jobs", "cls"}}) {
    TensorBatch tb =
        ToTensorBatch(batch, fields, {.layout = TensorLayout::kNCHW}, {{"jobs", made}});
    EXPECT_EQ(tb.at("jobs").data_ptr(), made.data_ptr());
    EXPECT_EQ(tb.at("jobs").sizes(), made.sizes());
    EXPECT_EQ(tb.at("cls").data_ptr(), DataOf(*batch.GetArray("cls")));
    EXPECT_EQ(tb.rest.Find("jobs"), nullptr);
  }
  EXPECT_THAT(ToTensorBatch(batch, {}, {}, {{"jobs", made}}).names,
              ElementsAre("jpg", "cls", "jobs"));
}

TEST(ToTensorBatchTest, MadeTensorForNoFieldIsIndexError) {
  ExpectThrows<c10::IndexError>(
      [] {
        ToTensorBatch(ImageBatch(), {}, {}, {{"seg", torch::zeros({2})}});
      },
      "field \"seg\" of batch from sample \"a\" (shard-0.tar): a tensor was made for it, but "
      "the batch has no such field");
}

TEST(ToTensorBatchTest, MetadataIntFieldsStayInRest) {
  Sample s;
  s.Set("__epoch__", int64_t{3});
  s.Set("cls", int64_t{1});
  TensorBatch tb = ToTensorBatch(s);
  EXPECT_THAT(tb.names, ElementsAre("cls"));
  EXPECT_EQ(tb.rest.GetInt("__epoch__"), 3);
}

TEST(ToTensorBatchTest, AtUnknownNameIsIndexError) {
  TensorBatch tb = ToTensorBatch(ImageBatch());
  ExpectThrows<c10::IndexError>([&] { tb.at("png"); },
                                "no tensor field \"png\" (fields: jpg, cls)");
}

// ---- DevicePrefetcher on the CPU ----

TEST(DevicePrefetcherTest, CpuYieldsZeroCopyBatchesInOrderThenEnds) {
  std::vector<Sample> batches = {ImageBatch(), ImageBatch(), ImageBatch()};
  size_t next = 0;
  DevicePrefetcher prefetcher([&]() -> std::optional<Sample> {
    if (next == batches.size()) return std::nullopt;
    return batches[next++];
  });
  EXPECT_TRUE(prefetcher.device().is_cpu());
  for (const Sample& expected : batches) {
    std::optional<TensorBatch> got = prefetcher.Next();
    ASSERT_TRUE(got.has_value());
    EXPECT_THAT(got->names, ElementsAre("jpg", "cls"));
    EXPECT_EQ(got->at("jpg").data_ptr(), DataOf(*expected.GetArray("jpg")));
    EXPECT_EQ(got->at("cls").data_ptr(), DataOf(*expected.GetArray("cls")));
  }
  EXPECT_FALSE(prefetcher.Next().has_value());
}

TEST(DevicePrefetcherTest, DrawsOneAheadButNeverPastTheEndOfAnEpoch) {
  ScriptedSource source{{0, 1, std::nullopt, 2, std::nullopt}};
  DevicePrefetcher prefetcher(source.Fn());
  EXPECT_EQ(Label(prefetcher.Next()), 0);
  EXPECT_EQ(*source.calls, 2);  // batch 1 was drawn ahead
  EXPECT_EQ(Label(prefetcher.Next()), 1);
  EXPECT_EQ(*source.calls, 3);
  EXPECT_FALSE(prefetcher.Next().has_value());
  EXPECT_EQ(*source.calls, 3);  // nothing drawn past the end
  EXPECT_EQ(Label(prefetcher.Next()), 2);
  EXPECT_FALSE(prefetcher.Next().has_value());
  EXPECT_EQ(*source.calls, 5);
}

TEST(DevicePrefetcherTest, EmptyEpochEndsAtOnce) {
  ScriptedSource source{{std::nullopt, 4, std::nullopt}};
  DevicePrefetcher prefetcher(source.Fn());
  EXPECT_FALSE(prefetcher.Next().has_value());
  EXPECT_EQ(*source.calls, 1);
  EXPECT_EQ(Label(prefetcher.Next()), 4);
}

TEST(DevicePrefetcherTest, SourceErrorComesAfterTheBatchesBeforeIt) {
  ScriptedSource source{{0, 1, 2, 3}, /*throw_at=*/2};
  DevicePrefetcher prefetcher(source.Fn());
  EXPECT_EQ(Label(prefetcher.Next()), 0);
  EXPECT_EQ(Label(prefetcher.Next()), 1);
  EXPECT_EQ(*source.calls, 3);  // the failing draw happened ahead...
  ExpectThrows<std::runtime_error>([&] { prefetcher.Next(); },
                                   "source failed at call 2");  // ...and is thrown in order
  EXPECT_EQ(Label(prefetcher.Next()), 3);
}

TEST(DevicePrefetcherTest, FirstDrawErrorIsThrownAtOnce) {
  ScriptedSource source{{std::nullopt, 5}, /*throw_at=*/0};
  DevicePrefetcher prefetcher(source.Fn());
  ExpectThrows<std::runtime_error>([&] { prefetcher.Next(); }, "source failed at call 0");
  EXPECT_EQ(Label(prefetcher.Next()), 5);
}

TEST(DevicePrefetcherTest, ConversionErrorComesInOrder) {
  std::vector<Sample> batches = {LabelBatch(0), LabelBatch(1)};
  batches[1].Set("depth", MakeArray<uint16_t>(DType::kUInt16, {1}, {1}));
  size_t next = 0;
  DevicePrefetcher prefetcher([&]() -> std::optional<Sample> {
    if (next == batches.size()) return std::nullopt;
    return batches[next++];
  });
  EXPECT_EQ(Label(prefetcher.Next()), 0);
  ExpectThrows<c10::TypeError>([&] { prefetcher.Next(); },
                               "field \"depth\": uint16 has no LibTorch dtype");
  EXPECT_FALSE(prefetcher.Next().has_value());
}

TEST(DevicePrefetcherTest, CpuBatchKeepsItsMemoryUntilDropped) {
  bool destroyed = false;
  bool drawn = false;
  DevicePrefetcher prefetcher([&]() -> std::optional<Sample> {
    if (drawn) return std::nullopt;
    drawn = true;
    Sample b;
    b.Set("img", FlaggedArray(&destroyed, {1, 2, 2, 1}));
    return b;
  });
  std::optional<TensorBatch> batch = prefetcher.Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_FALSE(destroyed);
  EXPECT_EQ(batch->at("img")[0][1][1][0].item<uint8_t>(), 3);
  batch.reset();
  EXPECT_TRUE(destroyed);
}

TEST(DevicePrefetcherTest, FieldsAndLayoutOptionsApply) {
  DevicePrefetcher prefetcher(
      [drawn = false]() mutable -> std::optional<Sample> {
        if (drawn) return std::nullopt;
        drawn = true;
        return ImageBatch();
      },
      {.fields = {"cls", "jpg"}, .tensor = {.layout = TensorLayout::kNCHW}});
  std::optional<TensorBatch> batch = prefetcher.Next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(batch->names, ElementsAre("cls", "jpg"));
  EXPECT_EQ((*batch)[1].sizes(), torch::IntArrayRef({2, 3, 2, 2}));
  EXPECT_EQ(batch->rest.size(), 3u);
}

TEST(DevicePrefetcherTest, RangeForCoversOneEpochAtATime) {
  ScriptedSource source{{0, 1, std::nullopt, 2, std::nullopt}};
  DevicePrefetcher prefetcher(source.Fn());
  std::vector<int64_t> epoch0, epoch1;
  for (const TensorBatch& b : prefetcher) epoch0.push_back(Label(b));
  for (const TensorBatch& b : prefetcher) epoch1.push_back(Label(b));
  EXPECT_THAT(epoch0, ElementsAre(0, 1));
  EXPECT_THAT(epoch1, ElementsAre(2));
}

// LoaderPipeline yields samples "s0".."s3" with an int label and a float
// array, through a Map that fails on `bad_key` (if any).
Pipeline LoaderPipeline(const std::string& bad_key) {
  std::vector<Sample> samples;
  for (int i = 0; i < 4; ++i) {
    Sample s;
    s.Set(std::string(kKeyField), "s" + std::to_string(i));
    s.Set("cls", int64_t{i});
    s.Set("x", MakeArray<float>(DType::kFloat32, {2}, {float(i), 0.5f}));
    samples.push_back(std::move(s));
  }
  return Pipeline(testing::VectorSource(std::move(samples)))
      .Map([bad_key](Sample s) -> absl::StatusOr<Sample> {
        if (s.key() == bad_key) return absl::DataLossError("corrupt sample " + bad_key);
        return s;
      });
}

TEST(DevicePrefetcherTest, OverALoaderYieldsItsItemsInOrderPerEpoch) {
  Loader loader(LoaderPipeline(""), {.workers = 1});
  DevicePrefetcher prefetcher(loader);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> labels;
    for (const TensorBatch& b : prefetcher) {
      EXPECT_THAT(b.names, ElementsAre("cls", "x"));
      EXPECT_EQ(b.at("x")[0].item<float>(), static_cast<float>(b.at("cls").item<int64_t>()));
      labels.push_back(b.at("cls").item<int64_t>());
    }
    EXPECT_THAT(labels, ElementsAre(0, 1, 2, 3)) << "epoch " << epoch;
  }
}

TEST(DevicePrefetcherTest, LoaderErrorIsThrownAsLoaderErrorInOrder) {
  Loader loader(LoaderPipeline("s2"), {.workers = 1});
  DevicePrefetcher prefetcher(loader);
  for (int64_t expected : {0, 1}) {
    std::optional<TensorBatch> batch = prefetcher.Next();
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->at("cls").item<int64_t>(), expected);
  }
  try {
    prefetcher.Next();
    ADD_FAILURE() << "no LoaderError";
  } catch (const LoaderError& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(e.status().message()), HasSubstr("corrupt sample s2"));
  }
}

// A prefetcher over a loader of tar shards: its state is the position after
// the batches it handed out (not the one drawn ahead), and a restored pair
// hands out the rest of the epoch unchanged.
TEST(DevicePrefetcherTest, StateExcludesTheBatchDrawnAheadAndRestoresExactly) {
  testing::TempDir dir;
  std::vector<std::string> urls;
  for (int s = 0; s < 3; ++s) {
    std::vector<testing::TarEntry> entries;
    for (int i = 0; i < 5 + 2 * s; ++i) {
      entries.push_back({"k" + std::to_string(s) + "_" + std::to_string(i) + ".cls",
                         std::to_string(100 * s + i)});
    }
    urls.push_back(dir.Write("s" + std::to_string(s) + ".tar", testing::MakeTar(entries)));
  }
  const Pipeline recipe =
      WebDataset(urls, {.seed = 3, .shardshuffle = true}).value().Shuffle(4, 2).Decode().Batched(2);
  auto labels = [](DevicePrefetcher& p, int64_t n) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) {
      std::optional<TensorBatch> b = p.Next();
      if (!b.has_value()) break;
      for (int64_t j = 0; j < b->at("cls").size(0); ++j) {
        out.push_back(b->at("cls")[j].item<int64_t>());
      }
    }
    return out;
  };
  const DevicePrefetcherOptions options{.fields = {"cls"}};
  Loader whole_loader(recipe, {.workers = 2});
  DevicePrefetcher whole(whole_loader, options);
  const std::vector<int64_t> expected = labels(whole, 100);
  ASSERT_EQ(expected.size(), 21u);
  for (int64_t stop = 0; stop <= 11; ++stop) {
    std::string state;
    std::vector<int64_t> got;
    {
      Loader loader(recipe, {.workers = 2});
      DevicePrefetcher prefetcher(loader, options);
      got = labels(prefetcher, stop);
      state = prefetcher.State().value();
    }
    Loader loader(recipe, {.workers = 2});
    DevicePrefetcher prefetcher(loader, options);
    ASSERT_TRUE(prefetcher.Restore(state).ok());
    std::vector<int64_t> rest = labels(prefetcher, 100);
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, expected) << "stopped after " << stop << " batches";
  }
  DevicePrefetcher scripted(ScriptedSource{}.Fn());
  EXPECT_EQ(scripted.State().status().code(), absl::StatusCode::kFailedPrecondition);

  // One Checkpointable shape: a prefetcher's state continues a loader used
  // without one, through the interface alone.
  std::string state;
  {
    Loader loader(recipe, {.workers = 2});
    DevicePrefetcher prefetcher(loader, options);
    labels(prefetcher, 3);
    const Checkpointable& saved = prefetcher;
    state = saved.State().value();
  }
  Loader plain(recipe, {.workers = 2});
  Checkpointable& target = plain;
  ASSERT_TRUE(target.Restore(state).ok());
  std::vector<int64_t> rest;
  for (const Sample& batch : plain) {
    const Array* cls = batch.GetArray("cls");
    ASSERT_NE(cls, nullptr);
    for (int64_t j = 0; j < cls->shape[0]; ++j) rest.push_back(cls->data_as<int64_t>()[j]);
  }
  const std::vector<int64_t> tail(expected.begin() + 6, expected.end());
  EXPECT_EQ(rest, tail);
}

// ---- devices ----

TEST(DevicePrefetcherTest, EmptySourceIsValueError) {
  ExpectThrows<c10::ValueError>([] { DevicePrefetcher p(DevicePrefetcher::BatchSource{}); },
                                "the batch source is empty");
}

TEST(DevicePrefetcherTest, DeviceOtherThanCpuOrCudaIsValueError) {
  ExpectThrows<c10::ValueError>(
      [] { DevicePrefetcher p(ScriptedSource{}.Fn(), {.device = torch::Device(torch::kMeta)}); },
      "device meta is neither CPU nor CUDA");
}

TEST(DevicePrefetcherTest, CudaWithoutCudaIsValueError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "CUDA is available";
  ExpectThrows<c10::ValueError>(
      [] { DevicePrefetcher p(ScriptedSource{}.Fn(), {.device = torch::Device(torch::kCUDA, 0)}); },
      "device cuda:0 is not available: torch::cuda::is_available() is false");
}

TEST(DevicePrefetcherTest, CudaIndexOutOfRangeIsValueError) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs CUDA";
  const auto count = static_cast<c10::DeviceIndex>(torch::cuda::device_count());
  ExpectThrows<c10::ValueError>(
      [&] {
        DevicePrefetcher p(ScriptedSource{}.Fn(), {.device = torch::Device(torch::kCUDA, count)});
      },
      "is out of range");
}

TEST(DevicePrefetcherTest, CudaCopiesBatchesAndHoldsHostMemoryDuringTheCopy) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs CUDA";
  constexpr int kBatches = 4;
  // One heap flag per batch: FlaggedArray keeps a pointer to it.
  auto flags = std::make_shared<std::vector<std::unique_ptr<bool>>>();
  for (int i = 0; i < kBatches; ++i) flags->push_back(std::make_unique<bool>(false));
  int next = 0;
  {
    DevicePrefetcher prefetcher(
        [&]() -> std::optional<Sample> {
          if (next == kBatches) return std::nullopt;
          Sample b;
          b.Set("img", FlaggedArray((*flags)[next].get(), {2, 4, 4, 3}));
          b.Set("cls", int64_t{next});
          ++next;
          return b;
        },
        {.device = torch::kCUDA, .tensor = {.layout = TensorLayout::kNCHW}});
    EXPECT_TRUE(prefetcher.device().is_cuda());
    EXPECT_TRUE(prefetcher.device().has_index());
    torch::Tensor expected =
        torch::arange(2 * 4 * 4 * 3, torch::kInt64).remainder(256).to(torch::kUInt8);
    expected = expected.reshape({2, 4, 4, 3}).permute({0, 3, 1, 2});
    for (int i = 0; i < kBatches; ++i) {
      std::optional<TensorBatch> batch = prefetcher.Next();
      ASSERT_TRUE(batch.has_value());
      EXPECT_TRUE(batch->at("img").is_cuda());
      EXPECT_EQ(batch->at("img").sizes(), torch::IntArrayRef({2, 3, 4, 4}));
      EXPECT_TRUE(torch::equal(batch->at("img").cpu(), expected));
      EXPECT_EQ(batch->at("cls").item<int64_t>(), i);
      if (i + 1 < kBatches) {
        EXPECT_FALSE(*(*flags)[i + 1]) << "the batch drawn ahead must hold its host memory";
      }
    }
    EXPECT_FALSE(prefetcher.Next().has_value());
  }
  for (int i = 0; i < kBatches; ++i) EXPECT_TRUE(*(*flags)[i]) << i;
}

// Pipelines of DecodeOnGpu through a prefetcher: on the CPU the host decoder
// decodes their image columns (the same bytes DecodeGpuJobsOnHost gives), on
// a GPU the device decoder, within nvJPEG's +-2.
// JpegRecipe: 12 JPEGs decoded on the GPU path, by default to normalized
// torchrgb at 20x16 (channels first); another `spec` (rgb8: channels last)
// and size may be asked for.
Pipeline JpegRecipe(const testing::TempDir& dir, const std::string& spec = "torchrgb",
                    int width = 20, int height = 16) {
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < 12; ++i) {
    gpu_testing::JpegRecipe r;
    r.width = 40 + 4 * (i % 3);
    entries.push_back({"k" + std::to_string(i) + ".jpg", gpu_testing::EncodeJpeg(r)});
    entries.push_back({"k" + std::to_string(i) + ".cls", std::to_string(i)});
  }
  const std::string url = dir.Write("jpegs.tar", testing::MakeTar(entries));
  GpuDecodeOptions gpu;
  if (spec == "torchrgb") gpu.normalize = kImageNetNormalize;
  return WebDataset(url, {.seed = 2}).value().Shuffle(5).DecodeOnGpu(
      spec, {.resize = {ResizeMode::kRandomResizedCrop, width, height}, .hflip = 0.5},
      gpu).ToTuple({"jpg", "cls"}).Batched(4);
}

std::vector<torch::Tensor> HostImages(const Pipeline& recipe) {
  std::vector<torch::Tensor> out;
  Loader loader(recipe, {.workers = 1});
  for (Sample batch : loader) {
    EXPECT_TRUE(DecodeGpuJobsOnHost(batch).ok());
    out.push_back(ToTensor(batch, batch[0].first).clone());
  }
  return out;
}

TEST(DevicePrefetcherTest, GpuJobsOnTheCpuAreTheHostDecodersImages) {
  testing::TempDir dir;
  const Pipeline recipe = JpegRecipe(dir);
  const std::vector<torch::Tensor> expected = HostImages(recipe);
  ASSERT_EQ(expected.size(), 3u);
  Loader loader(recipe, {.workers = 1});
  DevicePrefetcher prefetcher(loader);
  size_t n = 0;
  for (const TensorBatch& batch : prefetcher) {
    ASSERT_LT(n, expected.size());
    EXPECT_EQ(batch[0].sizes(), (std::vector<int64_t>{4, 3, 16, 20}));
    EXPECT_EQ(batch[0].scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(batch[0], expected[n])) << "batch " << n;
    EXPECT_EQ(batch[1].size(0), 4);
    ++n;
  }
  EXPECT_EQ(n, 3u);
}

TEST(DevicePrefetcherTest, GpuJobsToTensorRefusesAFieldWithoutJobs) {
  Sample batch = testing::MakeSample("k", {{"jpg", "not a job"}});
  std::unique_ptr<GpuBatchDecoder> decoder;
  EXPECT_THROW(GpuJobsToTensor(batch, 2, torch::kCPU, decoder), c10::ValueError);
  EXPECT_THROW(GpuJobsToTensor(batch, 99, torch::kCPU, decoder), c10::ValueError);
}

// FirstJpegBatch is the first batch of `recipe`, its images decoded ahead by
// `decoders` when given.
std::optional<Sample> FirstJpegBatch(const Pipeline& recipe,
                                     std::shared_ptr<GpuWorkerDecoders> decoders = nullptr) {
  Loader loader(recipe, {.workers = 1, .gpu_decoders = std::move(decoders)});
  absl::StatusOr<std::optional<Sample>> batch = loader.Next();
  EXPECT_TRUE(batch.ok()) << batch.status();
  return batch.ok() ? *std::move(batch) : std::nullopt;
}

TEST(DevicePrefetcherTest, GpuJobsToTensorOnTheCpuUsesAHostDecoder) {
  testing::TempDir dir;
  const Pipeline recipe = JpegRecipe(dir);
  const std::vector<torch::Tensor> expected = HostImages(recipe);
  const std::optional<Sample> batch = FirstJpegBatch(recipe);
  ASSERT_TRUE(batch.has_value());
  std::unique_ptr<GpuBatchDecoder> decoder;
  EXPECT_TRUE(torch::equal(GpuJobsToTensor(*batch, 0, torch::kCPU, decoder), expected[0]));
  EXPECT_EQ(decoder->device(), GpuBatchDecoder::kHost);
}

TEST(DevicePrefetcherTest, GpuJobsToTensorOnCudaWithoutAnIndexUsesTheCurrentDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir;
  const Pipeline recipe = JpegRecipe(dir);
  const std::vector<torch::Tensor> expected = HostImages(recipe);
  const std::optional<Sample> batch = FirstJpegBatch(recipe);
  ASSERT_TRUE(batch.has_value());
  // A decoder made for the host is not used for a CUDA tensor.
  std::unique_ptr<GpuBatchDecoder> host_decoder;
  GpuJobsToTensor(*batch, 0, torch::kCPU, host_decoder);
  EXPECT_THROW(GpuJobsToTensor(*batch, 0, torch::kCUDA, host_decoder), c10::ValueError);
  // "cuda" without an index is the current device (index -1 would be kHost's).
  std::unique_ptr<GpuBatchDecoder> decoder;
  const torch::Tensor images = GpuJobsToTensor(*batch, 0, torch::kCUDA, decoder);
  EXPECT_EQ(decoder->device(), 0);
  EXPECT_TRUE(images.is_cuda());
  EXPECT_LE((images.cpu() - expected[0]).abs().max().item<double>(), 2.0 / 255 / 0.224 + 1e-5);
}

// kNCHW views a column decoded channels last (rgb8), even 3 pixels wide, and
// leaves one decoded channels first (torchrgb) as it is.
TEST(DevicePrefetcherTest, GpuJobsOnCudaTakeTheNchwViewOnlyWhenChannelsLast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir;
  const DevicePrefetcherOptions nchw = {.device = torch::Device(torch::kCUDA, 0),
                                        .tensor = {.layout = TensorLayout::kNCHW}};
  for (const auto& [spec, width, sizes] :
       {std::tuple{"rgb8", 3, std::vector<int64_t>{4, 3, 16, 3}},
        std::tuple{"torchrgb", 20, std::vector<int64_t>{4, 3, 16, 20}}}) {
    Loader loader(JpegRecipe(dir, spec, width, 16), {.workers = 1});
    DevicePrefetcher prefetcher(loader, nchw);
    size_t n = 0;
    for (const TensorBatch& batch : prefetcher) {
      EXPECT_EQ(batch[0].sizes(), sizes) << spec;
      ++n;
    }
    EXPECT_EQ(n, 3u) << spec;
  }
}

// Only the job columns among `fields` are decoded; the others stay jobs.
TEST(DevicePrefetcherTest, GpuJobsOnCudaOutsideFieldsAreNotDecoded) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir;
  Loader loader(JpegRecipe(dir), {.workers = 1});
  DevicePrefetcher prefetcher(loader, {.device = torch::Device(torch::kCUDA, 0), .fields = {"cls"}});
  size_t n = 0;
  for (const TensorBatch& batch : prefetcher) {
    EXPECT_EQ(batch.names, std::vector<std::string>{"cls"});
    const Value* jobs = batch.rest.Find("jpg");
    ASSERT_NE(jobs, nullptr);
    EXPECT_TRUE(IsGpuJobColumn(*jobs));
    ++n;
  }
  EXPECT_EQ(n, 3u);
}

// A Loader whose workers decode ahead (LoaderOptions::gpu_decoders, here on
// the host): the prefetcher finishes their PendingImages into the same
// tensors, in the layout asked for.
TEST(DevicePrefetcherTest, ImagesTheWorkersDecodedAreFinishedOnTheCpu) {
  testing::TempDir dir;
  for (const std::string spec : {"torchrgb", "rgb8"}) {
    const Pipeline recipe = JpegRecipe(dir, spec);
    const std::vector<torch::Tensor> expected = HostImages(recipe);
    ASSERT_EQ(expected.size(), 3u);
    Loader loader(recipe, {.workers = 1, .gpu_decoders = WorkerDecoders(GpuBatchDecoder::kHost)});
    DevicePrefetcher prefetcher(loader, {.tensor = {.layout = TensorLayout::kNCHW}});
    size_t n = 0;
    for (const TensorBatch& batch : prefetcher) {
      ASSERT_LT(n, expected.size());
      EXPECT_EQ(batch[0].sizes(), (std::vector<int64_t>{4, 3, 16, 20})) << spec;
      // rgb8 is decoded channels last: kNCHW is the permuted view.
      const torch::Tensor want = spec == "rgb8" ? expected[n].permute({0, 3, 1, 2}) : expected[n];
      EXPECT_TRUE(torch::equal(batch[0], want)) << spec << " batch " << n;
      EXPECT_EQ(batch[1].size(0), 4);
      ++n;
    }
    EXPECT_EQ(n, 3u) << spec;
  }
}

TEST(DevicePrefetcherTest, PendingImagesToTensorRefusesAnotherDevice) {
  testing::TempDir dir;
  const Pipeline recipe = JpegRecipe(dir);
  const std::vector<torch::Tensor> expected = HostImages(recipe);
  const std::optional<Sample> batch =
      FirstJpegBatch(recipe, WorkerDecoders(GpuBatchDecoder::kHost));
  ASSERT_TRUE(batch.has_value());
  PendingImages* pending = AsPendingImages((*batch)[0].second);
  ASSERT_NE(pending, nullptr);
  EXPECT_TRUE(torch::equal(PendingImagesToTensor(*pending, torch::kCPU), expected[0]));
  // Refused before "cuda" is resolved: the same error with or without a GPU.
  for (const torch::Device& device :
       {torch::Device(torch::kCUDA), torch::Device(torch::kCUDA, 0)}) {
    try {
      PendingImagesToTensor(*pending, device);
      ADD_FAILURE() << "no ValueError for " << device;
    } catch (const c10::ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("PendingImagesToTensor: images decoded on the host, not yet "
                                      "finished into a batch, the tensor is for " +
                                      device.str()));
    }
  }
}

TEST(DevicePrefetcherTest, ToTensorOfPendingImagesIsTypeErrorSayingWhatFinishesThem) {
  testing::TempDir dir;
  const std::optional<Sample> batch =
      FirstJpegBatch(JpegRecipe(dir), WorkerDecoders(GpuBatchDecoder::kHost));
  ASSERT_TRUE(batch.has_value());
  try {
    ToTensor(*batch, (*batch)[0].first);
    ADD_FAILURE() << "no TypeError";
  } catch (const c10::TypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the value is images decoded on the host, not yet finished "
                                    "into a batch, with no tensor form of its own "
                                    "(DevicePrefetcher finishes it into a tensor)"));
  }
}

// On a GPU the prefetcher decodes the jobs there, or finishes the images the
// workers decoded there (LoaderOptions::gpu_decoders): within nvJPEG's +-2 of
// the host decoder's pixels either way.
TEST(DevicePrefetcherTest, GpuJobsOnCudaAreDecodedOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::TempDir dir;
  const Pipeline recipe = JpegRecipe(dir);
  const std::vector<torch::Tensor> expected = HostImages(recipe);
  for (const bool in_workers : {false, true}) {
    const std::shared_ptr<GpuWorkerDecoders> decoders = in_workers ? WorkerDecoders(0) : nullptr;
    Loader loader(recipe, {.workers = 1, .gpu_decoders = decoders});
    DevicePrefetcher prefetcher(loader, {.device = torch::Device(torch::kCUDA, 0)});
    size_t n = 0;
    for (const TensorBatch& batch : prefetcher) {
      ASSERT_LT(n, expected.size());
      EXPECT_TRUE(batch[0].is_cuda());
      const double worst = (batch[0].cpu() - expected[n]).abs().max().item<double>();
      // +-2 of 255 in a sample, over ImageNet's smallest std.
      EXPECT_LE(worst, 2.0 / 255 / 0.224 + 1e-5) << "batch " << n << ", in workers " << in_workers;
      ++n;
    }
    EXPECT_EQ(n, 3u);
    if (!in_workers) continue;
    EXPECT_EQ(decoders->stats().images, 12);
    // A CUDA build without nvJPEG decodes them with the CPU decoder.
    const bool nvjpeg = decoders->decoder().rfind("nvjpeg", 0) == 0;
    EXPECT_EQ(decoders->stats().nvjpeg_images, nvjpeg ? 12 : 0) << decoders->decoder();
  }
}

}  // namespace
}  // namespace wds
