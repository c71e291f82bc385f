// Tests for collation (Collate) and the Batched stage: every collation rule
// and error, padding and lengths, partial batches, dynamic budgets, handlers
// and pool use.
#include "wds/batch/batch.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/output_slots.h"
#include "batch/collate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/decode/npy.h"
#include "wds/internal/base/worker_wiring.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::wds::testing::Drain;
using ::wds::testing::MakeTar;
using ::wds::testing::TarEntry;
using ::wds::testing::TempDir;
using ::wds::testing::VectorSource;

constexpr char kUrl[] = "mem/shard-000.tar";

// Field is one (name, value) of a test sample.
using Fields = std::vector<std::pair<std::string, Value>>;

Sample Dict(const std::string& key, Fields fields) {
  Sample s;
  s.Append(std::string(kKeyField), key);
  s.Append(std::string(kUrlField), std::string(kUrl));
  for (auto& [name, value] : fields) s.Append(name, std::move(value));
  return s;
}

Sample Tuple(Fields fields) {
  Sample s;
  for (auto& [name, value] : fields) s.Append(name, std::move(value));
  s.set_is_tuple(true);
  return s;
}

template <typename T>
Array MakeArray(DType dtype, std::vector<int64_t> shape, std::vector<T> values) {
  Array a = Array::Allocate(dtype, std::move(shape));
  EXPECT_EQ(a.nbytes(), values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(a.mutable_data<T>(), values.data(), a.nbytes());
  return a;
}

template <typename T>
std::vector<T> Values(const Array& a) {
  const T* p = a.data_as<T>();
  return std::vector<T>(p, p + a.num_elements());
}

absl::StatusOr<Batch> CollateWith(std::vector<Sample> samples, BatchOptions options = {}) {
  BufferPool pool;
  return Collate(samples, options, pool);
}

void ExpectInvalid(const absl::StatusOr<Batch>& batch, const std::string& message) {
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << batch.status();
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr(message));
}

// ------------------------------------------------------------- numbers

TEST(CollateTest, IntegersBecomeInt64Array) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"cls", int64_t{3}}}), Dict("b", {{"cls", int64_t{-7}}}),
                   Dict("c", {{"cls", int64_t{1} << 40}})});
  ASSERT_TRUE(b.ok()) << b.status();
  const Array* cls = b->GetArray("cls");
  ASSERT_NE(cls, nullptr);
  EXPECT_EQ(cls->dtype, DType::kInt64);
  EXPECT_THAT(cls->shape, ElementsAre(3));
  EXPECT_THAT(Values<int64_t>(*cls), ElementsAre(3, -7, int64_t{1} << 40));
}

TEST(CollateTest, FloatsBecomeFloat64Array) {
  absl::StatusOr<Batch> b = CollateWith({Dict("a", {{"w", 0.25}}), Dict("b", {{"w", -1.5}})});
  ASSERT_TRUE(b.ok()) << b.status();
  const Array* w = b->GetArray("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kFloat64);
  EXPECT_THAT(Values<double>(*w), ElementsAre(0.25, -1.5));
}

TEST(CollateTest, MixedIntegersAndFloatsPromoteToFloat64) {
  absl::StatusOr<Batch> b = CollateWith({Dict("a", {{"w", int64_t{2}}}), Dict("b", {{"w", 0.5}})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->GetArray("w")->dtype, DType::kFloat64);
  EXPECT_THAT(Values<double>(*b->GetArray("w")), ElementsAre(2.0, 0.5));
}

// ------------------------------------------------------ texts and bytes

TEST(CollateTest, TextsBecomeTextListIncludingKeyAndUrl) {
  absl::StatusOr<Batch> b = CollateWith(
      {Dict("a", {{"txt", std::string("hello")}}), Dict("b", {{"txt", std::string("")}})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(std::get<TextList>(*b->Find("__key__")), ElementsAre("a", "b"));
  EXPECT_THAT(std::get<TextList>(*b->Find("__url__")), ElementsAre(kUrl, kUrl));
  EXPECT_THAT(std::get<TextList>(*b->Find("txt")), ElementsAre("hello", ""));
}

TEST(CollateTest, BytesBecomeBytesListSharingStorage) {
  Buffer x = Buffer::Copy("xx"), y = Buffer::Copy("yyy");
  absl::StatusOr<Batch> b = CollateWith({Dict("a", {{"bin", x}}), Dict("b", {{"bin", y}})});
  ASSERT_TRUE(b.ok()) << b.status();
  const BytesList& list = std::get<BytesList>(*b->Find("bin"));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].data(), x.data());
  EXPECT_EQ(list[1].view(), "yyy");
}

// -------------------------------------------------------------- arrays

TEST(CollateTest, EqualShapeArraysStackContiguously) {
  absl::StatusOr<Batch> b = CollateWith(
      {Dict("a", {{"img", MakeArray<uint8_t>(DType::kUInt8, {2, 3}, {1, 2, 3, 4, 5, 6})}}),
       Dict("b", {{"img", MakeArray<uint8_t>(DType::kUInt8, {2, 3}, {7, 8, 9, 10, 11, 12})}})});
  ASSERT_TRUE(b.ok()) << b.status();
  const Array* img = b->GetArray("img");
  ASSERT_NE(img, nullptr);
  EXPECT_EQ(img->dtype, DType::kUInt8);
  EXPECT_THAT(img->shape, ElementsAre(2, 2, 3));
  EXPECT_THAT(Values<uint8_t>(*img), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  EXPECT_EQ(img->data.size(), 12u);
}

TEST(CollateTest, ZeroDimensionalArraysStackToOneDimension) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"v", MakeArray<float>(DType::kFloat32, {}, {1.5f})}}),
                   Dict("b", {{"v", MakeArray<float>(DType::kFloat32, {}, {-2.0f})}})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(b->GetArray("v")->shape, ElementsAre(2));
  EXPECT_THAT(Values<float>(*b->GetArray("v")), ElementsAre(1.5f, -2.0f));
}

