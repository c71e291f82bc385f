// ErrorKind: what kind of failure an error Status is, for code that acts on
// the kind rather than on the message (which is for people and may be
// reworded). The Python binding picks its exception class by it.
//
// The kind travels as Status payloads, set where the error is made and kept
// by every layer that passes the Status on (copies keep payloads; a layer
// that builds a new Status around an error's message copies them over):
//
//   kShardUnreadable  a shard is not a readable tar: truncated or corrupt tar,
//                     gzip, zstd or other compression, or not a tar at all;
//                     ShardUrlOf names the shard
//   kCommandFailed    a pipe: command exited non-zero or was killed;
//                     ShardUrlOf names the shard ("pipe:<command>")
//   kFieldDecode      a decoder failed on one field of one sample;
//                     FieldSiteOf says which
//
//   absl::Status error = WithErrorKind(absl::DataLossError("..."),
//                                      ErrorKind::kShardUnreadable, url);
//   if (ErrorKindOf(error) == ErrorKind::kShardUnreadable) ...
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace wds {

enum class ErrorKind {
  kUnspecified,  // no kind was set (also an ok Status)
  kShardUnreadable,
  kCommandFailed,
  kFieldDecode,
};

// The payload type URLs. A kind's payload holds its name ("shard-unreadable",
// "command-failed", "field-decode"); the others hold the value as text.
inline constexpr std::string_view kErrorKindPayload = "webdataset_cpp/error-kind";
inline constexpr std::string_view kShardUrlPayload = "webdataset_cpp/shard-url";
inline constexpr std::string_view kSampleUrlPayload = "webdataset_cpp/sample-url";
inline constexpr std::string_view kSampleKeyPayload = "webdataset_cpp/sample-key";
inline constexpr std::string_view kFieldPayload = "webdataset_cpp/field";

// WithErrorKind returns `status` marked as a failure of `kind` concerning the
// shard `shard_url`; code and message stay. An ok or Cancelled status (an
// interruption, not the data's fault) is returned unmarked.
[[nodiscard]] absl::Status WithErrorKind(absl::Status status, ErrorKind kind,
                                         std::string_view shard_url);

// ErrorKindOf is the kind `status` was marked with, or kUnspecified.
ErrorKind ErrorKindOf(const absl::Status& status);

// ShardUrlOf is the shard URL `status` was marked with, or nullopt.
std::optional<std::string> ShardUrlOf(const absl::Status& status);

// FieldSite is where a decoder failed. `url` is empty for a sample without
// one.
struct FieldSite {
  std::string url;
  std::string key;
  std::string field;
};

// WithFieldSite marks `status` as a kFieldDecode failure at `site` (unless ok
// or Cancelled); code and message stay.
[[nodiscard]] absl::Status WithFieldSite(absl::Status status, const FieldSite& site);

// FieldSiteOf is the site of a kFieldDecode status, or nullopt.
std::optional<FieldSite> FieldSiteOf(const absl::Status& status);

}  // namespace wds
