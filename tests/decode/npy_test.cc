// Tests for the npy reader and writer: files written by numpy (the system
// python3) are compared element by element with numpy's own C-order native
// bytes; malformed files fail with precise codes; EncodeNpy is read back by
// numpy; npy fields decode through BasicDecoders.
#include "wds/decode/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/test_util.h"
#include "wds/decode/decode.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::wds::testing::RunShell;
using ::wds::testing::TempDir;

const char kPython[] = "/usr/bin/python3";

// The fixture script writes, for each case, <name>.npy (numpy's file),
// <name>.raw (numpy's C-order native bytes of the same array) and <name>.meta
// ("<dtype name> <dim> <dim> ...").
constexpr char kFixtureScript[] = R"PY(
import sys, os, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(7)

def save(name, a, version=None):
    path = os.path.join(out, name)
    with open(path + ".npy", "wb") as f:
        if version is None:
            np.save(f, a)
        else:
            np.lib.format.write_array(f, a, version=version)
    native = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("="))
    with open(path + ".raw", "wb") as f:
        f.write(native.tobytes(order="C"))
    with open(path + ".meta", "w") as f:
        f.write(" ".join([native.dtype.name] + [str(d) for d in a.shape]))

def values(code, shape):
    dt = np.dtype(code)
    n = int(np.prod(shape))
    if dt.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        v = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        v.flat[0] = info.min
        v.flat[-1] = info.max
        return v.reshape(shape)
    v = rng.standard_normal(n).astype(dt) * 1000
    v.flat[0] = np.inf
    v.flat[1] = -0.0
    v.flat[2] = np.finfo(dt).tiny
    return v.reshape(shape)

for code in ["b1", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8"]:
    for order in "<>":
        dt = np.dtype(order + code)
        save("c_%s_%s" % ({"<": "le", ">": "be"}[order], code), values(code, (3, 4)).astype(dt))
        save("f_%s_%s" % ({"<": "le", ">": "be"}[order], code),
             np.asfortranarray(values(code, (2, 3, 4)).astype(dt)))
save("scalar_be_i4", np.array(-123456, dtype=">i4"))
save("empty_f4", np.zeros((0,), dtype="<f4"))
save("empty_3d_u2", np.zeros((3, 0, 2), dtype=">u2"))
save("empty_fortran", np.asfortranarray(np.zeros((2, 0, 3), dtype="<i8")))
save("fortran_vector", np.asfortranarray(np.arange(5, dtype=">f8")))
save("fortran_column", np.asfortranarray(np.arange(6, dtype="<i2").reshape(6, 1)))
save("v2_f4", values("f4", (4, 5)).astype("<f4"), version=(2, 0))
save("v3_u1", values("u1", (7,)).astype("u1"), version=(3, 0))
np.save(os.path.join(out, "object.npy"), np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
np.save(os.path.join(out, "structured.npy"), np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")]))
np.save(os.path.join(out, "unicode.npy"), np.array(["ab", "cde"]))
np.save(os.path.join(out, "complex.npy"), np.zeros(2, dtype="<c8"))
np.save(os.path.join(out, "datetime.npy"), np.zeros(2, dtype="<M8[s]"))
)PY";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

class NumpyFixtures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string script = dir_->Write("make_fixtures.py", kFixtureScript);
    ASSERT_EQ(RunShell(std::string(kPython) + " " + script + " " + dir_->path()), 0)
        << "the fixture script needs Debian's python3-numpy";
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::string File(const std::string& name) { return ReadFile(dir_->path() + "/" + name); }

  // ExpectMatchesNumpy decodes <name>.npy and compares dtype, shape and bytes
  // with numpy's own view of the array.
  static void ExpectMatchesNumpy(const std::string& name) {
    SCOPED_TRACE(name);
    absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(File(name + ".npy")));
    ASSERT_TRUE(a.ok()) << a.status();
    std::istringstream meta(File(name + ".meta"));
    std::string dtype;
    meta >> dtype;
    std::vector<int64_t> shape;
    for (int64_t d; meta >> d;) shape.push_back(d);
    EXPECT_EQ(DTypeName(a->dtype), dtype);
    EXPECT_EQ(a->shape, shape);
    const std::string raw = File(name + ".raw");
    ASSERT_EQ(a->nbytes(), raw.size());
    EXPECT_EQ(a->data.view().substr(0, a->nbytes()), raw);
  }

  static TempDir* dir_;
};

TempDir* NumpyFixtures::dir_ = nullptr;

const char* const kCodes[] = {"b1", "i1", "u1", "i2", "u2", "i4",
                              "u4", "i8", "u8", "f2", "f4", "f8"};

