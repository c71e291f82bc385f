// SigV4 against AWS's published examples, S3 URL mapping and AWS credential
// files.
//
// The expected values are the worked examples of AWS's documentation,
// written out by hand here:
// - "Examples of how to derive a signing key for Signature Version 4" (AWS
//   General Reference): the signing key for 20120215/us-east-1/iam and
//   20150830/us-east-1/iam.
// - Amazon S3 API Reference, "Signature Calculations for the Authorization
//   Header: Transferring Payload in a Single Chunk (AWS Signature Version 4)":
//   GET Object with a Range header, PUT Object, GET Bucket Lifecycle and
//   GET Bucket (List Objects), for bucket examplebucket on 2013-05-24.
#include "io/sigv4.h"

#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/remote_target.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

using ::testing::HasSubstr;

// The S3 documentation's example credentials (note the '/' in the secret,
// where the General Reference's example has '+').
const sigv4::Credentials kS3Example = {"AKIAIOSFODNN7EXAMPLE",
                                       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr std::string_view kS3Date = "20130524T000000Z";
constexpr std::string_view kS3Host = "examplebucket.s3.amazonaws.com";

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

TEST(Sigv4Test, DerivedSigningKeyMatchesTheGeneralReference) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  EXPECT_EQ(absl::BytesToHexString(sigv4::SigningKey(secret, "20120215", "us-east-1", "iam")),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
  EXPECT_EQ(absl::BytesToHexString(sigv4::SigningKey(secret, "20150830", "us-east-1", "iam")),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
}

TEST(Sigv4Test, S3GetObjectWithRange) {
  sigv4::Request request;
  request.method = "GET";
  request.path = "/test.txt";
  request.headers = {{"Range", "bytes=0-9"}};
  const sigv4::Signature s = sigv4::SignS3(request, kS3Host, kS3Example, "us-east-1", kS3Date);
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // Everything signed is also sent, Authorization last.
  ASSERT_EQ(request.headers.size(), 5u);
  EXPECT_EQ(request.headers.back().first, "Authorization");
  EXPECT_EQ(request.headers.back().second, s.authorization);
}

TEST(Sigv4Test, S3PutObjectEncodesTheKeyOnce) {
  sigv4::Request request;
  request.method = "PUT";
  request.path = "/test$file.text";
  request.payload_hash = sigv4::Sha256Hex("Welcome to Amazon S3.");
  EXPECT_EQ(request.payload_hash,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  request.headers = {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                     {"x-amz-storage-class", "REDUCED_REDUNDANCY"}};
  const sigv4::Signature s = sigv4::SignS3(request, kS3Host, kS3Example, "us-east-1", kS3Date);
  EXPECT_THAT(s.canonical_request, ::testing::StartsWith("PUT\n/test%24file.text\n\n"));
  EXPECT_EQ(s.signed_headers, "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(Sigv4Test, S3GetBucketLifecycleSignsAnEmptyQueryValue) {
  sigv4::Request request;
  request.method = "GET";
  request.path = "/";
  request.query = {{"lifecycle", ""}};
  const sigv4::Signature s = sigv4::SignS3(request, kS3Host, kS3Example, "us-east-1", kS3Date);
  EXPECT_THAT(s.canonical_request, ::testing::StartsWith("GET\n/\nlifecycle=\n"));
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(Sigv4Test, S3ListObjectsSortsTheQuery) {
  sigv4::Request request;
  request.method = "GET";
  request.path = "/";
  request.query = {{"prefix", "J"}, {"max-keys", "2"}};
  const sigv4::Signature s = sigv4::SignS3(request, kS3Host, kS3Example, "us-east-1", kS3Date);
  EXPECT_THAT(s.canonical_request, ::testing::StartsWith("GET\n/\nmax-keys=2&prefix=J\n"));
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(Sigv4Test, SessionTokenIsSentAndSigned) {
  sigv4::Request request;
  request.method = "GET";
  request.path = "/test.txt";
  sigv4::Credentials with_token = kS3Example;
  with_token.session_token = "TOKEN+/=";
  const sigv4::Signature s = sigv4::SignS3(request, kS3Host, with_token, "us-east-1", kS3Date);
  EXPECT_EQ(s.signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
  EXPECT_THAT(s.canonical_request, HasSubstr("\nx-amz-security-token:TOKEN+/=\n"));
}

TEST(Sigv4Test, HeaderValuesAreTrimmedAndRepeatsJoined) {
  sigv4::Request request;
  request.method = "GET";
  request.path = "/";
  request.headers = {{"My-Header1", "  a   b \t c  "}, {"X-Dup", "1"}, {"x-dup", "2"}};
  const sigv4::Signature s = sigv4::Sign(request, kS3Example, "us-east-1", "s3", kS3Date);
  EXPECT_THAT(s.canonical_request, HasSubstr("\nmy-header1:a b c\nx-dup:1,2\n"));
}

TEST(Sigv4Test, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(sigv4::UriEncode("a b+c~d_e-f.g/é$(x)", true), "a%20b%2Bc~d_e-f.g/%C3%A9%24%28x%29");
  EXPECT_EQ(sigv4::UriEncode("a/b", false), "a%2Fb");
}

TEST(Sigv4Test, AmzDateIsUtc) { EXPECT_EQ(sigv4::AmzDate(1369353600), "20130524T000000Z"); }

// --- URL mapping

absl::StatusOr<RemoteTarget> Resolve(std::string_view url, const RemoteOptions& options) {
  AwsCredentialSource credentials(options);
  return RemoteTarget::Resolve(url, options, credentials);
}

RemoteOptions Anonymous() {
  RemoteOptions o;
  o.aws_credentials_file = "/nonexistent/credentials";
  return o;
}

TEST(RemoteTargetTest, S3OnAwsIsVirtualHostedWithTheRegion) {
  RemoteOptions o = Anonymous();
  o.s3_region = "eu-west-1";
  absl::StatusOr<RemoteTarget> t = Resolve("s3://bucket/dir/a b+é.tar", o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->http_url(), "https://bucket.s3.eu-west-1.amazonaws.com/dir/a%20b%2B%C3%A9.tar");
}

TEST(RemoteTargetTest, DottedBucketsUsePathStyle) {
  absl::StatusOr<RemoteTarget> t = Resolve("s3://my.bucket/k", Anonymous());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->http_url(), "https://s3.us-east-1.amazonaws.com/my.bucket/k");
}

TEST(RemoteTargetTest, CustomEndpointsUsePathStyle) {
  RemoteOptions o = Anonymous();
  o.s3_endpoint = "http://127.0.0.1:9000/prefix/";
  absl::StatusOr<RemoteTarget> t = Resolve("s3://bucket/k.tar", o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->http_url(), "http://127.0.0.1:9000/prefix/bucket/k.tar");
  o.s3_addressing = S3Addressing::kVirtualHosted;
  EXPECT_EQ(Resolve("s3://bucket/k.tar", o)->http_url(),
            "http://bucket.127.0.0.1:9000/prefix/k.tar");
}

TEST(RemoteTargetTest, SignedRequestsCarryTheSigningHeaders) {
  RemoteOptions o = Anonymous();
  o.s3_endpoint = "http://127.0.0.1:9000";
  o.aws_credentials = AwsCredentials{"AK", "SK", "TOK"};
  absl::StatusOr<RemoteTarget> t = Resolve("s3://bucket/k.tar", o);
  ASSERT_TRUE(t.ok()) << t.status();
  HttpRequest r = t->Request(false, {{"Range", "bytes=5-"}});
  std::map<std::string, std::string> h(r.headers.begin(), r.headers.end());
  EXPECT_EQ(h["host"], "127.0.0.1:9000");
  EXPECT_EQ(h["x-amz-security-token"], "TOK");
  EXPECT_THAT(h["Authorization"], HasSubstr("SignedHeaders=host;range;x-amz-content-sha256;"
                                            "x-amz-date;x-amz-security-token"));
}

TEST(RemoteTargetTest, GcsUsesTheXmlApiAndABearerToken) {
  RemoteOptions o = Anonymous();
  o.gcs_token = "ya29.token";
  absl::StatusOr<RemoteTarget> t = Resolve("gs://bucket/dir/x.tar", o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->http_url(), "https://storage.googleapis.com/bucket/dir/x.tar");
  HttpRequest r = t->Request(false, {});
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].second, "Bearer ya29.token");
  o.gcs_endpoint = "localhost:4443";  // STORAGE_EMULATOR_HOST style
  EXPECT_EQ(Resolve("gs://bucket/x.tar", o)->http_url(), "http://localhost:4443/bucket/x.tar");
}

TEST(RemoteTargetTest, MalformedObjectUrlsNameTheUrl) {
  absl::Status no_key = Resolve("s3://bucket", Anonymous()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(no_key));
  EXPECT_EQ(Message(no_key), "s3://bucket: no object key (expected scheme://bucket/key)");
  absl::Status no_bucket = Resolve("gs:///key", Anonymous()).status();
  EXPECT_EQ(Message(no_bucket), "gs:///key: no bucket (expected scheme://bucket/key)");
  RemoteOptions o = Anonymous();
  o.s3_endpoint = "ftp://x";
  EXPECT_EQ(Message(Resolve("s3://b/k", o).status()),
            "s3://b/k: S3 endpoint 'ftp://x' is not an http(s) URL");
}

// --- credentials files

TEST(AwsCredentialsTest, ProfilesAreReadFromTheSharedFile) {
  const std::string text =
      "# comment\n[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key=SKDEFAULT\n\n"
      "[ci] \n; another\nAWS_ACCESS_KEY_ID=AKCI\naws_secret_access_key = SK/CI+=\n"
      "aws_session_token = TOK\n";
  absl::StatusOr<sigv4::Credentials> d = ParseAwsCredentialsFile(text, "default", "f");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->access_key_id, "AKDEFAULT");
  EXPECT_EQ(d->secret_access_key, "SKDEFAULT");
  absl::StatusOr<sigv4::Credentials> ci = ParseAwsCredentialsFile(text, "ci", "f");
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ(ci->access_key_id, "AKCI");
  EXPECT_EQ(ci->secret_access_key, "SK/CI+=");
  EXPECT_EQ(ci->session_token, "TOK");
}

TEST(AwsCredentialsTest, AMissingProfileIsAnErrorNamingTheFile) {
  absl::Status s =
      ParseAwsCredentialsFile("[default]\n", "prod", "/home/u/.aws/credentials").status();
  EXPECT_TRUE(absl::IsNotFound(s));
  EXPECT_EQ(Message(s), "/home/u/.aws/credentials: no profile [prod]");
  s = ParseAwsCredentialsFile("[prod]\naws_access_key_id=A\n", "prod", "f").status();
  EXPECT_EQ(Message(s), "f: profile [prod] lacks aws_access_key_id or aws_secret_access_key");
}

TEST(AwsCredentialsTest, TheProfileFileSignsS3Requests) {
  testing::TempDir dir;
  const std::string file = dir.Write("credentials",
                                     "[team]\naws_access_key_id=AKTEAM\n"
                                     "aws_secret_access_key=SKTEAM\n");
  RemoteOptions o;
  o.aws_credentials_file = file;
  o.aws_profile = "team";
  o.s3_endpoint = "http://127.0.0.1:1";
  absl::StatusOr<RemoteTarget> t = Resolve("s3://b/k", o);
  ASSERT_TRUE(t.ok()) << t.status();
  HttpRequest r = t->Request(false, {});
  EXPECT_THAT(r.headers.back().second, HasSubstr("Credential=AKTEAM/"));
  o.aws_profile = "other";
  absl::Status s = Resolve("s3://b/k", o).status();
  EXPECT_EQ(Message(s), Cat("s3://b/k: AWS credentials: ", file, ": no profile [other]"));
}

TEST(AwsCredentialsTest, NoCredentialsMeansAnonymousRequests) {
  absl::StatusOr<RemoteTarget> t = Resolve("s3://public/k", Anonymous());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->Request(false, {}).headers.empty());
}

}  // namespace
}  // namespace wds
