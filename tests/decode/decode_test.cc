// Tests for field decoding: FieldExtension, BasicDecoders, DecodeSample and
// the Decode stage.
#include "wds/decode/decode.h"

#include <zlib.h>
#include <zstd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/base/error_kind.h"
#include "wds/decode/npy.h"
#include "wds/pipeline/pipeline.h"

namespace wds {
namespace {

// TestRng feeds decoders that draw no random numbers.
Rng& TestRng() {
  static Rng rng(0);
  return rng;
}

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::wds::testing::Drain;
using ::wds::testing::FieldText;
using ::wds::testing::MakeSample;
using ::wds::testing::VectorSource;

constexpr char kUrl[] = "mem/shard-000.tar";

// DecodeOne decodes a single field `name` holding `data` with BasicDecoders.
absl::StatusOr<Sample> DecodeOne(const std::string& name, const std::string& data) {
  Sample s = MakeSample("k", {{name, data}});
  absl::Status status = DecodeSample(s, BasicDecoders(), {}, TestRng());
  if (!status.ok()) return status;
  return s;
}

absl::StatusOr<int64_t> DecodeInt(const std::string& data, const std::string& field = "cls") {
  absl::StatusOr<Sample> s = DecodeOne(field, data);
  if (!s.ok()) return s.status();
  std::optional<int64_t> v = s->GetInt(field);
  if (!v.has_value()) return absl::InternalError("field was not decoded to an integer");
  return *v;
}

// ExpectNotAnInteger checks the error code and that the message names the
// URL, key, field and the offending text.
void ExpectNotAnInteger(const std::string& data, const std::string& shown) {
  absl::StatusOr<int64_t> v = DecodeInt(data);
  ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << "input " << shown;
  const std::string message(v.status().message());
  EXPECT_THAT(message, HasSubstr(std::string(kUrl) + ": key k: field cls: "));
  EXPECT_THAT(message, HasSubstr(shown + " is not an integer"));
}

// ------------------------------------------------------------ FieldExtension

TEST(FieldExtensionTest, IsThePartAfterTheLastDot) {
  EXPECT_EQ(FieldExtension("seg.cls"), "cls");
  EXPECT_EQ(FieldExtension("a.b.txt"), "txt");
  EXPECT_EQ(FieldExtension("cls"), "cls");
  EXPECT_EQ(FieldExtension("cls."), "");
}

// ---------------------------------------------------------------- integers

TEST(IntegerDecoderTest, SurroundingWhitespaceIsAllowed) {
  EXPECT_EQ(DecodeInt(" 42\n").value(), 42);
  EXPECT_EQ(DecodeInt("\t7\r\n").value(), 7);
  EXPECT_EQ(DecodeInt("\v\f9 ").value(), 9);
}

TEST(IntegerDecoderTest, SignsAndLeadingZeros) {
  EXPECT_EQ(DecodeInt("-7").value(), -7);
  EXPECT_EQ(DecodeInt("+5").value(), 5);
  EXPECT_EQ(DecodeInt("007").value(), 7);
  EXPECT_EQ(DecodeInt("-0").value(), 0);
}

TEST(IntegerDecoderTest, TrailingGarbageIsInvalidArgument) { ExpectNotAnInteger("4x", "\"4x\""); }

TEST(IntegerDecoderTest, EmptyIsInvalidArgument) { ExpectNotAnInteger("", "\"\""); }

TEST(IntegerDecoderTest, OnlyWhitespaceIsInvalidArgument) {
  ExpectNotAnInteger(" \n", "\" \\x0a\"");
}

TEST(IntegerDecoderTest, MalformedNumbersAreInvalidArgument) {
  ExpectNotAnInteger("+-5", "\"+-5\"");
  ExpectNotAnInteger("--5", "\"--5\"");
  ExpectNotAnInteger("-", "\"-\"");
  ExpectNotAnInteger("4 2", "\"4 2\"");
  ExpectNotAnInteger("0x10", "\"0x10\"");
  ExpectNotAnInteger("1_000", "\"1_000\"");
  ExpectNotAnInteger("1.0", "\"1.0\"");
  ExpectNotAnInteger("- 5", "\"- 5\"");
}

TEST(IntegerDecoderTest, Int64LimitsDecode) {
  EXPECT_EQ(DecodeInt("9223372036854775807").value(), INT64_MAX);
  EXPECT_EQ(DecodeInt("-9223372036854775808").value(), INT64_MIN);
}

TEST(IntegerDecoderTest, OverflowIsInvalidArgument) {
  ExpectNotAnInteger("9223372036854775808", "\"9223372036854775808\"");
  ExpectNotAnInteger("-9223372036854775809", "\"-9223372036854775809\"");
  absl::StatusOr<int64_t> v = DecodeInt("99999999999999999999999");
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("int64 range"));
}

TEST(IntegerDecoderTest, LongGarbageIsShownTruncated) {
  absl::StatusOr<int64_t> v = DecodeInt(std::string(100, 'z'));
  ASSERT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("\"" + std::string(32, 'z') + "\"... is not an integer"));
}

