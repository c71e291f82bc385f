// JsonString renders text as a JSON string literal exactly as Python's
// json.dumps does by default (ensure_ascii): control characters and every
// non-ASCII code point are \u escapes (lower-case hex, surrogate pairs above
// U+FFFF); bytes that are not valid UTF-8 become \udc80..\udcff, as Python's
// surrogateescape decoding of tar names does. Outputs therefore compare
// byte for byte with the reference tools.
#pragma once

#include <string>
#include <string_view>

namespace wds::tools {

void AppendJsonString(std::string& out, std::string_view text);

}  // namespace wds::tools