TEST_F(NumpyFixtures, EveryDTypeLittleEndianCOrder) {
  for (const char* code : kCodes) ExpectMatchesNumpy(std::string("c_le_") + code);
}

TEST_F(NumpyFixtures, EveryDTypeBigEndianIsByteSwapped) {
  for (const char* code : kCodes) ExpectMatchesNumpy(std::string("c_be_") + code);
}

TEST_F(NumpyFixtures, FortranOrderIsTransposedToCOrder) {
  for (const char* code : kCodes) {
    ExpectMatchesNumpy(std::string("f_le_") + code);
    ExpectMatchesNumpy(std::string("f_be_") + code);
  }
}

TEST_F(NumpyFixtures, ZeroDimensionalArray) {
  ExpectMatchesNumpy("scalar_be_i4");
  absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(File("scalar_be_i4.npy")));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->shape.empty());
  EXPECT_EQ(a->data_as<int32_t>()[0], -123456);
}

TEST_F(NumpyFixtures, EmptyArrays) {
  ExpectMatchesNumpy("empty_f4");
  ExpectMatchesNumpy("empty_3d_u2");
  ExpectMatchesNumpy("empty_fortran");
}

TEST_F(NumpyFixtures, FortranOrderWithOneLongAxis) {
  ExpectMatchesNumpy("fortran_vector");
  ExpectMatchesNumpy("fortran_column");
}

TEST_F(NumpyFixtures, FormatVersions2And3) {
  ExpectMatchesNumpy("v2_f4");
  ExpectMatchesNumpy("v3_u1");
}

TEST_F(NumpyFixtures, ObjectArrayIsRefusedWithoutUnpickling) {
  absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(File("object.npy")));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("'|O' holds Python objects (pickle)"));
}

TEST_F(NumpyFixtures, StructuredDTypeIsInvalidArgument) {
  absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(File("structured.npy")));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("structured npy dtypes"));
}

TEST_F(NumpyFixtures, StringComplexAndDatetimeDTypesAreInvalidArgument) {
  for (const auto& [file, descr] : std::vector<std::pair<std::string, std::string>>{
           {"unicode.npy", "'<U3'"}, {"complex.npy", "'<c8'"}, {"datetime.npy", "'<M8[s]'"}}) {
    absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(File(file)));
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(std::string(a.status().message()),
                HasSubstr("npy dtype " + descr + " is not supported"));
  }
}

TEST_F(NumpyFixtures, AlignedNativeDataIsSharedNotCopied) {
  const Buffer file = Buffer::Copy(File("c_le_f8.npy"));
  absl::StatusOr<Array> a = DecodeNpy(file);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->data.data(), file.data() + (file.size() - a->nbytes()));
  EXPECT_EQ(file.use_count(), 2);
}

TEST_F(NumpyFixtures, MisalignedDataIsCopiedAndStillExact) {
  const std::string bytes = File("c_le_f8.npy");
  const Buffer padded = Buffer::Copy("x" + bytes);
  const Buffer file = padded.Slice(1, bytes.size());
  absl::StatusOr<Array> a = DecodeNpy(file);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data.data()) % 8, 0u);
  EXPECT_EQ(a->data.view(), File("c_le_f8.raw"));
}

TEST_F(NumpyFixtures, NpyFieldDecodesThroughBasicDecoders) {
  Sample s;
  s.Append(std::string(kKeyField), std::string("k"));
  s.Append("feat.npy", Buffer::Copy(File("c_be_i2.npy")));
  Rng rng(0);
  ASSERT_TRUE(DecodeSample(s, BasicDecoders(), {}, rng).ok());
  const Array* a = s.GetArray("feat.npy");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kInt16);
  EXPECT_THAT(a->shape, ElementsAre(3, 4));
  EXPECT_EQ(a->data.view(), File("c_be_i2.raw"));
}

// ------------------------------------------------------ hand-made headers

// NpyFile builds a version 1.0 file around `header` (unpadded) and `data`.
std::string NpyFile(const std::string& header, const std::string& data, int major = 1,
                    int minor = 0) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  const size_t n = header.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>(n >> 8));
  if (major >= 2) out.append(2, '\0');
  return out + header + data;
}

absl::Status DecodeError(const std::string& file) {
  absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(file));
  return a.status();
}

void ExpectInvalid(const std::string& file, const std::string& message) {
  absl::Status s = DecodeError(file);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(message));
}