TEST(IntegerDecoderTest, EveryIntegerExtensionDecodes) {
  for (const char* ext : {"cls", "cls2", "class", "count", "index", "inx", "id"}) {
    EXPECT_EQ(DecodeInt("3", ext).value(), 3) << ext;
  }
}

TEST(IntegerDecoderTest, SegClsDecodesByLastExtension) {
  EXPECT_EQ(DecodeInt("12", "seg.cls").value(), 12);
}

TEST(IntegerDecoderTest, UppercaseExtensionDecodes) {
  EXPECT_EQ(DecodeInt("5", "CLS").value(), 5);
  EXPECT_EQ(DecodeInt("6", "seg.Cls").value(), 6);
}

// ---------------------------------------------------------------- text, json

std::string DecodedText(const std::string& field, const std::string& data) {
  absl::StatusOr<Sample> s = DecodeOne(field, data);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return "<error>";
  const std::string* text = s->GetString(field);
  EXPECT_NE(text, nullptr) << field << " was not decoded to text";
  return text == nullptr ? "<not text>" : *text;
}

TEST(TextDecoderTest, EveryTextExtensionDecodesUtf8) {
  const std::string text = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e\n";  // é € 𝄞
  for (const char* ext : {"txt", "text", "transcript", "seg.txt"}) {
    EXPECT_EQ(DecodedText(ext, text), text) << ext;
  }
}

TEST(TextDecoderTest, EmptyTextIsEmptyString) { EXPECT_EQ(DecodedText("txt", ""), ""); }

void ExpectInvalidUtf8(const std::string& data, size_t offset) {
  absl::StatusOr<Sample> s = DecodeOne("txt", data);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(s.status().message());
  EXPECT_THAT(message, HasSubstr(std::string(kUrl) + ": key k: field txt: "));
  EXPECT_THAT(message, HasSubstr("invalid UTF-8 at byte offset " + std::to_string(offset)));
}

TEST(TextDecoderTest, InvalidByteIsInvalidArgument) { ExpectInvalidUtf8("ab\xff", 2); }

TEST(TextDecoderTest, InvalidByteAfterLongAsciiRunIsFound) {
  ExpectInvalidUtf8(std::string(20, 'a') + "\x80" + std::string(20, 'b'), 20);
}

TEST(TextDecoderTest, OverlongEncodingIsInvalid) {
  ExpectInvalidUtf8("\xc0\xaf", 0);
  ExpectInvalidUtf8("x\xe0\x80\xaf", 1);
}

TEST(TextDecoderTest, SurrogateIsInvalid) { ExpectInvalidUtf8("\xed\xa0\x80", 0); }

TEST(TextDecoderTest, AboveMaxCodePointIsInvalid) { ExpectInvalidUtf8("\xf4\x90\x80\x80", 0); }

TEST(TextDecoderTest, TruncatedSequenceIsInvalid) { ExpectInvalidUtf8("ok\xe2\x82", 2); }

TEST(TextDecoderTest, BadContinuationIsInvalid) { ExpectInvalidUtf8("\xe2\x28\xa1", 0); }

TEST(JsonDecoderTest, TextIsPassedThroughUnchanged) {
  const std::string json = "{\"a\": [1, 2], \"b\": \"\xc3\xa9\"}\n";
  EXPECT_EQ(DecodedText("json", json), json);
  EXPECT_EQ(DecodedText("jsn", json), json);
}