TEST(CollateTest, EmptyArraysStack) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"v", MakeArray<float>(DType::kFloat32, {0, 3}, {})}}),
                   Dict("b", {{"v", MakeArray<float>(DType::kFloat32, {0, 3}, {})}})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(b->GetArray("v")->shape, ElementsAre(2, 0, 3));
}

TEST(CollateTest, DifferentShapesAreInvalidArgumentNamingFieldAndShapes) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"feat", MakeArray<float>(DType::kFloat32, {2}, {1, 2})}}),
                   Dict("b", {{"feat", MakeArray<float>(DType::kFloat32, {3}, {1, 2, 3})}})}),
      std::string(kUrl) +
          ": key b: batched: field feat: shape [3] differs from [2] of the batch's first sample "
          "(set BatchOptions.pad to pad)");
}

TEST(CollateTest, DifferentDTypesAreInvalidArgument) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"feat", MakeArray<float>(DType::kFloat32, {1}, {1})}}),
                   Dict("b", {{"feat", MakeArray<int32_t>(DType::kInt32, {1}, {1})}})}),
      "key b: batched: field feat: dtype int32 differs from float32 of the batch's first sample");
}

TEST(CollateTest, DifferentKindsAreInvalidArgument) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"cls", int64_t{1}}}), Dict("b", {{"cls", std::string("one")}})}),
      "key b: batched: field cls: holds text but the batch's first sample holds an "
      "integer");
  ExpectInvalid(CollateWith({Dict("a", {{"x", std::string("t")}}), Dict("b", {{"x", int64_t{1}}})}),
                "key b: batched: field x: holds an integer but the batch's first sample holds "
                "text");
  ExpectInvalid(CollateWith({Dict("a", {{"x", MakeArray<uint8_t>(DType::kUInt8, {1}, {1})}}),
                             Dict("b", {{"x", Buffer::Copy("1")}})}),
                "key b: batched: field x: holds bytes but the batch's first sample holds an array");
}

TEST(CollateTest, ListsCannotBeCollatedAgain) {
  ExpectInvalid(CollateWith({Dict("a", {{"x", TextList{"p"}}}), Dict("b", {{"x", TextList{"q"}}})}),
                "key a: batched: field x: holds a list of texts, which cannot be collated again");
}

// --------------------------------------------------------- field sets

TEST(CollateTest, DictFieldsFollowTheFirstSamplesOrder) {
  Sample a = Dict("a", {{"x", int64_t{1}}, {"y", std::string("p")}});
  Sample b;
  b.Append("y", std::string("q"));
  b.Append("x", int64_t{2});
  b.Append(std::string(kUrlField), std::string(kUrl));
  b.Append(std::string(kKeyField), std::string("b"));
  absl::StatusOr<Batch> batch = CollateWith({a, b});
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<std::string> names;
  for (const Sample::Field& f : *batch) names.push_back(f.first);
  EXPECT_THAT(names, ElementsAre("__key__", "__url__", "x", "y"));
  EXPECT_FALSE(batch->is_tuple());
  EXPECT_THAT(Values<int64_t>(*batch->GetArray("x")), ElementsAre(1, 2));
  EXPECT_THAT(std::get<TextList>(*batch->Find("y")), ElementsAre("p", "q"));
}

TEST(CollateTest, MissingFieldIsInvalidArgument) {
  ExpectInvalid(CollateWith({Dict("a", {{"x", int64_t{1}}, {"y", int64_t{2}}}),
                             Dict("b", {{"x", int64_t{1}}})}),
                std::string(kUrl) +
                    ": key b: batched: field y: missing; the batch's first sample (" + kUrl +
                    ": key a) has it; fields here: __key__, __url__, x");
}

TEST(CollateTest, ExtraFieldIsInvalidArgument) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"x", int64_t{1}}}), Dict("b", {{"x", int64_t{1}}, {"z", 0.5}})}),
      "key b: batched: field z: not in the batch's first sample (" + std::string(kUrl) +
          ": key a)");
}

TEST(CollateTest, TuplesCollatePositionWise) {
  absl::StatusOr<Batch> b = CollateWith(
      {Tuple({{"jpg;png", MakeArray<uint8_t>(DType::kUInt8, {2}, {1, 2})}, {"cls", int64_t{0}}}),
       Tuple({{"jpg;png", MakeArray<uint8_t>(DType::kUInt8, {2}, {3, 4})}, {"cls", int64_t{9}}})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->is_tuple());
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[0].first, "jpg;png");
  EXPECT_THAT(Values<uint8_t>(std::get<Array>((*b)[0].second)), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Values<int64_t>(std::get<Array>((*b)[1].second)), ElementsAre(0, 9));
}

