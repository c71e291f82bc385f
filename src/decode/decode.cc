// Field decoding: BasicDecoders, DecodeSample and the Decode stage.
#include "wds/decode/decode.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "base/value_kind.h"
#include "stages/transform_stream.h"
#include "wds/base/error_kind.h"
#include "wds/decode/npy.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

enum class BasicKind { kInteger, kText, kJson };

struct BasicExtension {
  std::string_view extension;
  BasicKind kind;
};

// Extensions match exactly (ignoring case): "classes" or "mytxt" are not
// decoded, unlike the reference's older substring checks.
constexpr BasicExtension kBasicExtensions[] = {
    {"cls", BasicKind::kInteger},   {"cls2", BasicKind::kInteger},
    {"class", BasicKind::kInteger}, {"count", BasicKind::kInteger},
    {"index", BasicKind::kInteger}, {"inx", BasicKind::kInteger},
    {"id", BasicKind::kInteger},    {"txt", BasicKind::kText},
    {"text", BasicKind::kText},     {"transcript", BasicKind::kText},
    {"json", BasicKind::kJson},     {"jsn", BasicKind::kJson},
};

std::optional<BasicKind> FindBasicKind(std::string_view field) {
  const std::string_view extension = FieldExtension(field);
  for (const BasicExtension& e : kBasicExtensions) {
    if (EqualsIgnoreCase(extension, e.extension)) return e.kind;
  }
  return std::nullopt;
}

// Quoted shows the start of `data` for a message, escaping non-printables.
std::string Quoted(std::string_view data) {
  constexpr size_t kMaxShown = 32;
  std::string out = "\"";
  for (unsigned char c : data.substr(0, kMaxShown)) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out.append({'\\', 'x', kHex[c >> 4], kHex[c & 15]});
    }
  }
  out.push_back('"');
  if (data.size() > kMaxShown) out.append("...");
  return out;
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// ParseInteger accepts what Python's int() accepts for plain ASCII decimal:
// an optional sign and digits, with whitespace around them.
absl::StatusOr<int64_t> ParseInteger(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  std::string_view digits = s;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() || digits.front() < '0' || digits.front() > '9') {
    return absl::InvalidArgumentError(Cat(Quoted(text), " is not an integer"));
  }
  // from_chars takes '-' but not '+'; a leading '+' is skipped here.
  if (s.front() == '+') s.remove_prefix(1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(Cat(Quoted(text), " is not an integer in the int64 range"));
  }
  if (ec != std::errc() || end != s.data() + s.size()) {
    return absl::InvalidArgumentError(Cat(Quoted(text), " is not an integer"));
  }
  return value;
}

// Utf8ErrorOffset returns the offset of the first byte that does not start a
// valid UTF-8 sequence (overlong forms, surrogates and code points above
// U+10FFFF are invalid, as in Python's strict decoder), or nullopt.
std::optional<size_t> Utf8ErrorOffset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000;
    } else {
      return i;
    }
    if (n - i < len) return i;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> DecodeText(std::string_view data) {
  if (std::optional<size_t> bad = Utf8ErrorOffset(data)) {
    return absl::InvalidArgumentError(
        Cat("invalid UTF-8 at byte offset ", *bad, ": ", Quoted(data.substr(*bad))));
  }
  return std::string(data);
}

// JsonChecker checks that a text is one JSON value as Python's json.loads
// (strict) accepts it: RFC 8259 plus NaN, Infinity and -Infinity, with only
// space, tab, LF and CR for whitespace and no control characters in strings.
// Nesting is followed with an explicit stack: depth costs no C++ stack.
// Not nlohmann::json::accept: it refuses NaN and Infinity, which json.loads
// (the reference's decoder) takes, so a field the reference reads would fail.
class JsonChecker {
 public:
  explicit JsonChecker(std::string_view text) : s_(text) {}