TEST(JsonDecoderTest, InvalidUtf8IsInvalidArgument) {
  absl::StatusOr<Sample> s = DecodeOne("json", "{\"a\": \"\xff\"}");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("field json: invalid UTF-8"));
}

// ExpectInvalidJson checks that `data` fails as JSON with `what` at `offset`.
void ExpectInvalidJson(const std::string& data, size_t offset, const std::string& what) {
  absl::StatusOr<Sample> s = DecodeOne("json", data);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << data;
  EXPECT_EQ(std::string(s.status().message()),
            std::string(kUrl) + ": key k: field json: invalid JSON at byte offset " +
                std::to_string(offset) + ": " + what)
      << data;
}

TEST(JsonDecoderTest, EveryKindOfValueIsAcceptedAsPythonAcceptsIt) {
  for (const char* json : {"0",
                           "-0",
                           "12",
                           "-3.25e+10",
                           "1E5",
                           "0.5e-3",
                           "\"\"",
                           "true",
                           "false",
                           "null",
                           "NaN",
                           "Infinity",
                           "-Infinity",
                           "[]",
                           "{}",
                           " \t\r\n[ 1 , [ ] , { } ] \n",
                           "{\"a\": {\"b\": [1, \"x\", null]}, \"c\": -1}",
                           "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
                           "\"\\u00e9\\uD834\\uDD1E \\ud800\"",
                           "\"\x7f \xc3\xa9\"",
                           "{\"a\": 1, \"a\": 2}"}) {
    EXPECT_EQ(DecodedText("json", json), json);
  }
}

TEST(JsonDecoderTest, NestingDeeperThanAStackAllowsIsChecked) {
  const size_t depth = 1'000'000;
  EXPECT_EQ(DecodedText("json", std::string(depth, '[') + std::string(depth, ']')).size(),
            2 * depth);
  ExpectInvalidJson(std::string(depth, '['), depth, "expecting a value");
}

TEST(JsonDecoderTest, InvalidJsonIsInvalidArgumentNamingTheOffset) {
  ExpectInvalidJson("{not json", 1, "expecting a property name in double quotes");
  ExpectInvalidJson("", 0, "expecting a value");
  ExpectInvalidJson("  \n", 3, "expecting a value");
  ExpectInvalidJson("[1, 2", 5, "expecting ',' or ']'");
  ExpectInvalidJson("[1,]", 3, "expecting a value");
  ExpectInvalidJson("{\"a\": 1,}", 8, "expecting a property name in double quotes");
  ExpectInvalidJson("{\"a\" 1}", 5, "expecting ':'");
  ExpectInvalidJson("{\"a\": 1 \"b\": 2}", 8, "expecting ',' or '}'");
  ExpectInvalidJson("{1: 2}", 1, "expecting a property name in double quotes");
  ExpectInvalidJson("1 2", 2, "extra data");
  ExpectInvalidJson("01", 1, "extra data");
  ExpectInvalidJson("1.", 1, "extra data");
  ExpectInvalidJson("1e", 1, "extra data");
  ExpectInvalidJson("-", 1, "expecting a value");
  ExpectInvalidJson("+1", 0, "expecting a value");
  ExpectInvalidJson(".5", 0, "expecting a value");
  ExpectInvalidJson("nul", 0, "expecting a value");
  ExpectInvalidJson("True", 0, "expecting a value");
  ExpectInvalidJson("'a'", 0, "expecting a value");
  ExpectInvalidJson("\xef\xbb\xbf{}", 0, "expecting a value");  // a BOM
  ExpectInvalidJson("\"abc", 0, "unterminated string");
  ExpectInvalidJson("\"a\\", 0, "unterminated string");
  ExpectInvalidJson("\"a\tb\"", 2, "invalid control character in a string");
  ExpectInvalidJson("\"\\x\"", 2, "invalid escape");
  ExpectInvalidJson("\"\\u12g4\"", 5, "invalid \\uXXXX escape");
  ExpectInvalidJson("\"\\u12", 5, "invalid \\uXXXX escape");
  ExpectInvalidJson(std::string("[1]\0", 4), 3, "extra data");
}