TEST(CollateTest, TupleSizeMismatchIsInvalidArgument) {
  ExpectInvalid(
      CollateWith({Tuple({{"a", int64_t{1}}, {"b", int64_t{2}}}), Tuple({{"a", int64_t{1}}})}),
      "sample 1 of the batch: batched: a tuple of 1 values in a batch of 2-tuples");
}

TEST(CollateTest, TupleAndDictMixIsInvalidArgument) {
  ExpectInvalid(CollateWith({Dict("a", {{"x", int64_t{1}}}), Tuple({{"x", int64_t{1}}})}),
                "sample 1 of the batch: batched: a tuple in a batch of dicts");
}

TEST(CollateTest, ArraysComeFromThePoolAndReturnToIt) {
  BufferPool pool;
  std::vector<Sample> samples = {
      Dict("a", {{"img", MakeArray<uint8_t>(DType::kUInt8, {100}, std::vector<uint8_t>(100, 1))},
                 {"cls", int64_t{1}}}),
      Dict("b", {{"img", MakeArray<uint8_t>(DType::kUInt8, {100}, std::vector<uint8_t>(100, 2))},
                 {"cls", int64_t{2}}})};
  const uint8_t* first_img;
  {
    absl::StatusOr<Batch> b = Collate(samples, {}, pool);
    ASSERT_TRUE(b.ok());
    first_img = b->GetArray("img")->data.data();
    EXPECT_EQ(pool.stats().allocations, 2);
    EXPECT_EQ(pool.stats().live_bytes, 2u * 4096);
  }
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  absl::StatusOr<Batch> again = Collate(samples, {}, pool);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(pool.stats().allocations, 2);
  EXPECT_EQ(pool.stats().reuses, 2);
  // cls was released last, so its block comes first; img gets the other one.
  const uint8_t* again_img = again->GetArray("img")->data.data();
  const uint8_t* again_cls = again->GetArray("cls")->data.data();
  EXPECT_TRUE(again_img == first_img || again_cls == first_img);
}

// ------------------------------------------------------------- padding

BatchOptions Pad(double value = 0) {
  BatchOptions options;
  options.pad = true;
  options.pad_value = value;
  return options;
}

TEST(PadTest, OneDimensionalSequencesPadToTheLongest) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"ids", MakeArray<int32_t>(DType::kInt32, {2}, {1, 2})}}),
                   Dict("b", {{"ids", MakeArray<int32_t>(DType::kInt32, {4}, {3, 4, 5, 6})}}),
                   Dict("c", {{"ids", MakeArray<int32_t>(DType::kInt32, {1}, {7})}})},
                  Pad(-1));
  ASSERT_TRUE(b.ok()) << b.status();
  const Array* ids = b->GetArray("ids");
  EXPECT_THAT(ids->shape, ElementsAre(3, 4));
  EXPECT_THAT(Values<int32_t>(*ids), ElementsAre(1, 2, -1, -1, 3, 4, 5, 6, 7, -1, -1, -1));
  const Array* lengths = b->GetArray("ids.lengths");
  ASSERT_NE(lengths, nullptr);
  EXPECT_EQ(lengths->dtype, DType::kInt64);
  EXPECT_THAT(lengths->shape, ElementsAre(3, 1));
  EXPECT_THAT(Values<int64_t>(*lengths), ElementsAre(2, 4, 1));
}

TEST(PadTest, TwoDimensionalArraysPadEveryDimension) {
  absl::StatusOr<Batch> b = CollateWith(
      {Dict("a", {{"m", MakeArray<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6})}}),
       Dict("b", {{"m", MakeArray<float>(DType::kFloat32, {3, 1}, {7, 8, 9})}})},
      Pad());
  ASSERT_TRUE(b.ok()) << b.status();
  const Array* m = b->GetArray("m");
  EXPECT_THAT(m->shape, ElementsAre(2, 3, 3));
  EXPECT_THAT(Values<float>(*m), ElementsAreArray(std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0, 0,  //
                                                                     7, 0, 0, 8, 0, 0, 9, 0, 0}));
  EXPECT_THAT(Values<int64_t>(*b->GetArray("m.lengths")), ElementsAre(2, 3, 3, 1));
}

TEST(PadTest, EmptyArrayPadsToAllPadValue) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"v", MakeArray<uint16_t>(DType::kUInt16, {0}, {})}}),
                   Dict("b", {{"v", MakeArray<uint16_t>(DType::kUInt16, {2}, {5, 6})}})},
                  Pad(9));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(Values<uint16_t>(*b->GetArray("v")), ElementsAre(9, 9, 5, 6));
  EXPECT_THAT(Values<int64_t>(*b->GetArray("v.lengths")), ElementsAre(0, 2));
}

TEST(PadTest, LengthsFieldsComeAfterAllFieldsEvenWhenShapesAgree) {
  absl::StatusOr<Batch> b =
      CollateWith({Dict("a", {{"x", MakeArray<uint8_t>(DType::kUInt8, {1}, {1})},
                              {"cls", int64_t{1}},
                              {"y", MakeArray<uint8_t>(DType::kUInt8, {2}, {1, 1})}}),
                   Dict("b", {{"x", MakeArray<uint8_t>(DType::kUInt8, {1}, {2})},
                              {"cls", int64_t{2}},
                              {"y", MakeArray<uint8_t>(DType::kUInt8, {2}, {2, 2})}})},
                  Pad());
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<std::string> names;
  for (const Sample::Field& f : *b) names.push_back(f.first);
  EXPECT_THAT(names, ElementsAre("__key__", "__url__", "x", "cls", "y", "x.lengths", "y.lengths"));
  EXPECT_THAT(Values<int64_t>(*b->GetArray("y.lengths")), ElementsAre(2, 2));
}

