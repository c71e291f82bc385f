// Field decoding: BasicDecoders, DecodeSample and the Decode stage.
#include "wds/decode.h"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include "str_util.h"
#include "transform_stream.h"
#include "wds/pipeline.h"

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

char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (AsciiLower(a[i]) != b[i]) return false;
  }
  return true;
}

std::optional<BasicKind> FindBasicKind(std::string_view field) {
  const std::string_view extension = FieldExtension(field);
  for (const BasicExtension& e : kBasicExtensions) {
    if (EqualsIgnoringCase(extension, e.extension)) return e.kind;
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

absl::StatusOr<std::optional<Value>> DecodeBasic(std::string_view field, const Buffer& data,
                                                 DecodeContext& /*ctx*/) {
  const std::optional<BasicKind> kind = FindBasicKind(field);
  if (!kind.has_value()) return std::nullopt;
  if (*kind == BasicKind::kInteger) {
    absl::StatusOr<int64_t> value = ParseInteger(data.view());
    if (!value.ok()) return value.status();
    return Value(*value);
  }
  // JSON stays text: parsing belongs to the consumer, but it must be UTF-8.
  absl::StatusOr<std::string> text = DecodeText(data.view());
  if (!text.ok()) return text.status();
  return Value(*std::move(text));
}

bool Selected(std::string_view field, const DecodeOptions& options) {
  if (IsMetadataField(field)) return false;
  if (options.only.empty()) return true;
  for (const std::string& name : options.only) {
    if (name == field) return true;
  }
  return false;
}

std::string_view TypeName(const Value& value) {
  struct Namer {
    std::string_view operator()(const Buffer&) const { return "bytes"; }
    std::string_view operator()(const std::string&) const { return "text"; }
    std::string_view operator()(int64_t) const { return "an integer"; }
    std::string_view operator()(double) const { return "a float"; }
    std::string_view operator()(const Array&) const { return "an array"; }
    std::string_view operator()(const TextList&) const { return "a list of texts"; }
    std::string_view operator()(const BytesList&) const { return "a list of bytes"; }
  };
  return std::visit(Namer{}, value);
}

// DecodeField runs the decoders on one bytes field until one accepts it.
absl::Status DecodeField(const Sample& sample, Sample::Field& field,
                         const std::vector<FieldDecoder>& decoders, DecodeContext& ctx) {
  const Buffer& data = std::get<Buffer>(field.second);
  for (const FieldDecoder& decoder : decoders) {
    absl::StatusOr<std::optional<Value>> decoded = decoder(field.first, data, ctx);
    if (!decoded.ok()) {
      return SampleError(decoded.status().code(), sample.url(), sample.key(),
                         Cat("field ", field.first, ": ", ToStd(decoded.status().message())));
    }
    if (decoded->has_value()) {
      field.second = **std::move(decoded);
      return absl::OkStatus();
    }
  }
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
        rng_(DeriveSeed(ctx.seed, {kDecode, static_cast<uint64_t>(ctx.epoch),
                                   static_cast<uint64_t>(ctx.pass), static_cast<uint64_t>(ctx.rank),
                                   static_cast<uint64_t>(ctx.worker)})) {}

 private:
  absl::StatusOr<bool> Apply(Sample& sample) override {
    absl::Status status = DecodeSample(sample, *decoders_, *options_, rng_);
    if (!status.ok()) return status;
    return true;
  }

  std::shared_ptr<const std::vector<FieldDecoder>> decoders_;
  std::shared_ptr<const DecodeOptions> options_;
  Rng rng_;
};

}  // namespace

std::string_view FieldExtension(std::string_view field) {
  const size_t dot = field.rfind('.');
  return dot == std::string_view::npos ? field : field.substr(dot + 1);
}

std::vector<FieldDecoder> BasicDecoders() { return {DecodeBasic}; }

// As in the reference, a selected field that is no longer bytes is an error
// unless `partial` is set, in which case it passes through untouched.
absl::Status DecodeSample(Sample& sample, const std::vector<FieldDecoder>& decoders,
                          const DecodeOptions& options, Rng& rng) {
  DecodeContext ctx{sample.key(), &rng};
  for (Sample::Field& field : sample) {
    if (!Selected(field.first, options)) continue;
    if (std::holds_alternative<Buffer>(field.second)) {
      if (absl::Status s = DecodeField(sample, field, decoders, ctx); !s.ok()) return s;
    } else if (!options.partial) {
      return SampleError(
          absl::StatusCode::kFailedPrecondition, sample.url(), sample.key(),
          Cat("field ", field.first, " is already decoded (holds ", TypeName(field.second),
              "); decode with partial = true to pass decoded fields through"));
    }
  }
  return absl::OkStatus();
}

Pipeline Pipeline::Decode(std::vector<FieldDecoder> decoders, DecodeOptions options) const {
  for (const FieldDecoder& decoder : decoders) {
    if (!decoder) {
      absl::Status error = absl::InvalidArgumentError("decode: a decoder is empty");
      return Then(
          [error](const StreamFactory&, const WorkerContext&) { return ErrorStream(error); });
    }
  }
  auto shared_decoders = std::make_shared<const std::vector<FieldDecoder>>(std::move(decoders));
  auto shared_options = std::make_shared<const DecodeOptions>(std::move(options));
  return Then(
      [shared_decoders, shared_options](const StreamFactory& upstream, const WorkerContext& ctx) {
        return std::make_unique<DecodeStream>(upstream(ctx), ctx, shared_decoders, shared_options);
      });
}

}  // namespace wds