// ------------------------------------------------------------- DecodeSample

TEST(DecodeSampleTest, ExtensionsMatchExactlyNotBySubstring) {
  for (const char* field : {"clsx", "xcls", "classes", "mytxt", "json5", "ids", "cls.png"}) {
    absl::StatusOr<Sample> s = DecodeOne(field, "1");
    ASSERT_TRUE(s.ok()) << field << ": " << s.status();
    ASSERT_NE(s->GetBytes(field), nullptr) << field;
  }
}

TEST(DecodeSampleTest, UnknownFieldStaysTheSameBytes) {
  Sample s = MakeSample("k", {{"jpg", "JPEG"}});
  const uint8_t* data = s.GetBytes("jpg")->data();
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), {}, TestRng()).ok());
  ASSERT_NE(s.GetBytes("jpg"), nullptr);
  EXPECT_EQ(s.GetBytes("jpg")->data(), data);
}

// AcceptAll decodes every field it is given to the integer 1, counting calls.
FieldDecoder AcceptAll(std::shared_ptr<std::vector<std::string>> seen) {
  return [seen](std::string_view field, const Buffer&,
                DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    seen->emplace_back(field);
    return Value(int64_t{1});
  };
}

TEST(DecodeSampleTest, MetadataFieldsAreNeverDecoded) {
  auto seen = std::make_shared<std::vector<std::string>>();
  Sample s = MakeSample("k", {{"__extra__", "x"}, {"bin", "b"}});
  ASSERT_TRUE(DecodeSample(s, {AcceptAll(seen)}, {}, TestRng()).ok());
  EXPECT_THAT(*seen, ElementsAre("bin"));
  EXPECT_EQ(s.key(), "k");
  EXPECT_NE(s.GetBytes("__extra__"), nullptr);
}

TEST(DecodeSampleTest, OnlyRestrictsTheDecodedFields) {
  Sample s = MakeSample("k", {{"cls", "1"}, {"txt", "hi"}});
  DecodeOptions options;
  options.only = {"txt"};
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), options, TestRng()).ok());
  EXPECT_NE(s.GetBytes("cls"), nullptr);
  ASSERT_NE(s.GetString("txt"), nullptr);
  EXPECT_EQ(*s.GetString("txt"), "hi");
}

TEST(DecodeSampleTest, DecodersAreTriedInOrderAndFirstAcceptWins) {
  auto calls = std::make_shared<std::vector<std::string>>();
  auto decline = [calls](std::string_view, const Buffer&,
                         DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    calls->push_back("decline");
    return std::nullopt;
  };
  auto accept = [calls](std::string_view, const Buffer& b,
                        DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    calls->push_back("accept");
    return Value(std::string("got ") + std::string(b.view()));
  };
  auto never = [calls](std::string_view, const Buffer&,
                       DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    calls->push_back("never");
    return Value(int64_t{0});
  };
  Sample s = MakeSample("k", {{"bin", "x"}});
  ASSERT_TRUE(DecodeSample(s, {decline, accept, never}, {}, TestRng()).ok());
  EXPECT_THAT(*calls, ElementsAre("decline", "accept"));
  EXPECT_EQ(*s.GetString("bin"), "got x");
}

TEST(DecodeSampleTest, DecoderErrorKeepsCodeAndNamesUrlKeyAndField) {
  auto fail = [](std::string_view, const Buffer&,
                 DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    return absl::DataLossError("corrupt header");
  };
  Sample s = MakeSample("k9", {{"seg.png", "x"}});
  absl::Status status = DecodeSample(s, {fail}, {}, TestRng());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::string(status.message()),
            std::string(kUrl) + ": key k9: field seg.png: corrupt header");
  // The site travels apart from the message too (wds/base/error_kind.h).
  EXPECT_EQ(ErrorKindOf(status), ErrorKind::kFieldDecode);
  std::optional<FieldSite> site = FieldSiteOf(status);
  ASSERT_TRUE(site.has_value());
  EXPECT_EQ(site->url, kUrl);
  EXPECT_EQ(site->key, "k9");
  EXPECT_EQ(site->field, "seg.png");
}

