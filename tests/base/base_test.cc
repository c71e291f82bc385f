// Tests for the base layer: Buffer, Sample, error handlers, seeding.
#include <optional>
#include <set>

#include "absl/strings/cord.h"
#include "base/handlers.h"
#include "base/split_mix64.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "wds/base/buffer.h"
#include "wds/base/error.h"
#include "wds/base/error_kind.h"
#include "wds/base/random.h"
#include "wds/base/sample.h"

namespace wds {
namespace {

TEST(BufferTest, CopyHoldsBytesAndSliceSharesStorage) {
  Buffer b = Buffer::Copy("hello world");
  EXPECT_EQ(b.view(), "hello world");
  Buffer s = b.Slice(6, 5);
  EXPECT_EQ(s.view(), "world");
  EXPECT_EQ(s.data(), b.data() + 6);
  EXPECT_EQ(b.use_count(), 2);
}

TEST(BufferTest, SliceKeepsStorageAliveAfterParentDrops) {
  Buffer s;
  {
    Buffer b = Buffer::Copy("abcdef");
    s = b.Slice(2, 3);
  }
  EXPECT_EQ(s.view(), "cde");
  EXPECT_EQ(s.use_count(), 1);
}

TEST(BufferTest, EmptyCopyIsEmpty) {
  Buffer b = Buffer::Copy("");
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.view(), "");
}

TEST(SampleTest, KeepsInsertionOrderAndReplacesInPlace) {
  Sample s;
  s.Set("__key__", std::string("k"));
  s.Set("jpg", Buffer::Copy("J"));
  s.Set("cls", int64_t{3});
  s.Set("jpg", Buffer::Copy("J2"));
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].first, "__key__");
  EXPECT_EQ(s[1].first, "jpg");
  EXPECT_EQ(s.GetBytes("jpg")->view(), "J2");
  EXPECT_EQ(s.GetInt("cls"), 3);
  EXPECT_EQ(s.key(), "k");
  EXPECT_EQ(s.url(), "");
}

TEST(SampleTest, TypedLookupsRejectOtherTypes) {
  Sample s;
  s.Set("cls", int64_t{1});
  EXPECT_EQ(s.GetBytes("cls"), nullptr);
  EXPECT_EQ(s.GetString("cls"), nullptr);
  EXPECT_EQ(s.GetInt("missing"), std::nullopt);
  EXPECT_TRUE(s.Erase("cls"));
  EXPECT_FALSE(s.Erase("cls"));
  EXPECT_TRUE(s.empty());
}

TEST(SampleTest, MetadataFieldNames) {
  EXPECT_TRUE(IsMetadataField("__key__"));
  EXPECT_TRUE(IsMetadataField("__url__"));
  EXPECT_FALSE(IsMetadataField("jpg"));
  EXPECT_FALSE(IsMetadataField("__"));
  EXPECT_FALSE(IsMetadataField("__x"));
}

TEST(HandlerTest, ParsesReferenceNames) {
  EXPECT_EQ(*ParseHandler("reraise"), Handler::kReraise);
  EXPECT_EQ(*ParseHandler("reraise_exception"), Handler::kReraise);
  EXPECT_EQ(*ParseHandler("warn_and_continue"), Handler::kWarnAndContinue);
  EXPECT_EQ(*ParseHandler("ignore_and_continue"), Handler::kIgnoreAndContinue);
  EXPECT_EQ(*ParseHandler("warn_and_stop"), Handler::kWarnAndStop);
  EXPECT_EQ(*ParseHandler("ignore_and_stop"), Handler::kIgnoreAndStop);
  EXPECT_EQ(*ParseHandler("ignore_and_stop_exception"), Handler::kIgnoreAndStop);
  for (Handler h : {Handler::kReraise, Handler::kWarnAndContinue, Handler::kIgnoreAndContinue,
                    Handler::kWarnAndStop, Handler::kIgnoreAndStop}) {
    EXPECT_EQ(*ParseHandler(HandlerName(h)), h);
  }
}

TEST(HandlerTest, UnknownNameIsInvalidArgumentNamingIt) {
  absl::StatusOr<Handler> h = ParseHandler("skip");
  ASSERT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(h.status().message()), ::testing::HasSubstr("\"skip\""));
}

TEST(HandlerTest, ActionsCountersAndWarnings) {
  ErrorCounters counters;
  std::vector<std::string> warnings;
  WarningSink sink = [&](std::string_view m) { warnings.emplace_back(m); };
  absl::Status err = absl::DataLossError("truncated");
  EXPECT_EQ(ApplyHandler(Handler::kReraise, "tar", err, &counters, sink), ErrorAction::kRaise);
  EXPECT_EQ(ApplyHandler(Handler::kWarnAndContinue, "tar", err, &counters, sink),
            ErrorAction::kContinue);
  EXPECT_EQ(ApplyHandler(Handler::kIgnoreAndContinue, "tar", err, &counters, sink),
            ErrorAction::kContinue);
  EXPECT_EQ(ApplyHandler(Handler::kWarnAndStop, "decode", err, &counters, sink),
            ErrorAction::kStop);
  EXPECT_EQ(
      ApplyHandler(Handler::kIgnoreAndStop, "decode", absl::NotFoundError("x"), &counters, sink),
      ErrorAction::kStop);
  EXPECT_EQ(counters.Count("tar", absl::StatusCode::kDataLoss), 3);
  EXPECT_EQ(counters.Count("decode", absl::StatusCode::kDataLoss), 1);
  EXPECT_EQ(counters.Count("decode", absl::StatusCode::kNotFound), 1);
  EXPECT_EQ(counters.Total(), 5);
  ASSERT_EQ(counters.Snapshot().size(), 3u);
  EXPECT_EQ(warnings, (std::vector<std::string>{"tar: DATA_LOSS: truncated",
                                                "decode: DATA_LOSS: truncated"}));
}

