#include "json_text.h"

#include <cstdint>
#include <cstdio>

namespace wds::tools {
namespace {

void AppendEscape(std::string& out, uint32_t unit) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", unit);
  out.append(buf);
}

void AppendCodePoint(std::string& out, uint32_t cp) {
  if (cp < 0x10000) {
    AppendEscape(out, cp);
    return;
  }
  cp -= 0x10000;
  AppendEscape(out, 0xd800 + (cp >> 10));
  AppendEscape(out, 0xdc00 + (cp & 0x3ff));
}

// DecodeUtf8 reads one well-formed UTF-8 sequence at text[i] (non-ASCII lead),
// returning its length and code point, or 0 if it is malformed.
size_t DecodeUtf8(std::string_view text, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  uint8_t lead = byte(i);
  size_t len;
  uint32_t min;
  if ((lead & 0xe0) == 0xc0) {
    len = 2, min = 0x80, *cp = lead & 0x1f;
  } else if ((lead & 0xf0) == 0xe0) {
    len = 3, min = 0x800, *cp = lead & 0x0f;
  } else if ((lead & 0xf8) == 0xf0) {
    len = 4, min = 0x10000, *cp = lead & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    *cp = (*cp << 6) | (byte(i + k) & 0x3f);
  }
  bool surrogate = *cp >= 0xd800 && *cp <= 0xdfff;
  return (*cp < min || *cp > 0x10ffff || surrogate) ? 0 : len;
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      uint32_t cp;
      size_t len = DecodeUtf8(text, i, &cp);
      if (len == 0) {
        AppendEscape(out, 0xdc00 + c);
        ++i;
      } else {
        AppendCodePoint(out, cp);
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        if (c < 0x20) {
          AppendEscape(out, c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace wds::tools