TEST(DecodeSampleTest, CancelledDecoderIsNoFieldFailure) {
  auto stop = [](std::string_view, const Buffer&,
                 DecodeContext&) -> absl::StatusOr<std::optional<Value>> {
    return absl::CancelledError("interrupted");
  };
  Sample s = MakeSample("k", {{"png", "x"}});
  absl::Status status = DecodeSample(s, {stop}, {}, TestRng());
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(ErrorKindOf(status), ErrorKind::kUnspecified);
}

TEST(DecodeSampleTest, AlreadyDecodedFieldIsErrorWithoutPartial) {
  Sample s = MakeSample("k", {});
  s.Append("cls", int64_t{3});
  absl::Status status = DecodeSample(s, BasicDecoders(), {}, TestRng());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(std::string(kUrl) + ": key k: field cls is already decoded"));
}

TEST(DecodeSampleTest, PartialPassesDecodedFieldsThrough) {
  Sample s = MakeSample("k", {{"txt", "t"}});
  s.Append("cls", std::string("already text"));
  DecodeOptions options;
  options.partial = true;
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), options, TestRng()).ok());
  EXPECT_EQ(*s.GetString("cls"), "already text");
  EXPECT_EQ(*s.GetString("txt"), "t");
}

TEST(DecodeSampleTest, DecodedFieldOutsideOnlyIsNotAnError) {
  Sample s = MakeSample("k", {{"txt", "t"}});
  s.Append("cls", int64_t{1});
  DecodeOptions options;
  options.only = {"txt"};
  EXPECT_TRUE(DecodeSample(s, BasicDecoders(), options, TestRng()).ok());
}

// ------------------------------------------------------------ Decode stage

TEST(DecodeStageTest, DecodesEverySample) {
  Pipeline p = Pipeline(VectorSource({MakeSample("a", {{"cls", "1"}, {"txt", "x"}, {"jpg", "J"}}),
                                      MakeSample("b", {{"cls", "2"}})}))
                   .Decode();
  std::unique_ptr<SampleStream> stream = p.Open({});
  absl::StatusOr<std::vector<Sample>> out = Drain(*stream);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].GetInt("cls"), 1);
  EXPECT_EQ(*(*out)[0].GetString("txt"), "x");
  EXPECT_EQ(FieldText((*out)[0], "jpg"), "J");
  EXPECT_NE((*out)[0].GetBytes("jpg"), nullptr);
  EXPECT_EQ((*out)[1].GetInt("cls"), 2);
}

TEST(DecodeStageTest, EmptyDecoderIsInvalidArgument) {
  std::unique_ptr<SampleStream> stream =
      Pipeline(VectorSource({MakeSample("a", {})})).Decode({FieldDecoder()}).Open({});
  EXPECT_EQ(stream->Next().status().code(), absl::StatusCode::kInvalidArgument);
}

struct StageRun {
  std::vector<std::string> keys;
  absl::Status end;
  absl::Status end_again;
  int64_t count = 0;
  std::vector<std::string> warnings;
};

// RunWithHandler decodes a, b (bad cls), c under `handler`.
StageRun RunWithHandler(Handler handler) {
  auto counters = std::make_shared<ErrorCounters>();
  StageRun r;
  WorkerContext ctx{.errors = counters,
                    .warn = [&r](std::string_view m) { r.warnings.emplace_back(m); }};
  DecodeOptions options;
  options.handler = handler;
  std::unique_ptr<SampleStream> s =
      Pipeline(VectorSource({MakeSample("a", {{"cls", "1"}}), MakeSample("b", {{"cls", "4x"}}),
                             MakeSample("c", {{"cls", "3"}})}))
          .Decode(BasicDecoders(), options)
          .Open(ctx);
  SampleResult item = s->Next();
  for (; item.ok() && item->has_value(); item = s->Next()) r.keys.emplace_back((*item)->key());
  r.end = item.status();
  SampleResult again = s->Next();
  r.end_again =
      again.ok() && again->has_value() ? absl::UnknownError("item after end") : again.status();
  r.count = counters->Count("decode", absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(counters->Total(), 1);
  return r;
}

TEST(DecodeStageTest, ReraiseEndsStreamWithStickyError) {
  StageRun r = RunWithHandler(Handler::kReraise);
  EXPECT_THAT(r.keys, ElementsAre("a"));
  EXPECT_EQ(r.end.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.end.message()),
              HasSubstr(std::string(kUrl) + ": key b: field cls: \"4x\" is not an integer"));
  EXPECT_EQ(r.end_again, r.end);
  EXPECT_EQ(r.count, 1);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(DecodeStageTest, WarnAndContinueDropsSampleAndWarns) {
  StageRun r = RunWithHandler(Handler::kWarnAndContinue);
  EXPECT_THAT(r.keys, ElementsAre("a", "c"));
  EXPECT_TRUE(r.end.ok());
  EXPECT_EQ(r.count, 1);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("decode: "));
  EXPECT_THAT(r.warnings[0], HasSubstr("key b: field cls"));
}