TEST(HandlerTest, WarningShowsCodeAndMessageButNoPayloads) {
  std::vector<std::string> warnings;
  WarningSink sink = [&](std::string_view m) { warnings.emplace_back(m); };
  absl::Status err = absl::UnavailableError("http://h/a.tar: HTTP 503");
  err.SetPayload("webdataset_cpp/remote-url", absl::Cord("http://h/a.tar"));
  err = WithErrorKind(err, ErrorKind::kShardUnreadable, "http://h/a.tar");
  EXPECT_EQ(ApplyHandler(Handler::kWarnAndContinue, "tar", err, nullptr, sink),
            ErrorAction::kContinue);
  EXPECT_EQ(warnings, std::vector<std::string>{"tar: UNAVAILABLE: http://h/a.tar: HTTP 503"});
}

TEST(ErrorKindTest, KindAndShardUrlTravelWithTheStatus) {
  absl::Status err =
      WithErrorKind(absl::DataLossError("a.tar: truncated"), ErrorKind::kShardUnreadable, "a.tar");
  absl::Status copy = err;
  EXPECT_EQ(copy.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(copy.message(), "a.tar: truncated");
  EXPECT_EQ(ErrorKindOf(copy), ErrorKind::kShardUnreadable);
  EXPECT_EQ(ShardUrlOf(copy), "a.tar");
  EXPECT_EQ(FieldSiteOf(copy), std::nullopt);
  EXPECT_EQ(
      ErrorKindOf(WithErrorKind(absl::DataLossError("x"), ErrorKind::kCommandFailed, "pipe:false")),
      ErrorKind::kCommandFailed);
}

TEST(ErrorKindTest, UnmarkedOkAndCancelledStatusesHaveNoKind) {
  EXPECT_EQ(ErrorKindOf(absl::DataLossError("x")), ErrorKind::kUnspecified);
  EXPECT_EQ(ShardUrlOf(absl::DataLossError("x")), std::nullopt);
  EXPECT_TRUE(WithErrorKind(absl::OkStatus(), ErrorKind::kShardUnreadable, "a.tar").ok());
  absl::Status cancelled =
      WithErrorKind(absl::CancelledError("stop"), ErrorKind::kShardUnreadable, "a.tar");
  EXPECT_EQ(ErrorKindOf(cancelled), ErrorKind::kUnspecified);
  EXPECT_EQ(ErrorKindOf(WithFieldSite(absl::CancelledError("stop"), {"u", "k", "f"})),
            ErrorKind::kUnspecified);
}

TEST(ErrorKindTest, FieldSiteKeepsUrlKeyAndFieldApart) {
  absl::Status err =
      WithFieldSite(absl::InvalidArgumentError("u: key a: b: field c: bad"), {"u", "a: b", "c"});
  EXPECT_EQ(err.message(), "u: key a: b: field c: bad");
  EXPECT_EQ(ErrorKindOf(err), ErrorKind::kFieldDecode);
  std::optional<FieldSite> site = FieldSiteOf(err);
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->url, "u");
  EXPECT_EQ(site->key, "a: b");
  EXPECT_EQ(site->field, "c");
}

TEST(RandomTest, DeriveSeedDependsOnEveryPartAndItsOrder) {
  std::set<uint64_t> seen = {DeriveSeed(1, {1, 2}), DeriveSeed(1, {2, 1}), DeriveSeed(2, {1, 2}),
                             DeriveSeed(1, {1, 2, 0}), DeriveSeed(1, {})};
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(DeriveSeed(7, {3, 4}), DeriveSeed(7, {3, 4}));
}

TEST(RandomTest, BelowStaysInRangeAndIsReproducible) {
  Rng a(42), b(42);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 5000; ++i) {
    uint64_t x = a.Below(5);
    ASSERT_LT(x, 5u);
    ASSERT_EQ(x, b.Below(5));
    ++counts[x];
  }
  for (int c : counts) EXPECT_GT(c, 800);  // each bucket ~1000
  double u = a.Uniform();
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
}

}  // namespace
}  // namespace wds

namespace wds {
namespace {

TEST(ArrayTest, AllocateSizesByDTypeAndShape) {
  Array a = Array::Allocate(DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(a.num_elements(), 24);
  EXPECT_EQ(a.nbytes(), 96u);
  EXPECT_EQ(a.data.size(), 96u);
  EXPECT_EQ(ShapeString(a.shape), "[2, 3, 4]");
  Array scalar = Array::Allocate(DType::kInt64, {});
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(ShapeString(scalar.shape), "[]");
}

TEST(ArrayTest, DTypeNamesRoundTripAndUnknownIsAnError) {
  for (DType d : {DType::kBool, DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16,
                  DType::kUInt32, DType::kInt32, DType::kUInt64, DType::kInt64, DType::kFloat16,
                  DType::kFloat32, DType::kFloat64}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kUInt64), 8u);
  EXPECT_EQ(ParseDType("complex64").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SampleTest, ArrayFieldsAreFoundByType) {
  Sample s;
  s.Set("img", Array::Allocate(DType::kUInt8, {1, 2, 3}));
  ASSERT_NE(s.GetArray("img"), nullptr);
  EXPECT_EQ(s.GetArray("img")->shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(s.GetBytes("img"), nullptr);
}

}  // namespace
}  // namespace wds
