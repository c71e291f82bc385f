// AWS Signature Version 4 for S3 requests (header authentication), on
// OpenSSL 3's one-shot digest and MAC functions: no AWS SDK.
//
//   sigv4::Request request{"GET", "/bucket/a b.tar", {}, {{"range", "bytes=10-"}}};
//   sigv4::SignS3(request, "s3.us-east-1.amazonaws.com", credentials, "us-east-1",
//                 sigv4::AmzDate(std::time(nullptr)));
//   // request.headers now holds host, x-amz-date, x-amz-content-sha256, [x-amz-security-token]
//   // and Authorization: send every one of them.
//
// S3 rules (AWS's "Signature Calculations for the Authorization Header"): the
// path is percent-encoded once and never normalised; every byte but
// A-Z a-z 0-9 - . _ ~ is %XX (upper-case hex), '/' kept in paths only; query
// pairs are encoded then sorted; header names are lower-cased and values
// trimmed, with inner runs of white space collapsed.
//
// Thread safety: pure functions.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace wds::sigv4 {

// kEmptyPayloadHash is the SHA-256 of an empty body, the payload hash of a GET.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string Sha256Hex(std::string_view data);
// HmacSha256 returns the raw 32-byte HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);
// SigningKey derives kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date),
// region), service), "aws4_request"); `date` is YYYYMMDD.
std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service);
// UriEncode percent-encodes all bytes but the unreserved ones; '/' is kept
// when keep_slash (paths) and encoded otherwise (query keys and values).
std::string UriEncode(std::string_view text, bool keep_slash);
// AmzDate formats `time` as x-amz-date wants it: YYYYMMDDTHHMMSSZ (UTC).
std::string AmzDate(std::time_t time);

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  // session_token is sent as x-amz-security-token when not empty.
  std::string session_token;
};

// Request is what is signed. path and query are DECODED (the signer encodes
// them); headers are sent as given and all of them are signed.
struct Request {
  std::string method;
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;
  // payload_hash is the hex SHA-256 of the body or "UNSIGNED-PAYLOAD".
  std::string payload_hash = std::string(kEmptyPayloadHash);
};

// Signature is every intermediate value, so tests can compare each step with
// published examples.
struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;
  std::string signature;
  std::string authorization;
};

// Sign computes the signature of `request` at `amz_date` (YYYYMMDDTHHMMSSZ)
// for `region` and `service`.
Signature Sign(const Request& request, const Credentials& credentials, std::string_view region,
               std::string_view service, std::string_view amz_date);

// SignS3 adds host, x-amz-date, x-amz-content-sha256 and (with a session
// token) x-amz-security-token to request.headers, signs them with the
// request's other headers for service "s3", and appends Authorization.
// `host` must be what the client sends: "host[:port]", the port only when it
// is not the scheme's default.
Signature SignS3(Request& request, std::string_view host, const Credentials& credentials,
                 std::string_view region, std::string_view amz_date);

}  // namespace wds::sigv4