TEST(PadTest, TuplesGetLengthsAsExtraPositions) {
  absl::StatusOr<Batch> b = CollateWith(
      {Tuple({{"npy", MakeArray<int8_t>(DType::kInt8, {1}, {1})}, {"cls", int64_t{0}}}),
       Tuple({{"npy", MakeArray<int8_t>(DType::kInt8, {3}, {1, 2, 3})}, {"cls", int64_t{1}}})},
      Pad());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->is_tuple());
  ASSERT_EQ(b->size(), 3u);
  EXPECT_EQ((*b)[2].first, "npy.lengths");
  EXPECT_THAT(Values<int64_t>(std::get<Array>((*b)[2].second)), ElementsAre(1, 3));
  EXPECT_THAT(Values<int8_t>(std::get<Array>((*b)[0].second)), ElementsAre(1, 0, 0, 1, 2, 3));
}

TEST(PadTest, DifferentRanksAreStillAnError) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"m", MakeArray<float>(DType::kFloat32, {2}, {1, 2})}}),
                   Dict("b", {{"m", MakeArray<float>(DType::kFloat32, {1, 2}, {1, 2})}})},
                  Pad()),
      "key b: batched: field m: shape [1, 2] differs from [2] of the batch's first sample "
      "(padding needs equal ranks)");
}

TEST(PadTest, PadValueMustFitTheDType) {
  auto bytes = [] {
    return std::vector<Sample>{Dict("a", {{"v", MakeArray<uint8_t>(DType::kUInt8, {1}, {1})}}),
                               Dict("b", {{"v", MakeArray<uint8_t>(DType::kUInt8, {2}, {1, 2})}})};
  };
  ExpectInvalid(CollateWith(bytes(), Pad(-1)),
                "key a: batched: field v: pad_value -1.000000 does not fit dtype uint8");
  ExpectInvalid(CollateWith(bytes(), Pad(256)), "pad_value 256.000000 does not fit dtype uint8");
  ExpectInvalid(CollateWith(bytes(), Pad(0.5)), "pad_value 0.500000 does not fit dtype uint8");
  EXPECT_TRUE(CollateWith(bytes(), Pad(255)).ok());
}

TEST(PadTest, Float16PadValueIsConverted) {
  const uint16_t one = 0x3c00;  // 1.0 as float16
  for (const auto& [value, bits] : std::vector<std::pair<double, uint16_t>>{
           {1.5, 0x3e00}, {-2.0, 0xc000}, {65504.0, 0x7bff}, {1e6, 0x7c00}, {1e-7, 0x0002}}) {
    absl::StatusOr<Batch> b =
        CollateWith({Dict("a", {{"h", MakeArray<uint16_t>(DType::kFloat16, {1}, {one})}}),
                     Dict("b", {{"h", MakeArray<uint16_t>(DType::kFloat16, {2}, {one, one})}})},
                    Pad(value));
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_THAT(Values<uint16_t>(*b->GetArray("h")), ElementsAre(one, bits, one, one)) << value;
  }
}

TEST(PadTest, LengthsNameClashIsInvalidArgument) {
  ExpectInvalid(
      CollateWith({Dict("a", {{"v", MakeArray<uint8_t>(DType::kUInt8, {1}, {1})},
                              {"v.lengths", int64_t{1}}})},
                  Pad()),
      "key a: batched: field v: padding adds the field v.lengths, which the sample already has");
}

// ------------------------------------------------------- Batched stage

std::vector<Sample> Numbered(int n) {
  std::vector<Sample> samples;
  for (int i = 0; i < n; ++i) samples.push_back(Dict(std::to_string(i), {{"cls", int64_t{i}}}));
  return samples;
}

// Sizes drains a pipeline and lists each batch's __key__ list.
std::vector<std::vector<std::string>> BatchKeys(const Pipeline& pipeline) {
  std::unique_ptr<SampleStream> stream = pipeline.Open({});
  absl::StatusOr<std::vector<Sample>> batches = Drain(*stream);
  EXPECT_TRUE(batches.ok()) << batches.status();
  std::vector<std::vector<std::string>> out;
  if (!batches.ok()) return out;
  for (const Sample& b : *batches) out.push_back(std::get<TextList>(*b.Find("__key__")));
  return out;
}

using Keys = std::vector<std::vector<std::string>>;

TEST(BatchedTest, LastPartialBatchIsYieldedByDefault) {
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(5))).Batched(2)),
            (Keys{{"0", "1"}, {"2", "3"}, {"4"}}));
}

TEST(BatchedTest, PartialFalseDropsTheLastSmallerBatch) {
  BatchOptions options;
  options.partial = false;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(5))).Batched(2, options)),
            (Keys{{"0", "1"}, {"2", "3"}}));
}

TEST(BatchedTest, ExactMultipleYieldsNoEmptyBatch) {
  BatchOptions options;
  options.partial = false;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(4))).Batched(2, options)),
            (Keys{{"0", "1"}, {"2", "3"}}));
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(4))).Batched(2)),
            (Keys{{"0", "1"}, {"2", "3"}}));
}

