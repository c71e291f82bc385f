// Shard URL patterns: brace and "::" expansion, and the remote URL resolver
// (s3://, gs://, http(s)://) with request signing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "io/remote_target.h"
#include "shards/url_patterns.h"
#include "wds/io/remote.h"
#include "wds/shards/shard_list.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Small limits: the same checks as the defaults (2^22 names, 2^27 bytes;
  // unit-tested in shards_test), at a fraction of a millisecond per input
  // where the defaults let an input take seconds and gigabytes under ASan.
  (void)wds::ExpandUrls(text, wds::ExpansionLimits{.names = 1 << 12, .bytes = 1 << 18});
  static wds::RemoteOptions options = [] {
    wds::RemoteOptions o;
    o.aws_credentials = wds::AwsCredentials{"AKIDEXAMPLE", "secret", ""};
    o.s3_region = "us-east-1";
    return o;
  }();
  static wds::AwsCredentialSource credentials(options);
  if (wds::IsRemoteUrl(text)) {
    auto target = wds::RemoteTarget::Resolve(text, options, credentials);
    if (target.ok()) (void)target->Request(false, {{"Range", "bytes=0-"}});
  }
  return 0;
}