TEST(DecodeStageTest, IgnoreAndContinueDropsSampleSilently) {
  StageRun r = RunWithHandler(Handler::kIgnoreAndContinue);
  EXPECT_THAT(r.keys, ElementsAre("a", "c"));
  EXPECT_TRUE(r.end.ok());
  EXPECT_EQ(r.count, 1);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(DecodeStageTest, WarnAndStopEndsCleanly) {
  StageRun r = RunWithHandler(Handler::kWarnAndStop);
  EXPECT_THAT(r.keys, ElementsAre("a"));
  EXPECT_TRUE(r.end.ok());
  EXPECT_TRUE(r.end_again.ok());
  EXPECT_EQ(r.count, 1);
  EXPECT_EQ(r.warnings.size(), 1u);
}

TEST(DecodeStageTest, IgnoreAndStopEndsCleanlySilently) {
  StageRun r = RunWithHandler(Handler::kIgnoreAndStop);
  EXPECT_THAT(r.keys, ElementsAre("a"));
  EXPECT_TRUE(r.end.ok());
  EXPECT_TRUE(r.end_again.ok());
  EXPECT_EQ(r.count, 1);
  EXPECT_TRUE(r.warnings.empty());
}

// --------------------------------------------------------- compressed fields

std::string Gzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, data.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Zstd(const std::string& data) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

absl::Status DecodeStatus(const std::string& name, const std::string& data,
                          DecodeOptions options = {}) {
  Sample s = MakeSample("k", {{name, data}});
  return DecodeSample(s, BasicDecoders(), options, TestRng());
}

void ExpectFieldError(const absl::Status& status, absl::StatusCode code, const std::string& field,
                      const std::string& detail) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(std::string(kUrl) + ": key k: field " + field + ": " + detail));
}

TEST(CompressedFieldTest, CompressedJsonIsCheckedToo) {
  Sample s = MakeSample("k", {{"json.gz", Gzip("{bad")}});
  absl::Status status = DecodeSample(s, BasicDecoders(), {}, TestRng());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()),
            std::string(kUrl) +
                ": key k: field json.gz: invalid JSON at byte offset 1: expecting a property "
                "name in double quotes");
}