TEST(BatchedTest, EmptyStreamYieldsNothing) {
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource({})).Batched(3)), Keys{});
}

TEST(BatchedTest, BatchOfOneHasLengthOneArrays) {
  std::unique_ptr<SampleStream> s = Pipeline(VectorSource(Numbered(1))).Batched(1).Open({});
  SampleResult b = s->Next();
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_THAT((*b)->GetArray("cls")->shape, ElementsAre(1));
}

TEST(BatchedTest, InvalidOptionsAreInvalidArgument) {
  BatchOptions negative;
  negative.max_bytes = 0;
  for (const auto& [pipeline, message] : std::vector<std::pair<Pipeline, std::string>>{
           {Pipeline(VectorSource(Numbered(2))).Batched(0),
            "batched: batch_size must be >= 1 unless max_elements or max_bytes is set"},
           {Pipeline(VectorSource(Numbered(2))).Batched(2, negative),
            "batched: max_bytes must be >= 1, got 0"}}) {
    SampleResult r = pipeline.Open({})->Next();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(message));
  }
}

std::vector<Sample> Sequences(const std::vector<int>& lengths) {
  std::vector<Sample> samples;
  for (size_t i = 0; i < lengths.size(); ++i) {
    samples.push_back(Dict(std::to_string(i),
                           {{"seq", MakeArray<float>(DType::kFloat32, {lengths[i], 2},
                                                     std::vector<float>(2 * lengths[i], 1.0f))}}));
  }
  return samples;
}

TEST(DynamicBatchTest, MaxElementsWithEqualShapes) {
  BatchOptions options;
  options.max_elements = 20;  // each sample holds 3 x 2 = 6 elements
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({3, 3, 3, 3, 3, 3, 3}))).Batched(0, options)),
            (Keys{{"0", "1", "2"}, {"3", "4", "5"}, {"6"}}));
}

TEST(DynamicBatchTest, ExactlyAtTheBudgetFits) {
  BatchOptions options;
  options.max_elements = 18;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({3, 3, 3, 3}))).Batched(0, options)),
            (Keys{{"0", "1", "2"}, {"3"}}));
}

TEST(DynamicBatchTest, PaddedCostCountsTheLongestSample) {
  BatchOptions options = Pad();
  options.max_elements = 16;
  // Padded costs: {2} 4; {2,2} 8; {2,2,5} 3*5*2 = 30 > 16 -> close; {5} 10;
  // {5,1} 20 > 16 -> close; {1,1} 4; {1,1,4} 24 > 16 -> close; {4} 8.
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({2, 2, 5, 1, 1, 4}))).Batched(0, options)),
            (Keys{{"0", "1"}, {"2"}, {"3", "4"}, {"5"}}));
}

TEST(DynamicBatchTest, SampleOverTheBudgetFormsABatchOfOne) {
  BatchOptions options = Pad();
  options.max_elements = 5;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({1, 10, 1, 1}))).Batched(0, options)),
            (Keys{{"0"}, {"1"}, {"2", "3"}}));
}

TEST(DynamicBatchTest, BatchSizeStillCapsTheCount) {
  BatchOptions options;
  options.max_elements = 1000;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({1, 1, 1, 1, 1}))).Batched(2, options)),
            (Keys{{"0", "1"}, {"2", "3"}, {"4"}}));
}

TEST(DynamicBatchTest, MaxBytesCountsTextsAndNumbers) {
  // Each sample: __key__ (1 byte), __url__ (17 bytes), cls (8 bytes) = 26.
  BatchOptions options;
  options.max_bytes = 60;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(5))).Batched(0, options)),
            (Keys{{"0", "1"}, {"2", "3"}, {"4"}}));
  options.max_bytes = 78;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Numbered(5))).Batched(0, options)),
            (Keys{{"0", "1", "2"}, {"3", "4"}}));
}

TEST(DynamicBatchTest, MaxBytesCountsPaddedArrayStorage) {
  BatchOptions options = Pad();
  options.max_bytes = 2 * 26 + 2 * 3 * 2 * 4;  // two samples of length 3, float32 x 2
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({3, 3, 3}))).Batched(0, options)),
            (Keys{{"0", "1"}, {"2"}}));
}

TEST(DynamicBatchTest, BudgetClosedBatchesAreCompleteForPartialFalse) {
  BatchOptions options;
  options.max_elements = 12;
  options.partial = false;
  EXPECT_EQ(BatchKeys(Pipeline(VectorSource(Sequences({3, 3, 3, 3, 3}))).Batched(0, options)),
            (Keys{{"0", "1"}, {"2", "3"}}));
}

// ----------------------------------------------------- handlers, errors

std::vector<Sample> WithBadBatch() {
  std::vector<Sample> samples = Numbered(6);
  samples[3].Set("cls", std::string("three"));  // breaks the second batch of 2
  return samples;
}

struct HandlerRun {
  Keys keys;
  absl::Status end;
  int64_t counted;
  std::vector<std::string> warnings;
};

