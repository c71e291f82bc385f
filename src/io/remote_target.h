// RemoteTarget: what an http(s)://, s3:// or gs:// URL means on the wire
// (the HTTP URL, and how requests to it are authenticated), and the AWS
// credentials behind s3:// URLs.
//
//   AwsCredentialSource credentials(options);
//   absl::StatusOr<RemoteTarget> target = RemoteTarget::Resolve("s3://b/k.tar", options,
//   credentials); HttpRequest get = target->Request(false, {{"Range", "bytes=100-"}});   // signed
//   now
//
// Thread safety: RemoteTarget is a value; AwsCredentialSource is thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "io/http_transfer.h"
#include "io/sigv4.h"
#include "wds/io/remote.h"

namespace wds {

// AwsCredentialSource finds s3:// credentials once: options.aws_credentials,
// else the profile of the shared credentials file (an absent file means
// anonymous requests; a present file without the profile is an error).
class AwsCredentialSource {
 public:
  explicit AwsCredentialSource(const RemoteOptions& options);
  // Get returns the credentials, or nullopt for anonymous requests.
  [[nodiscard]] absl::StatusOr<std::optional<sigv4::Credentials>> Get();

 private:
  std::mutex mu_;
  std::optional<absl::StatusOr<std::optional<sigv4::Credentials>>> found_;
  std::optional<AwsCredentials> explicit_;
  std::string file_;
  std::string profile_;
};

// ParseAwsCredentialsFile reads `profile` from the text of an AWS shared
// credentials file (INI: "[name]" sections of "key = value" lines, '#' and
// ';' comments). `source` names the file in errors.
[[nodiscard]] absl::StatusOr<sigv4::Credentials> ParseAwsCredentialsFile(std::string_view text,
                                                                         std::string_view profile,
                                                                         std::string_view source);

class RemoteTarget {
 public:
  // Resolve maps `url` to its HTTP endpoint. Errors: InvalidArgument for a
  // malformed URL (no bucket, no key), the credential source's errors.
  [[nodiscard]] static absl::StatusOr<RemoteTarget> Resolve(std::string_view url,
                                                            const RemoteOptions& options,
                                                            AwsCredentialSource& credentials);

  // Request builds a GET (or HEAD) with `headers`, signed at this moment when
  // the target signs (a fresh signature for every attempt).
  HttpRequest Request(bool head, std::vector<std::pair<std::string, std::string>> headers) const;
  // Send builds a `method` request ("PUT", "POST", "DELETE") with `query`
  // (decoded name/value pairs, percent-encoded here), `headers` and `body`,
  // signed like Request with the body's SHA-256 as its payload hash, so that
  // S3 refuses a body that changed on the way. The request refers to `body`.
  HttpRequest Send(std::string method,
                   const std::vector<std::pair<std::string, std::string>>& query,
                   std::vector<std::pair<std::string, std::string>> headers,
                   std::string_view body) const;
  // signs is true when requests carry credentials (SigV4 or a bearer token).
  bool signs() const { return auth_ != Auth::kNone; }

  // http_url is the URL requests go to.
  const std::string& http_url() const { return http_url_; }

 private:
  enum class Auth { kNone, kSigV4, kBearer };

  // Authenticate fills request's URL (with `query`), headers and
  // redirect policy for a `method` request, signed when the target signs.
  void Authenticate(const std::string& method,
                    const std::vector<std::pair<std::string, std::string>>& query,
                    std::vector<std::pair<std::string, std::string>> headers,
                    std::string_view payload_hash, HttpRequest& request) const;

  std::string http_url_;
  // host ("host[:port]") and path (decoded) are what SigV4 signs.
  std::string host_;
  std::string path_;
  Auth auth_ = Auth::kNone;
  sigv4::Credentials credentials_;
  std::string region_;
  std::string bearer_;
  bool follow_redirects_ = false;
  // RemoteOptions::http_headers, for http(s) URLs.
  std::vector<std::pair<std::string, std::string>> extra_headers_;
};

}  // namespace wds