TEST(NpyHeaderTest, MinimalHandWrittenHeader) {
  const std::string data("\x01\x00\x02\x00", 4);
  absl::StatusOr<Array> a = DecodeNpy(
      Buffer::Copy(NpyFile("{'descr': '<u2', 'fortran_order': False, 'shape': (2,)}\n", data)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, DType::kUInt16);
  EXPECT_EQ(a->data_as<uint16_t>()[0], 1);
  EXPECT_EQ(a->data_as<uint16_t>()[1], 2);
}

TEST(NpyHeaderTest, KeysInAnyOrderAndDoubleQuotes) {
  absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(
      NpyFile("{ \"shape\" : ( 1 , 2 , ) , \"fortran_order\": True, \"descr\": \"|u1\", }", "ab")));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->shape, ElementsAre(1, 2));
  EXPECT_EQ(a->data.view(), "ab");
}

TEST(NpyHeaderTest, NativeAndUnmarkedByteOrders) {
  for (const char* descr : {"=i4", "i4", "|i4"}) {
    const int32_t v = -5;
    absl::StatusOr<Array> a = DecodeNpy(Buffer::Copy(
        NpyFile(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': ()}",
                std::string(reinterpret_cast<const char*>(&v), 4))));
    ASSERT_TRUE(a.ok()) << descr << ": " << a.status();
    EXPECT_EQ(a->data_as<int32_t>()[0], -5) << descr;
  }
}

TEST(NpyHeaderTest, BadMagicIsInvalidArgument) {
  ExpectInvalid("PK\x03\x04 not npy at all", "not an npy file");
  ExpectInvalid("", "not an npy file");
}

TEST(NpyHeaderTest, UnknownVersionIsInvalidArgument) {
  ExpectInvalid(NpyFile("{}", "", 4, 0), "unsupported npy format version 4.0");
  ExpectInvalid(NpyFile("{}", "", 1, 1), "unsupported npy format version 1.1");
}

TEST(NpyHeaderTest, TruncatedHeaderIsDataLoss) {
  std::string file = NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "");
  file.resize(file.size() - 10);
  absl::Status s = DecodeError(file);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("npy header of 55 bytes is truncated at 45"));
  const absl::Status prelude = DecodeError(std::string("\x93NUMPY\x01\x00\x10", 9));
  EXPECT_EQ(prelude.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(prelude.message()), HasSubstr("truncated inside its header length"));
}

TEST(NpyHeaderTest, MissingOrExtraKeyIsInvalidArgument) {
  ExpectInvalid(NpyFile("{'descr': '<f4', 'shape': (1,)}", "abcd"),
                "the keys must be exactly 'descr', 'fortran_order' and 'shape'");
  ExpectInvalid(
      NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': True}", "abcd"),
      "the keys must be exactly");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'descr': '<f4', 'shape': (1,)}", "abcd"),
                "key 'descr' appears twice");
}

TEST(NpyHeaderTest, MalformedLiteralsAreInvalidArgument) {
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", ""),
                "expected a non-negative integer");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", "abcd"),
                "unsupported value");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "abcd"),
                "'shape' is not a tuple");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "abcd"),
                "expected ','");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "abcd"),
                "unexpected text after the dict");
  ExpectInvalid(NpyFile("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", "abcd"),
                "escapes in strings are not supported");
  ExpectInvalid(NpyFile("{'descr': 7, 'fortran_order': False, 'shape': (1,)}", "abcd"),
                "unsupported value");
  ExpectInvalid(NpyFile("{'descr': '<f4', 'fortran_order': 'no', 'shape': (1,)}", "abcd"),
                "'fortran_order' is not True/False");
}

TEST(NpyHeaderTest, ShapeOverflowIsInvalidArgument) {
  ExpectInvalid(NpyFile("{'descr': '<f8', 'fortran_order': False, "
                        "'shape': (4294967296, 4294967296, 4)}",
                        ""),
                "npy shape [4294967296, 4294967296, 4] is too large");
  ExpectInvalid(NpyFile("{'descr': '<f8', 'fortran_order': False, "
                        "'shape': (99999999999999999999,)}",
                        ""),
                "is too large");
}

TEST(NpyHeaderTest, EmptyShapeWhoseOtherDimensionsOverflowIsInvalidArgument) {
  // Found by fuzz/npy_fuzz (fuzz/regressions/npy_fuzz/): a zero dimension made
  // the byte count 0 and hid an overflow that the element count then met.
  // numpy refuses such a shape too ("array is too big").
  ExpectInvalid(NpyFile("{'descr': '<i1', 'fortran_order': True, "
                        "'shape': (35555555, 5555555, 55255, 0), }",
                        ""),
                "npy shape [35555555, 5555555, 55255, 0] is too large");
  // Fits in a size_t, not in the int64 that counts elements.
  ExpectInvalid(NpyFile("{'descr': '<i1', 'fortran_order': False, "
                        "'shape': (35555555, 5555555, 55255)}",
                        ""),
                "npy shape [35555555, 5555555, 55255] is too large");
}