HandlerRun RunWithHandler(Handler handler) {
  BatchOptions options;
  options.handler = handler;
  HandlerRun run;
  WorkerContext ctx;
  ctx.errors = std::make_shared<ErrorCounters>();
  ctx.warn = [&run](std::string_view w) { run.warnings.emplace_back(w); };
  std::unique_ptr<SampleStream> s =
      Pipeline(VectorSource(WithBadBatch())).Batched(2, options).Open(ctx);
  SampleResult item = s->Next();
  for (; item.ok() && item->has_value(); item = s->Next()) {
    run.keys.push_back(std::get<TextList>(*(*item)->Find("__key__")));
  }
  run.end = item.status();
  SampleResult again = s->Next();
  EXPECT_EQ(again.status(), run.end);
  run.counted = ctx.errors->Count("batched", absl::StatusCode::kInvalidArgument);
  return run;
}

TEST(BatchedHandlerTest, ReraiseEndsWithStickyError) {
  HandlerRun r = RunWithHandler(Handler::kReraise);
  EXPECT_EQ(r.keys, (Keys{{"0", "1"}}));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.end.message()),
              HasSubstr(std::string(kUrl) + ": key 3: batched: field cls: holds text but the "
                                            "batch's first sample holds an integer"));
  EXPECT_EQ(r.counted, 1);
}

TEST(BatchedHandlerTest, WarnAndContinueDropsTheWholeBatch) {
  HandlerRun r = RunWithHandler(Handler::kWarnAndContinue);
  EXPECT_EQ(r.keys, (Keys{{"0", "1"}, {"4", "5"}}));
  EXPECT_TRUE(r.end.ok());
  EXPECT_EQ(r.counted, 1);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("key 3: batched: field cls"));
}

TEST(BatchedHandlerTest, IgnoreAndStopEndsCleanly) {
  HandlerRun r = RunWithHandler(Handler::kIgnoreAndStop);
  EXPECT_EQ(r.keys, (Keys{{"0", "1"}}));
  EXPECT_TRUE(r.end.ok());
  EXPECT_EQ(r.counted, 1);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(BatchedHandlerTest, UpstreamErrorPassesThrough) {
  const absl::Status error = absl::DataLossError("upstream broke");
  Pipeline p =
      Pipeline(VectorSource(Numbered(3)))
          .Then([error](const StreamFactory&, const WorkerContext&) { return ErrorStream(error); })
          .Batched(2);
  std::unique_ptr<SampleStream> s = p.Open({});
  EXPECT_EQ(s->Next().status(), error);
  EXPECT_EQ(s->Next().status(), error);
}

// ------------------------------------------------------------- pooling

TEST(BatchedPoolTest, UsesTheContextPoolWithNoAllocationInSteadyState) {
  std::vector<Sample> samples;
  for (int i = 0; i < 400; ++i) {
    samples.push_back(
        Dict(std::to_string(i),
             {{"img", MakeArray<uint8_t>(DType::kUInt8, {8, 8, 3}, std::vector<uint8_t>(192, 7))},
              {"cls", int64_t{i}}}));
  }
  WorkerContext ctx;
  Rewire(ctx).pool = std::make_shared<BufferPool>();
  std::unique_ptr<SampleStream> s = Pipeline(VectorSource(samples)).Batched(4).Open(ctx);
  int batches = 0;
  while (true) {
    SampleResult b = s->Next();
    ASSERT_TRUE(b.ok());
    if (!b->has_value()) break;
    ++batches;
  }
  EXPECT_EQ(batches, 100);
  const BufferPoolStats stats = WiringOf(ctx).pool->stats();
  EXPECT_EQ(stats.allocations, 2);  // one block for img, one for cls
  EXPECT_EQ(stats.reuses, 198);
  EXPECT_EQ(stats.live_bytes, 0u);
}

// ------------------------------------------------------------ end to end

TEST(BatchedEndToEndTest, NpyFromATarDecodesAndPads) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 3; ++i) {
    Array a = Array::Allocate(DType::kInt16, {i + 1, 2});
    for (int k = 0; k < 2 * (i + 1); ++k)
      a.mutable_data<int16_t>()[k] = static_cast<int16_t>(10 * i + k);
    entries.push_back({"s" + std::to_string(i) + ".feat.npy", EncodeNpy(a)});
    entries.push_back({"s" + std::to_string(i) + ".cls", std::to_string(i)});
  }
  TempDir dir;
  const std::string path = dir.Write("shard.tar", MakeTar(entries));
  absl::StatusOr<Pipeline> ds = WebDataset(std::vector<std::string>{path});
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::unique_ptr<SampleStream> s =
      ds->Decode().ToTuple({"feat.npy", "cls"}).Batched(8, Pad(-1)).Open({});
  absl::StatusOr<std::vector<Sample>> batches = Drain(*s);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 1u);
  const Batch& b = (*batches)[0];
  ASSERT_TRUE(b.is_tuple());
  ASSERT_EQ(b.size(), 3u);
  const Array& feat = std::get<Array>(b[0].second);
  EXPECT_EQ(feat.dtype, DType::kInt16);
  EXPECT_THAT(feat.shape, ElementsAre(3, 3, 2));
  EXPECT_THAT(Values<int16_t>(feat), ElementsAre(0, 1, -1, -1, -1, -1,    //
                                                 10, 11, 12, 13, -1, -1,  //
                                                 20, 21, 22, 23, 24, 25));
  EXPECT_THAT(Values<int64_t>(std::get<Array>(b[1].second)), ElementsAre(0, 1, 2));
  EXPECT_EQ(b[2].first, "feat.npy.lengths");
  EXPECT_THAT(Values<int64_t>(std::get<Array>(b[2].second)), ElementsAre(1, 2, 2, 2, 3, 2));
}