  absl::Status Check() {
    while (true) {
      // A value is due: a scalar, or the start of an array or object (whose
      // first member, if any, the next round checks).
      SkipSpace();
      if (Take('{')) {
        SkipSpace();
        if (!Take('}')) {
          open_.push_back('{');
          WDS_RETURN_IF_ERROR(Name());
          continue;
        }
      } else if (Take('[')) {
        SkipSpace();
        if (!Take(']')) {
          open_.push_back('[');
          continue;
        }
      } else {
        WDS_RETURN_IF_ERROR(Scalar());
      }
      // Closes what the value ended, up to a ',' that asks for another value.
      while (true) {
        SkipSpace();
        if (open_.empty()) return i_ == s_.size() ? absl::OkStatus() : Error("extra data");
        const bool object = open_.back() == '{';
        if (Take(',')) {
          if (object) WDS_RETURN_IF_ERROR(Name());
          break;
        }
        if (!Take(object ? '}' : ']')) {
          return Error(object ? "expecting ',' or '}'" : "expecting ',' or ']'");
        }
        open_.pop_back();
      }
    }
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(Cat("invalid JSON at byte offset ", i_, ": ", what));
  }
  bool At(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool Take(char c) {
    if (!At(c)) return false;
    ++i_;
    return true;
  }
  bool TakeWord(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  bool AtDigit() const { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; }
  void SkipDigits() {
    while (AtDigit()) ++i_;
  }
  void SkipSpace() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }

  // Scalar checks a string, number or literal.
  absl::Status Scalar() {
    if (At('"')) return String();
    if (At('-') || AtDigit()) return Number();
    for (std::string_view word : {"null", "true", "false", "NaN", "Infinity"}) {
      if (TakeWord(word)) return absl::OkStatus();
    }
    return Error("expecting a value");
  }

  // Name checks an object member's name and its ':'.
  absl::Status Name() {
    SkipSpace();
    if (!At('"')) return Error("expecting a property name in double quotes");
    WDS_RETURN_IF_ERROR(String());
    SkipSpace();
    if (!Take(':')) return Error("expecting ':'");
    return absl::OkStatus();
  }

  // Number follows Python's -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?, where an
  // optional part that does not match is left for the caller to refuse.
  absl::Status Number() {
    if (Take('-') && TakeWord("Infinity")) return absl::OkStatus();
    if (!Take('0')) {
      if (!AtDigit()) return Error("expecting a value");
      SkipDigits();
    }
    if (At('.') && i_ + 1 < s_.size() && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') {
      ++i_;
      SkipDigits();
    }
    if (At('e') || At('E')) {
      const size_t mark = i_++;
      if (!Take('+')) Take('-');
      if (AtDigit()) {
        SkipDigits();
      } else {
        i_ = mark;
      }
    }
    return absl::OkStatus();
  }

  // String checks a string, from its opening quote.
  absl::Status String() {
    const size_t start = i_++;
    while (i_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error("invalid control character in a string");
      ++i_;
      if (c != '\\') continue;
      if (Take('u')) {
        for (int k = 0; k < 4; ++k, ++i_) {
          if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) {
            return Error("invalid \\uXXXX escape");
          }
        }
      } else if (i_ < s_.size() &&
                 std::string_view("\"\\/bfnrt").find(s_[i_]) != std::string_view::npos) {
        ++i_;
      } else if (i_ < s_.size()) {
        return Error("invalid escape");
      }
    }
    i_ = start;
    return Error("unterminated string");
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string open_;  // '[' or '{' for each array or object still open (no allocation up to 15)
};

absl::Status CheckJson(std::string_view text) { return JsonChecker(text).Check(); }

absl::StatusOr<std::optional<Value>> DecodeBasic(std::string_view field, const Buffer& data,
                                                 DecodeContext& /*ctx*/) {
  const std::optional<BasicKind> kind = FindBasicKind(field);
  if (!kind.has_value()) return std::nullopt;
  if (*kind == BasicKind::kInteger) {
    absl::StatusOr<int64_t> value = ParseInteger(data.view());
    if (!value.ok()) return value.status();
    return Value(*value);
  }
  // JSON stays text (parsing belongs to the consumer) but is checked here, so
  // that bad JSON is this stage's error, for its handler, not the consumer's.
  absl::StatusOr<std::string> text = DecodeText(data.view());
  if (!text.ok()) return text.status();
  if (*kind == BasicKind::kJson) WDS_RETURN_IF_ERROR(CheckJson(*text));
  return Value(*std::move(text));
}

absl::StatusOr<std::optional<Value>> DecodeNpyField(std::string_view field, const Buffer& data,
                                                    DecodeContext& /*ctx*/) {
  if (!EqualsIgnoreCase(FieldExtension(field), "npy")) return std::nullopt;
  absl::StatusOr<Array> array = DecodeNpy(data);
  if (!array.ok()) return array.status();
  return Value(*std::move(array));
}

// ---------------------------------------------------------- compressed fields

enum class Codec { kGzip, kZstd };

std::optional<Codec> CodecOf(std::string_view field) {
  const std::string_view extension = FieldExtension(field);
  if (EqualsIgnoreCase(extension, "gz")) return Codec::kGzip;
  if (EqualsIgnoreCase(extension, "zst")) return Codec::kZstd;
  return std::nullopt;
}

// Inflated is a malloc'd output block that grows by doubling, never beyond
// limit + 1 bytes: one byte past the limit is how an overflow is detected
// without guessing whether more output would follow.
class Inflated {
 public:
  // `hint` is the size the compressed data claims; it is trusted only up to
  // kMaxTrustedHint, since a hostile file may claim anything.
  Inflated(size_t hint, size_t compressed, size_t limit) : limit_(limit) {
    constexpr size_t kMaxTrustedHint = size_t{64} << 20;
    size_t initial = hint > 0 ? hint : std::max<size_t>(4 * compressed, 4096);
    capacity_ = std::min({std::max<size_t>(initial, 1), kMaxTrustedHint, Cap()});
    data_ = static_cast<uint8_t*>(std::malloc(capacity_));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~Inflated() { std::free(data_); }
  Inflated(const Inflated&) = delete;
  Inflated& operator=(const Inflated&) = delete;

  uint8_t* free_space() { return data_ + size_; }
  size_t free_size() const { return capacity_ - size_; }
  // Commit records `n` bytes written at free_space(); false once past the limit.
  bool Commit(size_t n) {
    size_ += n;
    return size_ <= limit_;
  }
  // Grow makes room; false when the block is already at its cap.
  bool Grow() {
    if (capacity_ >= Cap()) return false;
    const size_t next = capacity_ > Cap() / 2 ? Cap() : 2 * capacity_;
    void* grown = std::realloc(data_, next);
    if (grown == nullptr) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(grown);
    capacity_ = next;
    return true;
  }
  Buffer Finish() {
    if (size_ < capacity_) {
      if (void* shrunk = std::realloc(data_, std::max<size_t>(size_, 1))) {
        data_ = static_cast<uint8_t*>(shrunk);
      }
    }
    uint8_t* data = std::exchange(data_, nullptr);
    std::shared_ptr<const void> owner(data, [](const void* p) { std::free(const_cast<void*>(p)); });
    return Buffer::View(std::move(owner), data, size_);
  }

 private:
  size_t Cap() const { return limit_ == SIZE_MAX ? limit_ : limit_ + 1; }

  size_t limit_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

absl::Status TooLarge(std::string_view codec, size_t limit) {
  return absl::ResourceExhaustedError(
      Cat(codec, " data expands beyond ", limit, " bytes (DecodeOptions.max_decompressed_bytes)"));
}

absl::Status Truncated(std::string_view codec, size_t produced) {
  return absl::DataLossError(
      Cat(codec, " data is truncated (ends after ", produced, " decompressed bytes)"));
}

// GzipSizeHint reads ISIZE, the size modulo 2^32 stored at the end of a gzip
// member.
size_t GzipSizeHint(std::string_view in) {
  if (in.size() < 18) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(in.data() + in.size() - 4);
  return size_t{p[0]} | size_t{p[1]} << 8 | size_t{p[2]} << 16 | size_t{p[3]} << 24;
}

// Gunzip decompresses gzip data as Python's gzip module does: members may be
// concatenated, and zero bytes may pad the end.
absl::StatusOr<Buffer> Gunzip(std::string_view in, size_t limit) {
  Inflated out(GzipSizeHint(in), in.size(), limit);
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {
    return absl::ResourceExhaustedError("gzip: inflateInit2 failed");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&zs, inflateEnd);
  size_t consumed = 0;
  while (true) {
    const size_t in_chunk = std::min<size_t>(in.size() - consumed, UINT_MAX);
    const size_t out_chunk = std::min<size_t>(out.free_size(), UINT_MAX);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.free_space();
    zs.avail_out = static_cast<uInt>(out_chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
    if (!out.Commit(out_chunk - zs.avail_out)) return TooLarge("gzip", limit);
    if (rc == Z_STREAM_END) {
      while (consumed < in.size() && in[consumed] == '\0') ++consumed;
      if (consumed == in.size()) return out.Finish();
      inflateReset(&zs);
    } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
      return absl::DataLossError(Cat("gzip data is corrupt at compressed byte ", consumed, ": ",
                                     zs.msg != nullptr ? zs.msg : "invalid data"));
    } else if (rc == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError("gzip: out of memory");
    } else if (zs.avail_out == 0) {
      if (!out.Grow()) return TooLarge("gzip", limit);
    } else if (consumed == in.size()) {
      return Truncated("gzip", out.Finish().size());
    }
  }
}

size_t ZstdSizeHint(std::string_view in) {
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR) return 0;
  return size > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(size);
}

// Unzstd decompresses zstd data (one or more frames). The decoder's default
// window limit (128 MiB) bounds its own memory.
absl::StatusOr<Buffer> Unzstd(std::string_view in, size_t limit) {
  Inflated out(ZstdSizeHint(in), in.size(), limit);
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (dctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createDCtx failed");
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  while (true) {
    ZSTD_outBuffer output{out.free_space(), out.free_size(), 0};
    const size_t rc = ZSTD_decompressStream(dctx.get(), &output, &input);
    if (ZSTD_isError(rc)) {
      return absl::DataLossError(
          Cat("zstd data is corrupt at compressed byte ", input.pos, ": ", ZSTD_getErrorName(rc)));
    }
    if (!out.Commit(output.pos)) return TooLarge("zstd", limit);
    const bool input_done = input.pos == input.size;
    if (input_done && rc == 0) return out.Finish();
    if (output.pos == output.size) {
      if (out.free_size() == 0 && !out.Grow()) return TooLarge("zstd", limit);
    } else if (input_done) {
      return Truncated("zstd", out.Finish().size());
    }
  }
}

// Decompress expands a compressed field; an empty field stays empty.
absl::StatusOr<Buffer> Decompress(Codec codec, const Buffer& data, size_t limit) {
  if (data.empty()) return data;
  return codec == Codec::kGzip ? Gunzip(data.view(), limit) : Unzstd(data.view(), limit);
}

bool Selected(std::string_view field, const DecodeOptions& options) {
  if (IsMetadataField(field)) return false;
  if (options.only.empty()) return true;
  for (const std::string& name : options.only) {
    if (name == field) return true;
  }
  return false;
}

// RunDecoders returns the first decoder's result for (name, data), or
// nullopt when none accepts it.
absl::StatusOr<std::optional<Value>> RunDecoders(std::string_view name, const Buffer& data,
                                                 const std::vector<FieldDecoder>& decoders,
                                                 DecodeContext& ctx) {
  for (const FieldDecoder& decoder : decoders) {
    absl::StatusOr<std::optional<Value>> decoded = decoder(name, data, ctx);
    if (!decoded.ok() || decoded->has_value()) return decoded;
  }
  return std::nullopt;
}

// DecodeValue decodes one bytes field, decompressing a ".gz" / ".zst" field
// first (its inner name chooses the decoder; undecoded it stays the
// decompressed bytes).
absl::StatusOr<std::optional<Value>> DecodeValue(std::string_view name, const Buffer& data,
                                                 const std::vector<FieldDecoder>& decoders,
                                                 const DecodeOptions& options, DecodeContext& ctx) {
  const std::optional<Codec> codec = CodecOf(name);
  if (!codec.has_value()) return RunDecoders(name, data, decoders, ctx);
  WDS_ASSIGN_OR_RETURN(Buffer plain, Decompress(*codec, data, options.max_decompressed_bytes));
  const size_t dot = name.rfind('.');
  const std::string_view inner = dot == std::string_view::npos ? "" : name.substr(0, dot);
  WDS_ASSIGN_OR_RETURN(std::optional<Value> decoded, RunDecoders(inner, plain, decoders, ctx));
  if (decoded.has_value()) return decoded;
  return Value(std::move(plain));
}

// DecodeField decodes one bytes field in place.
absl::Status DecodeField(const Sample& sample, Sample::Field& field,
                         const std::vector<FieldDecoder>& decoders, const DecodeOptions& options,
                         DecodeContext& ctx) {
  absl::StatusOr<std::optional<Value>> decoded =
      DecodeValue(field.first, std::get<Buffer>(field.second), decoders, options, ctx);
  if (!decoded.ok()) {
    return WithFieldSite(
        SampleError(decoded.status().code(), sample.url(), sample.key(),
                    Cat("field ", field.first, ": ", ToStd(decoded.status().message()))),
        {std::string(sample.url()), std::string(sample.key()), field.first});
  }
  if (decoded->has_value()) field.second = **std::move(decoded);
  return absl::OkStatus();
}

class DecodeStream final : public TransformStream {
 public:
  DecodeStream(std::unique_ptr<SampleStream> upstream, const WorkerContext& ctx,
               std::shared_ptr<const std::vector<FieldDecoder>> decoders,
               std::shared_ptr<const DecodeOptions> options)
      : TransformStream(std::move(upstream), ctx, "decode", options->handler),
        decoders_(std::move(decoders)),
        options_(std::move(options)),
        worker_(ctx),
        rng_(DeriveSeed(ctx.seed,
                        {kDecode, static_cast<uint64_t>(ctx.epoch), static_cast<uint64_t>(ctx.pass),
                         static_cast<uint64_t>(ctx.rank), static_cast<uint64_t>(ctx.worker)})) {}

 private:
  absl::StatusOr<bool> Apply(Sample& sample) override {
    absl::Status status = DecodeSample(sample, *decoders_, *options_, rng_, &worker_);
    if (!status.ok()) return status;
    return true;
  }

  std::shared_ptr<const std::vector<FieldDecoder>> decoders_;
  std::shared_ptr<const DecodeOptions> options_;
  WorkerContext worker_;
  Rng rng_;
};

}  // namespace

std::string_view FieldExtension(std::string_view field) {
  const size_t dot = field.rfind('.');
  return dot == std::string_view::npos ? field : field.substr(dot + 1);
}

std::vector<FieldDecoder> BasicDecoders() { return {DecodeBasic, DecodeNpyField}; }

// As in the reference, a selected field that is no longer bytes is an error
// unless `partial` is set, in which case it passes through untouched.
absl::Status DecodeSample(Sample& sample, const std::vector<FieldDecoder>& decoders,
                          const DecodeOptions& options, Rng& rng, const WorkerContext* worker) {
  DecodeContext ctx{sample.key(), &rng, worker, sample.url()};
  for (Sample::Field& field : sample) {
    if (!Selected(field.first, options)) continue;
    if (std::holds_alternative<Buffer>(field.second)) {
      if (absl::Status s = DecodeField(sample, field, decoders, options, ctx); !s.ok()) return s;
    } else if (!options.partial) {
      return SampleError(
          absl::StatusCode::kFailedPrecondition, sample.url(), sample.key(),
          Cat("field ", field.first, " is already decoded (holds ", ValueKindName(field.second),
              "); decode with partial = true to pass decoded fields through"));
    }
  }
  return absl::OkStatus();
}

StageFactory DecodeStage(std::vector<FieldDecoder> decoders, DecodeOptions options) {
  for (const FieldDecoder& decoder : decoders) {
    if (!decoder) return FailingStage(absl::InvalidArgumentError("decode: a decoder is empty"));
  }
  auto shared_decoders = std::make_shared<const std::vector<FieldDecoder>>(std::move(decoders));
  auto shared_options = std::make_shared<const DecodeOptions>(std::move(options));
  return
      [shared_decoders, shared_options](const StreamFactory& upstream, const WorkerContext& ctx) {
        return std::make_unique<DecodeStream>(upstream(ctx), ctx, shared_decoders, shared_options);
      };
}

}  // namespace wds