TEST(NpyDataTest, EmptyShapeWithAZeroDimensionIsAnEmptyArray) {
  absl::StatusOr<Array> a =
      DecodeNpy(Buffer::Copy(NpyFile("{'descr': '<f4', 'fortran_order': False, "
                                     "'shape': (3, 0, 1000000)}",
                                     "")));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 0, 1000000}));
  EXPECT_EQ(a->num_elements(), 0);
  EXPECT_EQ(a->nbytes(), 0u);
}

TEST(NpyDataTest, ShortDataIsDataLoss) {
  absl::Status s =
      DecodeError(NpyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3)}", "12345"));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("npy data is truncated: shape [2, 3] of int32 needs 24 bytes, the file "
                        "has 5"));
}

TEST(NpyDataTest, TrailingDataIsInvalidArgument) {
  ExpectInvalid(NpyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (2,)}", "abc"),
                "npy file has 1 bytes after the data of shape [2] of uint8");
}

TEST(NpyDataTest, UnsupportedItemSizeIsInvalidArgument) {
  ExpectInvalid(NpyFile("{'descr': '<f16', 'fortran_order': False, 'shape': (1,)}", ""),
                "npy dtype '<f16' is not supported");
  ExpectInvalid(NpyFile("{'descr': '<i3', 'fortran_order': False, 'shape': (1,)}", ""),
                "npy dtype '<i3' is not supported");
}

// ------------------------------------------------------------- EncodeNpy

TEST(EncodeNpyTest, RoundTripsThroughDecodeNpy) {
  Array a = Array::Allocate(DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) a.mutable_data<float>()[i] = 0.5f * static_cast<float>(i) - 1;
  const std::string file = EncodeNpy(a);
  EXPECT_EQ(file.find("\x93NUMPY\x01\x00"), 0u);
  EXPECT_EQ((file.size() - a.nbytes()) % 64, 0u);
  absl::StatusOr<Array> back = DecodeNpy(Buffer::Copy(file));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype, DType::kFloat32);
  EXPECT_THAT(back->shape, ElementsAre(2, 3));
  EXPECT_EQ(back->data.view(), a.data.view());
}

TEST(EncodeNpyTest, NumpyReadsEveryDType) {
  TempDir dir;
  std::string check = "import numpy as np, sys\nd = sys.argv[1]\n";
  for (DType dtype : {DType::kBool, DType::kUInt8, DType::kInt8, DType::kUInt16, DType::kInt16,
                      DType::kUInt32, DType::kInt32, DType::kUInt64, DType::kInt64, DType::kFloat16,
                      DType::kFloat32, DType::kFloat64}) {
    Array a = Array::Allocate(dtype, {2, 1, 3});
    for (size_t i = 0; i < a.nbytes(); ++i) a.data.mutable_data()[i] = static_cast<uint8_t>(i % 2);
    const std::string name(DTypeName(dtype));
    dir.Write(name + ".npy", EncodeNpy(a));
    dir.Write(name + ".raw", a.data.view());
    check += "a = np.load(d + '/" + name + ".npy')\n";
    check += "assert a.dtype == np.dtype('" + name + "') and a.shape == (2, 1, 3), a\n";
    check += "assert a.tobytes() == open(d + '/" + name + ".raw', 'rb').read()\n";
  }
  Array scalar = Array::Allocate(DType::kInt64, {});
  scalar.mutable_data<int64_t>()[0] = -9;
  dir.Write("scalar.npy", EncodeNpy(scalar));
  check += "assert np.load(d + '/scalar.npy').shape == () and np.load(d + '/scalar.npy') == -9\n";
  const std::string script = dir.Write("check.py", check);
  EXPECT_EQ(RunShell(std::string(kPython) + " " + script + " " + dir.path()), 0);
}

TEST(EncodeNpyTest, LongHeaderUsesVersion2) {
  std::vector<int64_t> shape(30000, 1);
  Array a = Array::Allocate(DType::kUInt8, shape);
  a.mutable_data<uint8_t>()[0] = 42;
  const std::string file = EncodeNpy(a);
  EXPECT_EQ(file.find(std::string("\x93NUMPY\x02\x00", 8)), 0u);
  absl::StatusOr<Array> back = DecodeNpy(Buffer::Copy(file));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, shape);
  EXPECT_EQ(back->data_as<uint8_t>()[0], 42);
}

}  // namespace
}  // namespace wds