// ------------------------------------------- decoding in place (OutputSlots)

// OfferLog records what a SlotDecoder was offered, per decoded sample.
struct OfferLog {
  bool had_slots = false;              // the worker's wiring had slots at least once
  std::vector<const uint8_t*> offers;  // the storage offered; null when declined
};

// SlotDecoder decodes a "raw" field into a uint8 [n] array of its bytes,
// written into the storage the worker's output slots offer when they offer
// any (as the library's image decoder does).
FieldDecoder SlotDecoder(std::shared_ptr<OfferLog> log) {
  return [log](std::string_view field, const Buffer& data,
               DecodeContext& ctx) -> absl::StatusOr<std::optional<Value>> {
    if (field != "raw") return std::nullopt;
    Array a{DType::kUInt8, {static_cast<int64_t>(data.size())}, Buffer()};
    OutputSlots* slots = ctx.worker != nullptr ? WiringOf(*ctx.worker).output_slots.get() : nullptr;
    if (slots != nullptr) {
      log->had_slots = true;
      a.data = slots->Offer(field, a.dtype, a.shape);
      log->offers.push_back(a.data.empty() ? nullptr : a.data.data());
    }
    if (a.data.empty()) a = Array::Allocate(DType::kUInt8, a.shape);
    std::memcpy(a.mutable_data<uint8_t>(), data.data(), data.size());
    return Value(std::move(a));
  };
}

// Raw makes sample i with a "raw" field of `size` bytes i, i + 1, ...
std::vector<Sample> Raw(int n, int size = 3) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    std::string bytes;
    for (int k = 0; k < size; ++k) bytes.push_back(static_cast<char>(i + k));
    out.push_back(Dict(std::to_string(i), {{"raw", Buffer::Copy(bytes)}}));
  }
  return out;
}

absl::StatusOr<std::vector<Sample>> DrainPipeline(const Pipeline& pipeline) {
  std::unique_ptr<SampleStream> stream = pipeline.Open({});
  return Drain(*stream);
}

const Array& RawColumn(const Sample& batch) { return std::get<Array>(*batch.Find("raw")); }

TEST(BatchedInPlaceTest, DecodedArraysAreWrittenIntoTheBatch) {
  auto log = std::make_shared<OfferLog>();
  absl::StatusOr<std::vector<Sample>> batches =
      DrainPipeline(Pipeline(VectorSource(Raw(5))).Decode({SlotDecoder(log)}).Batched(4));
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 2u);
  ASSERT_EQ(log->offers.size(), 5u);
  for (const uint8_t* offer : log->offers) ASSERT_NE(offer, nullptr);
  // Sample i went to slot i of its batch's block, and the batch is that block.
  const Array& first = RawColumn((*batches)[0]);
  EXPECT_EQ(first.data.data(), log->offers[0]);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(log->offers[i], log->offers[0] + 3 * i);
  EXPECT_THAT(first.shape, ElementsAre(4, 3));
  EXPECT_THAT(Values<uint8_t>(first), ElementsAre(0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5));
  // The partial last batch is the first slot of a block of its own.
  const Array& last = RawColumn((*batches)[1]);
  EXPECT_EQ(last.data.data(), log->offers[4]);
  EXPECT_THAT(last.shape, ElementsAre(1, 3));
  EXPECT_THAT(Values<uint8_t>(last), ElementsAre(4, 5, 6));
}

TEST(BatchedInPlaceTest, SampleDroppedAfterDecodingGivesItsSlotToTheNext) {
  auto log = std::make_shared<OfferLog>();
  Pipeline p = Pipeline(VectorSource(Raw(4)))
                   .Decode({SlotDecoder(log)})
                   .Select([](const Sample& s) { return s.key() != "1"; })
                   .Batched(3);
  absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(p);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 1u);
  ASSERT_EQ(log->offers.size(), 4u);
  EXPECT_EQ(log->offers[2], log->offers[1]);  // sample 2 reuses dropped sample 1's slot
  const Array& raw = RawColumn((*batches)[0]);
  EXPECT_EQ(raw.data.data(), log->offers[0]);
  EXPECT_THAT(Values<uint8_t>(raw), ElementsAre(0, 1, 2, 2, 3, 4, 3, 4, 5));
}

