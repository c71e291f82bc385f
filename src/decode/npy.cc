// NumPy .npy reading and writing (see npy.h). The header is a Python dict
// literal; it is parsed by a small recursive-descent reader that knows just the
// literals numpy writes (strings, True/False, tuples of integers), so that no
// pickle and no general evaluator is ever involved.
#include "wds/decode/npy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kPreludeSize = 8;  // magic + major + minor

constexpr bool kLittleEndianHost = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
constexpr size_t kArrayAlign = 64;  // numpy aligns the data start to this

absl::Status Malformed(std::string_view detail) {
  return absl::InvalidArgumentError(Cat("malformed npy header: ", detail));
}

// HeaderValue is one value of the header dict.
struct HeaderValue {
  enum Kind { kString, kBool, kTuple, kList } kind;
  std::string text;              // kString
  bool flag = false;             // kBool
  std::vector<int64_t> numbers;  // kTuple
};

// HeaderReader parses the dict literal of an npy header.
class HeaderReader {
 public:
  explicit HeaderReader(std::string_view text) : text_(text) {}

  absl::StatusOr<std::map<std::string, HeaderValue>> ReadDict() {
    std::map<std::string, HeaderValue> dict;
    WDS_RETURN_IF_ERROR(Expect('{'));
    while (!Peek('}')) {
      WDS_ASSIGN_OR_RETURN(std::string key, ReadString());
      WDS_RETURN_IF_ERROR(Expect(':'));
      WDS_ASSIGN_OR_RETURN(HeaderValue value, ReadValue());
      if (!dict.emplace(key, std::move(value)).second) {
        return Malformed(Cat("key '", key, "' appears twice"));
      }
      if (!Peek('}')) WDS_RETURN_IF_ERROR(Expect(','));
    }
    WDS_RETURN_IF_ERROR(Expect('}'));
    SkipSpace();
    if (pos_ != text_.size()) return Malformed(Cat("unexpected text after the dict at ", pos_));
    return dict;
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Peek(char c) {
    SkipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  absl::Status Expect(char c) {
    if (!Peek(c)) {
      return Malformed(Cat("expected '", c, "' at offset ", pos_, " of \"", text_, "\""));
    }
    ++pos_;
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadString() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      return Malformed(Cat("expected a string at offset ", pos_, " of \"", text_, "\""));
    }
    const char quote = text_[pos_++];
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return Malformed("unterminated string");
    std::string_view body = text_.substr(pos_, end - pos_);
    if (body.find('\\') != std::string_view::npos) {
      return Malformed(Cat("escapes in strings are not supported: ", body));
    }
    pos_ = end + 1;
    return std::string(body);
  }

  absl::StatusOr<HeaderValue> ReadValue() {
    SkipSpace();
    if (pos_ >= text_.size()) return Malformed("the dict ends early");
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      WDS_ASSIGN_OR_RETURN(std::string s, ReadString());
      return HeaderValue{HeaderValue::kString, std::move(s), false, {}};
    }
    if (c == '(') return ReadTuple();
    if (c == '[') return SkipList();
    for (const auto& [word, flag] : {std::pair<std::string_view, bool>{"True", true},
                                     std::pair<std::string_view, bool>{"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return HeaderValue{HeaderValue::kBool, "", flag, {}};
      }
    }
    return Malformed(Cat("unsupported value at offset ", pos_, " of \"", text_, "\""));
  }

  absl::StatusOr<HeaderValue> ReadTuple() {
    HeaderValue value{HeaderValue::kTuple, "", false, {}};
    WDS_RETURN_IF_ERROR(Expect('('));
    while (!Peek(')')) {
      WDS_ASSIGN_OR_RETURN(int64_t n, ReadDimension());
      value.numbers.push_back(n);
      if (!Peek(')')) WDS_RETURN_IF_ERROR(Expect(','));
    }
    WDS_RETURN_IF_ERROR(Expect(')'));
    return value;
  }

  absl::StatusOr<int64_t> ReadDimension() {
    SkipSpace();
    const size_t start = pos_;
    int64_t n = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_++] - '0';
      if (n > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        return Malformed(Cat("shape dimension at offset ", start, " is too large"));
      }
      n = n * 10 + digit;
    }
    if (pos_ == start) {
      return Malformed(
          Cat("expected a non-negative integer at offset ", start, " of \"", text_, "\""));
    }
    return n;
  }

  // SkipList passes over a list literal (a structured dtype's descr), which
  // is rejected later with a clear message rather than parsed.
  absl::StatusOr<HeaderValue> SkipList() {
    int depth = 0;
    for (; pos_ < text_.size(); ++pos_) {
      if (text_[pos_] == '[') ++depth;
      if (text_[pos_] == ']' && --depth == 0) {
        ++pos_;
        return HeaderValue{HeaderValue::kList, "", false, {}};
      }
    }
    return Malformed("unterminated list");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

struct NpyHeader {
  DType dtype;
  bool swap;  // data is in the other byte order
  bool fortran;
  std::vector<int64_t> shape;
  size_t data_offset;
};

// ParseDescr maps a numpy type string ("<f4", "|u1", ">i8", "b1") to a DType.
absl::StatusOr<std::pair<DType, bool>> ParseDescr(const HeaderValue& descr) {
  if (descr.kind == HeaderValue::kList) {
    return absl::InvalidArgumentError("structured npy dtypes are not supported");
  }
  if (descr.kind != HeaderValue::kString) return Malformed("'descr' is not a string");
  std::string_view s = descr.text;
  bool big = !kLittleEndianHost;
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) {
    if (s[0] == '<') big = false;
    if (s[0] == '>') big = true;
    s.remove_prefix(1);
  }
  if (!s.empty() && s[0] == 'O') {
    return absl::InvalidArgumentError(
        Cat("npy dtype '", descr.text, "' holds Python objects (pickle), which is not supported"));
  }
  struct Code {
    std::string_view code;
    DType dtype;
  };
  static constexpr Code kCodes[] = {
      {"b1", DType::kBool},    {"i1", DType::kInt8},    {"u1", DType::kUInt8},
      {"i2", DType::kInt16},   {"u2", DType::kUInt16},  {"i4", DType::kInt32},
      {"u4", DType::kUInt32},  {"i8", DType::kInt64},   {"u8", DType::kUInt64},
      {"f2", DType::kFloat16}, {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
  };
  for (const Code& code : kCodes) {
    if (s == code.code) {
      const bool swap = DTypeSize(code.dtype) > 1 && big == kLittleEndianHost;
      return std::make_pair(code.dtype, swap);
    }
  }
  return absl::InvalidArgumentError(
      Cat("npy dtype '", descr.text,
          "' is not supported (only bool, [u]int8..64 and float16/32/64 are)"));
}

const HeaderValue* FindKey(const std::map<std::string, HeaderValue>& dict, const char* key) {
  auto it = dict.find(key);
  return it == dict.end() ? nullptr : &it->second;
}

absl::StatusOr<NpyHeader> ParseHeader(std::string_view file) {
  if (file.size() < kPreludeSize || file.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("not an npy file (no \\x93NUMPY magic)");
  }
  const int major = static_cast<uint8_t>(file[6]);
  const int minor = static_cast<uint8_t>(file[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(Cat("unsupported npy format version ", major, ".", minor));
  }
  const size_t length_size = major == 1 ? 2 : 4;
  if (file.size() < kPreludeSize + length_size) {
    return absl::DataLossError("npy file is truncated inside its header length");
  }
  size_t header_len = 0;
  for (size_t i = 0; i < length_size; ++i) {
    header_len |= size_t{static_cast<uint8_t>(file[kPreludeSize + i])} << (8 * i);
  }
  const size_t header_start = kPreludeSize + length_size;
  if (file.size() - header_start < header_len) {
    return absl::DataLossError(
        Cat("npy header of ", header_len, " bytes is truncated at ", file.size() - header_start));
  }
  HeaderReader reader(file.substr(header_start, header_len));
  WDS_ASSIGN_OR_RETURN(auto dict, reader.ReadDict());
  const HeaderValue* descr = FindKey(dict, "descr");
  const HeaderValue* fortran = FindKey(dict, "fortran_order");
  const HeaderValue* shape = FindKey(dict, "shape");
  if (dict.size() != 3 || descr == nullptr || fortran == nullptr || shape == nullptr) {
    return Malformed("the keys must be exactly 'descr', 'fortran_order' and 'shape'");
  }
  if (fortran->kind != HeaderValue::kBool) return Malformed("'fortran_order' is not True/False");
  if (shape->kind != HeaderValue::kTuple) return Malformed("'shape' is not a tuple");
  WDS_ASSIGN_OR_RETURN(auto dtype, ParseDescr(*descr));
  return NpyHeader{dtype.first, dtype.second, fortran->flag, shape->numbers,
                   header_start + header_len};
}

// CheckedByteCount multiplies the item size by the shape, failing instead of
// overflowing. As in numpy, the product of the non-zero dimensions must fit
// in an int64 even when a zero dimension makes the array empty: an empty
// array's element count and strides are products of its dimensions too.
absl::StatusOr<size_t> CheckedByteCount(const std::vector<int64_t>& shape, size_t item) {
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  uint64_t n = item;
  bool empty = false;
  for (int64_t d : shape) {
    const uint64_t dim = static_cast<uint64_t>(d);
    if (dim == 0) {
      empty = true;
      continue;
    }
    if (n > kMax / dim) {
      return absl::InvalidArgumentError(Cat("npy shape ", ShapeString(shape), " is too large"));
    }
    n *= dim;
  }
  return empty ? 0 : static_cast<size_t>(n);
}

template <typename U, U (*kSwap)(U)>
void SwapEach(uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    v = kSwap(v);
    std::memcpy(p + i * sizeof(U), &v, sizeof(U));
  }
}

uint16_t Swap16(uint16_t v) { return __builtin_bswap16(v); }
uint32_t Swap32(uint32_t v) { return __builtin_bswap32(v); }
uint64_t Swap64(uint64_t v) { return __builtin_bswap64(v); }

// SwapBytes reverses the bytes of each of the `count` elements of size `item`.
void SwapBytes(uint8_t* p, size_t count, size_t item) {
  switch (item) {
    case 2:
      return SwapEach<uint16_t, Swap16>(p, count);
    case 4:
      return SwapEach<uint32_t, Swap32>(p, count);
    case 8:
      return SwapEach<uint64_t, Swap64>(p, count);
    default:
      return;  // single bytes have no order
  }
}

// FortranToC writes `src` (Fortran order, `shape`) to `dst` in C order,
// swapping each element's bytes when `swap`.
void FortranToC(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& shape, size_t item,
                bool swap) {
  struct Axis {
    size_t extent;
    size_t stride;  // in the Fortran-ordered source, in elements
    size_t index = 0;
  };
  std::vector<Axis> axes;
  axes.reserve(shape.size());
  size_t count = 1;
  for (int64_t d : shape) {
    axes.push_back(Axis{static_cast<size_t>(d), count});
    count *= static_cast<size_t>(d);
  }
  size_t offset = 0;  // source offset of the current C-order index
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(dst + i * item, src + offset * item, item);
    if (swap) SwapBytes(dst + i * item, 1, item);
    // Advance the C-order index, last axis fastest.
    for (auto axis = axes.rbegin(); axis != axes.rend(); ++axis) {
      offset += axis->stride;
      if (++axis->index < axis->extent) break;
      offset -= axis->stride * axis->extent;
      axis->index = 0;
    }
  }
}

