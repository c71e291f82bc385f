// ValueKindName: how error messages name what a field holds.
#pragma once

#include <string_view>

#include "wds/base/sample.h"

namespace wds {

// ValueKindName names the kind of `value` for messages: "bytes", "text",
// "an integer", "a float", "an array", "a list of texts", "a list of bytes".
std::string_view ValueKindName(const Value& value);

}  // namespace wds
