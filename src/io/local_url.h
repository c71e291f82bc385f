// OpenLocalUrl: the URLs this process opens without a remote session (local
// paths, "file:", "-", "pipe:"). OpenUrl sends remote URLs to a RemoteOpener
// and the rest here; a RemoteOpener sends its local URLs here too, so the two
// never call each other.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"

namespace wds {

// OpenLocalUrl opens `url` as OpenUrl does. A remote URL (http(s), s3, gs) is
// InvalidArgument: it needs an Opener with a remote session.
[[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> OpenLocalUrl(std::string_view url);

}  // namespace wds