TEST(BatchedInPlaceTest, ShuffleBetweenDecodeAndBatchedStopsOffers) {
  auto log = std::make_shared<OfferLog>();
  Pipeline p = Pipeline(VectorSource(Raw(8)), /*seed=*/3)
                   .Decode({SlotDecoder(log)})
                   .Shuffle(4, 4)
                   .Batched(4);
  absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(p);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 2u);
  // The shuffle buffer holds sample 0 in slot 0 while sample 1 is decoded
  // for the same slot: from then on every offer is declined.
  ASSERT_EQ(log->offers.size(), 8u);
  EXPECT_NE(log->offers[0], nullptr);
  for (size_t i = 1; i < 8; ++i) EXPECT_EQ(log->offers[i], nullptr) << i;
  // The batches are still exact: every sample once, each row its own bytes.
  std::vector<int> seen;
  for (const Sample& b : *batches) {
    const Array& raw = RawColumn(b);
    const TextList& keys = std::get<TextList>(*b.Find("__key__"));
    ASSERT_EQ(raw.shape[0], static_cast<int64_t>(keys.size()));
    for (size_t i = 0; i < keys.size(); ++i) {
      const int k = std::stoi(keys[i]);
      seen.push_back(k);
      const uint8_t* row = raw.data_as<uint8_t>() + 3 * i;
      EXPECT_THAT(std::vector<uint8_t>(row, row + 3), ElementsAre(k, k + 1, k + 2));
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_THAT(seen, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(BatchedInPlaceTest, SampleKeptPastItsBatchStopsOffers) {
  auto log = std::make_shared<OfferLog>();
  auto kept = std::make_shared<std::vector<Sample>>();
  Pipeline p = Pipeline(VectorSource(Raw(4)))
                   .Decode({SlotDecoder(log)})
                   .Map([kept](Sample s) -> absl::StatusOr<Sample> {
                     kept->push_back(s);
                     return s;
                   })
                   .Batched(2);
  absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(p);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 2u);
  ASSERT_EQ(log->offers.size(), 4u);
  EXPECT_NE(log->offers[0], nullptr);
  EXPECT_NE(log->offers[1], nullptr);
  EXPECT_EQ(log->offers[2], nullptr);
  EXPECT_EQ(log->offers[3], nullptr);
  EXPECT_THAT(Values<uint8_t>(RawColumn((*batches)[0])), ElementsAre(0, 1, 2, 1, 2, 3));
  EXPECT_THAT(Values<uint8_t>(RawColumn((*batches)[1])), ElementsAre(2, 3, 4, 3, 4, 5));
  // What the map kept is untouched by the later batches.
  EXPECT_THAT(Values<uint8_t>(std::get<Array>(*(*kept)[1].Find("raw"))), ElementsAre(1, 2, 3));
}

TEST(BatchedInPlaceTest, MapReplacingTheDecodedArraysStopsOffers) {
  auto log = std::make_shared<OfferLog>();
  Pipeline p =
      Pipeline(VectorSource(Raw(6)))
          .Decode({SlotDecoder(log)})
          .Map([](Sample s) -> absl::StatusOr<Sample> {
            const Array& raw = std::get<Array>(*s.Find("raw"));
            s.Set("raw", MakeArray<uint8_t>(DType::kUInt8, {1}, {raw.data_as<uint8_t>()[0]}));
            return s;
          })
          .Batched(2);
  absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(p);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 3u);
  // The first batch's block went unused, so no later batch takes one.
  ASSERT_EQ(log->offers.size(), 6u);
  EXPECT_NE(log->offers[0], nullptr);
  EXPECT_NE(log->offers[1], nullptr);
  for (size_t i = 2; i < 6; ++i) EXPECT_EQ(log->offers[i], nullptr) << i;
  EXPECT_THAT(Values<uint8_t>(RawColumn((*batches)[2])), ElementsAre(4, 5));
}

TEST(BatchedInPlaceTest, OfferForAnotherShapeIsDeclined) {
  std::vector<Sample> samples = Raw(1, 3);
  samples.push_back(Raw(2, 4)[1]);
  auto log = std::make_shared<OfferLog>();
  absl::StatusOr<std::vector<Sample>> batches =
      DrainPipeline(Pipeline(VectorSource(samples)).Decode({SlotDecoder(log)}).Batched(2));
  ASSERT_EQ(log->offers.size(), 2u);
  EXPECT_NE(log->offers[0], nullptr);
  EXPECT_EQ(log->offers[1], nullptr);
  ASSERT_FALSE(batches.ok());
  EXPECT_EQ(batches.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(batches.status().message(),
              HasSubstr("key 1: batched: field raw: shape [4] differs from [3]"));
}

TEST(BatchedInPlaceTest, BudgetsAndPaddingOfferNoSlots) {
  for (BatchOptions options : {BatchOptions{.max_elements = 6}, BatchOptions{.pad = true}}) {
    auto log = std::make_shared<OfferLog>();
    absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(
        Pipeline(VectorSource(Raw(4))).Decode({SlotDecoder(log)}).Batched(2, options));
    ASSERT_TRUE(batches.ok()) << batches.status();
    EXPECT_FALSE(log->had_slots);
    ASSERT_EQ(batches->size(), 2u);
    EXPECT_THAT(Values<uint8_t>(RawColumn((*batches)[1])), ElementsAre(2, 3, 4, 3, 4, 5));
  }
}

TEST(BatchedInPlaceTest, StagesAboveAnotherBatchedGetItsSlotsNotOurs) {
  auto log = std::make_shared<OfferLog>();
  BatchOptions budget{.max_elements = 6};
  absl::StatusOr<std::vector<Sample>> batches = DrainPipeline(Pipeline(VectorSource(Raw(4)))
                                                                  .Decode({SlotDecoder(log)})
                                                                  .Batched(2, budget)
                                                                  .ToTuple({"raw"})
                                                                  .Batched(2));
  ASSERT_TRUE(batches.ok()) << batches.status();
  EXPECT_FALSE(log->had_slots);
  ASSERT_EQ(batches->size(), 1u);
  const Array& raw = std::get<Array>((*batches)[0][0].second);
  EXPECT_THAT(raw.shape, ElementsAre(2, 2, 3));
  EXPECT_THAT(Values<uint8_t>(raw), ElementsAre(0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5));
}

}  // namespace
}  // namespace wds
