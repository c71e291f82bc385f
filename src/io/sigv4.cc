// AWS Signature Version 4 on OpenSSL 3 (EVP_Q_digest, EVP_Q_mac).
#include "io/sigv4.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cassert>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "wds/internal/base/strings.h"

namespace wds::sigv4 {
namespace {

// Trim drops leading and trailing white space and collapses inner runs
// (including folded lines) into one space, as canonical header values want.
// (absl::RemoveExtraAsciiWhitespace keeps a run's last character, which may
// be a tab, and also treats \v and \f as space.)
std::string Trim(std::string_view value) {
  return absl::StrJoin(absl::StrSplit(ToAbsl(value), absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty()),
                       " ");
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  size_t size = 0;
  // Fails only when OpenSSL itself is unusable (no SHA-256 provider).
  const int ok = EVP_Q_digest(nullptr, "SHA256", nullptr, data.data(), data.size(), digest, &size);
  assert(ok == 1 && "EVP_Q_digest(SHA256) failed");
  (void)ok;
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t size = 0;
  const unsigned char* in = reinterpret_cast<const unsigned char*>(data.data());
  const unsigned char* result = EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, key.data(),
                                          key.size(), in, data.size(), mac, sizeof(mac), &size);
  assert(result != nullptr && "EVP_Q_mac(HMAC-SHA256) failed");
  (void)result;
  return std::string(reinterpret_cast<const char*>(mac), size);
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  std::string key = HmacSha256(Cat("AWS4", secret), date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  return HmacSha256(key, "aws4_request");
}

std::string UriEncode(std::string_view text, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(std::time_t time) {
  std::tm tm{};
  gmtime_r(&time, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

Signature Sign(const Request& request, const Credentials& credentials, std::string_view region,
               std::string_view service, std::string_view amz_date) {
  Signature s;
  const std::string uri = UriEncode(request.path.empty() ? "/" : request.path, true);
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [key, value] : request.query) {
    query.emplace_back(UriEncode(key, false), UriEncode(value, false));
  }
  std::sort(query.begin(), query.end());
  std::string canonical_query;
  for (const auto& [key, value] : query) {
    if (!canonical_query.empty()) canonical_query.push_back('&');
    canonical_query += Cat(key, "=", value);
  }
  // Names sorted; a repeated header's values joined with ',' in order.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    auto [it, inserted] = headers.emplace(AsciiLower(name), Trim(value));
    if (!inserted) it->second += Cat(",", Trim(value));
  }
  std::string canonical_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += Cat(name, ":", value, "\n");
    if (!s.signed_headers.empty()) s.signed_headers.push_back(';');
    s.signed_headers += name;
  }
  s.canonical_request = Cat(request.method, "\n", uri, "\n", canonical_query, "\n",
                            canonical_headers, "\n", s.signed_headers, "\n", request.payload_hash);
  const std::string_view date = amz_date.substr(0, 8);
  const std::string scope = Cat(date, "/", region, "/", service, "/aws4_request");
  s.string_to_sign =
      Cat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", Sha256Hex(s.canonical_request));
  s.signature = absl::BytesToHexString(HmacSha256(
      SigningKey(credentials.secret_access_key, date, region, service), s.string_to_sign));
  s.authorization = Cat("AWS4-HMAC-SHA256 Credential=", credentials.access_key_id, "/", scope,
                        ", SignedHeaders=", s.signed_headers, ", Signature=", s.signature);
  return s;
}

Signature SignS3(Request& request, std::string_view host, const Credentials& credentials,
                 std::string_view region, std::string_view amz_date) {
  request.headers.emplace_back("host", std::string(host));
  request.headers.emplace_back("x-amz-date", std::string(amz_date));
  request.headers.emplace_back("x-amz-content-sha256", request.payload_hash);
  if (!credentials.session_token.empty()) {
    request.headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  Signature s = Sign(request, credentials, region, "s3", amz_date);
  request.headers.emplace_back("Authorization", s.authorization);
  return s;
}

}  // namespace wds::sigv4