TEST(CompressedFieldTest, TxtGzDecodesAsTextAndKeepsItsName) {
  absl::StatusOr<Sample> s = DecodeOne("txt.gz", Gzip("hello, world"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->GetString("txt.gz"), nullptr);
  EXPECT_EQ(*s->GetString("txt.gz"), "hello, world");
  EXPECT_FALSE(s->Has("txt"));
}

TEST(CompressedFieldTest, ClsZstDecodesAsInteger) {
  absl::StatusOr<Sample> s = DecodeOne("cls.zst", Zstd(" 17\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->GetInt("cls.zst"), 17);
}

TEST(CompressedFieldTest, NpyZstAndNpyGzDecodeAsArrays) {
  Array a = Array::Allocate(DType::kInt32, {2, 2});
  for (int i = 0; i < 4; ++i) a.mutable_data<int32_t>()[i] = i * 1000 - 1;
  const std::string npy = EncodeNpy(a);
  for (const auto& [name, data] : std::vector<std::pair<std::string, std::string>>{
           {"npy.zst", Zstd(npy)}, {"feat.npy.gz", Gzip(npy)}}) {
    absl::StatusOr<Sample> s = DecodeOne(name, data);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    const Array* out = s->GetArray(name);
    ASSERT_NE(out, nullptr) << name;
    EXPECT_THAT(out->shape, ElementsAre(2, 2));
    EXPECT_EQ(out->data.view(), a.data.view()) << name;
  }
}

TEST(CompressedFieldTest, UnknownInnerExtensionGivesDecompressedBytes) {
  absl::StatusOr<Sample> s = DecodeOne("bin.gz", Gzip(std::string("\x00\x01\x02", 3)));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->GetBytes("bin.gz"), nullptr);
  EXPECT_EQ(s->GetBytes("bin.gz")->view(), std::string("\x00\x01\x02", 3));
}

TEST(CompressedFieldTest, BareGzFieldGivesDecompressedBytes) {
  absl::StatusOr<Sample> s = DecodeOne("gz", Gzip("42"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->GetBytes("gz"), nullptr);
  EXPECT_EQ(s->GetBytes("gz")->view(), "42");
}

TEST(CompressedFieldTest, DoubleSuffixIsDecompressedOnce) {
  const std::string once = Gzip("text");
  absl::StatusOr<Sample> s = DecodeOne("txt.gz.gz", Gzip(once));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->GetBytes("txt.gz.gz"), nullptr);
  EXPECT_EQ(s->GetBytes("txt.gz.gz")->view(), once);
}

TEST(CompressedFieldTest, ExtensionCaseIsIgnored) {
  absl::StatusOr<Sample> s = DecodeOne("TXT.GZ", Gzip("abc"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->GetString("TXT.GZ"), nullptr);
  EXPECT_EQ(*s->GetString("TXT.GZ"), "abc");
}

TEST(CompressedFieldTest, ConcatenatedGzipMembersAndZeroPadding) {
  absl::StatusOr<Sample> s =
      DecodeOne("txt.gz", Gzip("first ") + Gzip("second") + std::string(5, '\0'));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s->GetString("txt.gz"), "first second");
}

TEST(CompressedFieldTest, ConcatenatedZstdFrames) {
  absl::StatusOr<Sample> s = DecodeOne("txt.zst", Zstd("one ") + Zstd("two"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s->GetString("txt.zst"), "one two");
}

TEST(CompressedFieldTest, EmptyCompressedFieldIsEmpty) {
  absl::StatusOr<Sample> gz = DecodeOne("txt.gz", "");
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_EQ(*gz->GetString("txt.gz"), "");
  absl::StatusOr<Sample> zst = DecodeOne("bin.zst", "");
  ASSERT_TRUE(zst.ok()) << zst.status();
  EXPECT_EQ(zst->GetBytes("bin.zst")->size(), 0u);
}

TEST(CompressedFieldTest, LargeOutputGrowsPastTheSizeHint) {
  std::string big(3 << 20, 'a');
  for (size_t i = 0; i < big.size(); i += 997) big[i] = static_cast<char>('a' + i % 26);
  // The size hints (gzip's last ISIZE, zstd's first frame size) describe a
  // small member here, so the output must grow.
  const std::string gz = Gzip(big) + Gzip("!");
  const std::string zst = Zstd("!") + Zstd(big);
  for (const auto& [name, data] :
       std::vector<std::pair<std::string, std::string>>{{"txt.gz", gz}, {"txt.zst", zst}}) {
    absl::StatusOr<Sample> s = DecodeOne(name, data);
    ASSERT_TRUE(s.ok()) << name << ": " << s.status();
    const std::string expected = name == "txt.gz" ? big + "!" : "!" + big;
    EXPECT_TRUE(*s->GetString(name) == expected) << name;
  }
}

TEST(CompressedFieldTest, CorruptGzipIsDataLoss) {
  std::string gz = Gzip(std::string(1000, 'x'));
  gz[12] = static_cast<char>(gz[12] ^ 0x55);
  ExpectFieldError(DecodeStatus("txt.gz", gz), absl::StatusCode::kDataLoss, "txt.gz",
                   "gzip data is corrupt at compressed byte");
  ExpectFieldError(DecodeStatus("txt.gz", "not gzip at all"), absl::StatusCode::kDataLoss, "txt.gz",
                   "gzip data is corrupt at compressed byte 2: incorrect header check");
}

TEST(CompressedFieldTest, TrailingGarbageAfterGzipIsDataLoss) {
  ExpectFieldError(DecodeStatus("txt.gz", Gzip("ok") + "junk"), absl::StatusCode::kDataLoss,
                   "txt.gz", "gzip data is corrupt");
}

TEST(CompressedFieldTest, TruncatedGzipIsDataLoss) {
  const std::string gz = Gzip("some text that compresses");
  ExpectFieldError(DecodeStatus("txt.gz", gz.substr(0, gz.size() - 6)), absl::StatusCode::kDataLoss,
                   "txt.gz", "gzip data is truncated");
}

TEST(CompressedFieldTest, CorruptZstdIsDataLoss) {
  ExpectFieldError(DecodeStatus("txt.zst", "definitely not zstd"), absl::StatusCode::kDataLoss,
                   "txt.zst", "zstd data is corrupt at compressed byte");
}

TEST(CompressedFieldTest, TruncatedZstdIsDataLoss) {
  const std::string zst = Zstd(std::string(5000, 'q') + "tail");
  ExpectFieldError(DecodeStatus("txt.zst", zst.substr(0, zst.size() - 3)),
                   absl::StatusCode::kDataLoss, "txt.zst", "zstd data is truncated");
}

TEST(CompressedFieldTest, OutputOverTheLimitIsResourceExhausted) {
  const std::string plain(10001, 'z');
  DecodeOptions options;
  options.max_decompressed_bytes = 10000;
  ExpectFieldError(DecodeStatus("txt.gz", Gzip(plain), options),
                   absl::StatusCode::kResourceExhausted, "txt.gz",
                   "gzip data expands beyond 10000 bytes (DecodeOptions.max_decompressed_bytes)");
  ExpectFieldError(DecodeStatus("txt.zst", Zstd(plain), options),
                   absl::StatusCode::kResourceExhausted, "txt.zst",
                   "zstd data expands beyond 10000 bytes");
}

TEST(CompressedFieldTest, OutputExactlyAtTheLimitIsAllowed) {
  const std::string plain(10000, 'z');
  DecodeOptions options;
  options.max_decompressed_bytes = 10000;
  EXPECT_TRUE(DecodeStatus("txt.gz", Gzip(plain), options).ok());
  EXPECT_TRUE(DecodeStatus("txt.zst", Zstd(plain), options).ok());
}

TEST(CompressedFieldTest, BombIsStoppedAtTheLimit) {
  // 16 MiB of zeros compress about 1000:1 (gzip) and far more (zstd).
  const std::string zeros(16 << 20, '\0');
  DecodeOptions options;
  options.max_decompressed_bytes = 1 << 20;
  ExpectFieldError(DecodeStatus("bin.gz", Gzip(zeros), options),
                   absl::StatusCode::kResourceExhausted, "bin.gz",
                   "gzip data expands beyond 1048576 bytes");
  ExpectFieldError(DecodeStatus("bin.zst", Zstd(zeros), options),
                   absl::StatusCode::kResourceExhausted, "bin.zst",
                   "zstd data expands beyond 1048576 bytes");
}

TEST(CompressedFieldTest, InnerDecodeErrorNamesTheCompressedField) {
  ExpectFieldError(DecodeStatus("txt.gz", Gzip("\xff")), absl::StatusCode::kInvalidArgument,
                   "txt.gz", "invalid UTF-8 at byte offset 0");
  ExpectFieldError(DecodeStatus("npy.zst", Zstd("not npy")), absl::StatusCode::kInvalidArgument,
                   "npy.zst", "not an npy file");
}

TEST(CompressedFieldTest, OnlyMatchesTheFullFieldName) {
  DecodeOptions options;
  options.only = {"txt"};
  Sample s = MakeSample("k", {{"txt.gz", Gzip("x")}});
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), options, TestRng()).ok());
  EXPECT_NE(s.GetBytes("txt.gz"), nullptr);
  options.only = {"txt.gz"};
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), options, TestRng()).ok());
  EXPECT_EQ(*s.GetString("txt.gz"), "x");
}

}  // namespace
}  // namespace wds