std::string DescrOf(DType dtype) {
  const size_t size = DTypeSize(dtype);
  const char order = size == 1 ? '|' : (kLittleEndianHost ? '<' : '>');
  char kind = 'f';
  switch (dtype) {
    case DType::kBool:
      kind = 'b';
      break;
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      kind = 'i';
      break;
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      kind = 'u';
      break;
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      kind = 'f';
      break;
  }
  return Cat(order, kind, size);
}

std::string ShapeTuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += Cat(i == 0 ? "" : ", ", shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

}  // namespace

absl::StatusOr<Array> DecodeNpy(const Buffer& file) {
  WDS_ASSIGN_OR_RETURN(NpyHeader header, ParseHeader(file.view()));
  const size_t item = DTypeSize(header.dtype);
  WDS_ASSIGN_OR_RETURN(size_t nbytes, CheckedByteCount(header.shape, item));
  const size_t have = file.size() - header.data_offset;
  if (have < nbytes) {
    return absl::DataLossError(Cat("npy data is truncated: shape ", ShapeString(header.shape),
                                   " of ", DTypeName(header.dtype), " needs ", nbytes,
                                   " bytes, the file has ", have));
  }
  if (have > nbytes) {
    return absl::InvalidArgumentError(
        Cat("npy file has ", have - nbytes, " bytes after the data of shape ",
            ShapeString(header.shape), " of ", DTypeName(header.dtype)));
  }
  const uint8_t* src = file.data() + header.data_offset;
  // Fortran order is irrelevant when at most one dimension exceeds 1.
  const bool fortran = header.fortran && std::count_if(header.shape.begin(), header.shape.end(),
                                                       [](int64_t d) { return d > 1; }) > 1;
  Array out;
  out.dtype = header.dtype;
  out.shape = header.shape;
  if (!fortran && !header.swap && reinterpret_cast<uintptr_t>(src) % item == 0) {
    out.data = file.Slice(header.data_offset, nbytes);
    return out;
  }
  out.data = Buffer::Allocate(nbytes);
  uint8_t* dst = out.data.mutable_data();
  if (fortran) {
    FortranToC(src, dst, header.shape, item, header.swap);
  } else {
    if (nbytes > 0) std::memcpy(dst, src, nbytes);
    if (header.swap) SwapBytes(dst, nbytes / item, item);
  }
  return out;
}

std::string EncodeNpy(const Array& array) {
  std::string dict = Cat("{'descr': '", DescrOf(array.dtype),
                         "', 'fortran_order': False, 'shape': ", ShapeTuple(array.shape), ", }");
  // numpy pads the header with spaces and a newline so that the data starts
  // at a multiple of kArrayAlign; version 1.0 holds headers up to 65535 bytes.
  auto header_len_for = [&](size_t prefix) {
    return (prefix + dict.size() + 1 + kArrayAlign - 1) / kArrayAlign * kArrayAlign - prefix;
  };
  const bool v2 = header_len_for(kPreludeSize + 2) > 0xffff;
  const size_t header_len = header_len_for(kPreludeSize + (v2 ? 4 : 2));
  dict.append(header_len - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back('\0');
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) {
    out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
  }
  out += dict;
  out.append(array.data.view().substr(0, array.nbytes()));
  return out;
}

}  // namespace wds
