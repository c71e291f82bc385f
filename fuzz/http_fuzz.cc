// HTTP response headers (status lines, Content-Range, Content-Length, ETag)
// as libcurl hands them over line by line, SigV4 canonicalization of a request
// made from the input, and the AWS credentials file parser.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "io/http_transfer.h"
#include "io/remote_target.h"
#include "io/sigv4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  wds::HttpResponse response;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    wds::ParseHeaderLine(text.substr(start, end - start), response);
    start = end;
  }
  if (response.range_first >= 0 && response.range_last < response.range_first) __builtin_trap();
  // A request: path, then query key/value and header name/value pairs,
  // separated by '\n' and '='.
  wds::sigv4::Request request;
  request.method = "GET";
  size_t line = 0;
  for (size_t start = 0; start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    const size_t eq = part.find('=');
    const std::string key(part.substr(0, eq));
    const std::string value(eq == std::string_view::npos ? "" : part.substr(eq + 1));
    if (line == 0) {
      request.path = std::string(part);
    } else if (line % 2 == 1) {
      request.query.emplace_back(key, value);
    } else {
      request.headers.emplace_back(key, value);
    }
    start = end + 1;
  }
  (void)wds::sigv4::Sign(request, {"AKIDEXAMPLE", "secret", ""}, "us-east-1", "s3",
                         "20150830T123600Z");
  (void)wds::ParseAwsCredentialsFile(text, "default", "fuzz");
  return 0;
}
