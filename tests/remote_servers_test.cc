// Remote shards through real servers started by the test on 127.0.0.1:
// Debian's nginx (http, and https with HTTP/2 and a self-signed certificate)
// and an S3 that checks SigV4 signatures (tests/s3mock.js under node). The
// shard set is read through each byte-exact, by the library, by wds-shard
// and by wds-bench.
#include <sys/wait.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "remote_test_util.h"
#include "test_util.h"
#include "wds/internal/strings.h"
#include "wds/pipeline.h"
#include "wds/remote.h"

namespace wds {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::wds::testing::Sha256;

constexpr int kShards = 4;

std::string RandomBytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

absl::StatusOr<std::string> ReadAll(ByteStream& stream) {
  std::string out;
  std::vector<char> buffer(1 << 20);
  while (true) {
    absl::StatusOr<size_t> n = stream.Read(buffer.data(), buffer.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buffer.data(), *n);
  }
}

// The shard set: kShards tars of 50 samples (a 10-30 KB .bin, a .cls).
class ShardSet {
 public:
  ShardSet() {
    fs::create_directories(dir_.path() + "/www/shards");
    for (int s = 0; s < kShards; ++s) {
      std::vector<testing::TarEntry> entries;
      for (int i = 0; i < 50; ++i) {
        const std::string key = Cat("sample", s, "_", i);
        entries.push_back({key + ".bin", RandomBytes(10'000 + 400 * i, s * 100 + i)});
        entries.push_back({key + ".cls", std::to_string(i % 7)});
      }
      tars_.push_back(testing::MakeTar(entries));
      dir_.Write(Cat("www/shards/shard-", s, ".tar"), tars_.back());
    }
  }
  const std::string& docroot_parent() const { return dir_.path(); }
  std::string docroot() const { return dir_.path() + "/www"; }
  const std::string& tar(int s) const { return tars_[s]; }
  std::string local_pattern() const { return docroot() + "/shards/shard-{0..3}.tar"; }

 private:
  testing::TempDir dir_;
  std::vector<std::string> tars_;
};

RemoteOptions Quick() {
  RemoteOptions o;
  o.backoff_base = std::chrono::milliseconds(1);
  o.backoff_cap = std::chrono::milliseconds(10);
  o.max_attempts = 3;
  o.aws_credentials_file = "/nonexistent";
  return o;
}

absl::StatusOr<std::vector<Sample>> ReadPipeline(const std::string& pattern, Opener opener) {
  absl::StatusOr<Pipeline> p = WebDataset(pattern, {.opener = std::move(opener)});
  if (!p.ok()) return p.status();
  std::unique_ptr<SampleStream> stream = p->Open({});
  return testing::Drain(*stream);
}

// ExpectSameSamples compares keys and every field but __url__.
void ExpectSameSamples(const std::vector<Sample>& got, const std::vector<Sample>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].key(), want[i].key());
    EXPECT_EQ(testing::FieldText(got[i], "bin"), testing::FieldText(want[i], "bin"));
    EXPECT_EQ(testing::FieldText(got[i], "cls"), testing::FieldText(want[i], "cls"));
  }
}

class NginxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FindProgram("nginx").empty()) {
      GTEST_SKIP() << "nginx is not installed: run scripts/deps.sh (Debian's nginx-light)";
    }
    absl::StatusOr<std::unique_ptr<testing::NginxServer>> server =
        testing::NginxServer::Start(shards_.docroot());
    ASSERT_TRUE(server.ok()) << server.status();
    nginx_ = *std::move(server);
    local_ = *ReadPipeline(shards_.local_pattern(), OpenUrl);
    ASSERT_EQ(local_.size(), 200u);
  }
  RemoteOptions Tls() const {
    RemoteOptions o = Quick();
    o.ca_file = nginx_->cert_path();
    return o;
  }

  ShardSet shards_;
  std::unique_ptr<testing::NginxServer> nginx_;
  std::vector<Sample> local_;
};

TEST_F(NginxTest, HttpShardSetIsByteExact) {
  absl::StatusOr<std::vector<Sample>> got =
      ReadPipeline(nginx_->HttpUrl("/shards/shard-{0..3}.tar"), MakeOpener(Quick()));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameSamples(*got, local_);
  EXPECT_EQ(testing::FieldText((*got)[0], "__url__"), nginx_->HttpUrl("/shards/shard-0.tar"));
}

TEST_F(NginxTest, HttpsWithHttp2AndHttp11IsByteExact) {
  for (HttpVersion version : {HttpVersion::kDefault, HttpVersion::kHttp1_1}) {
    RemoteOptions o = Tls();
    o.http_version = version;
    Opener open = MakeOpener(o);
    for (int s = 0; s < kShards; ++s) {
      absl::StatusOr<std::unique_ptr<ByteStream>> stream =
          open(nginx_->HttpsUrl(Cat("/shards/shard-", s, ".tar")));
      ASSERT_TRUE(stream.ok()) << stream.status();
      absl::StatusOr<std::string> data = ReadAll(**stream);
      ASSERT_TRUE(data.ok()) << data.status();
      EXPECT_EQ(Sha256(*data), Sha256(shards_.tar(s)));
    }
    absl::StatusOr<std::vector<Sample>> got =
        ReadPipeline(nginx_->HttpsUrl("/shards/shard-{0..3}.tar"), open);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameSamples(*got, local_);
    // The default negotiates HTTP/2 (ALPN); the other asks for 1.1.
    const std::string protocol =
        version == HttpVersion::kDefault ? "HTTP/2.0 200\n" : "HTTP/1.1 200\n";
    size_t count = 0;
    const std::string log = nginx_->access_log();
    for (size_t at = log.find(protocol); at != std::string::npos; at = log.find(protocol, at + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 2u * kShards) << log;
  }
}

TEST_F(NginxTest, AnUnknownCertificateIsRefused) {
  const std::string url = nginx_->HttpsUrl("/shards/shard-0.tar");
  absl::Status s = MakeOpener(Quick())(url).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(Message(s),
              StartsWith(Cat(url, ": SSL peer certificate or SSH remote key was not OK")));
  RemoteOptions insecure = Quick();
  insecure.verify_tls = false;
  EXPECT_TRUE(MakeOpener(insecure)(url).ok());
}

TEST_F(NginxTest, MissingShardIsNotFound) {
  const std::string url = nginx_->HttpUrl("/shards/shard-9.tar");
  absl::Status s = MakeOpener(Quick())(url).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(Message(s), Cat(url, ": HTTP 404 Not Found: 404 Not Found"));
}

TEST_F(NginxTest, WdsShardCommandsAcceptUrls) {
  testing::TempDir work;
  const std::string env = Cat("CURL_CA_BUNDLE=", nginx_->cert_path(), " ");
  const std::string url = nginx_->HttpsUrl("/shards/shard-1.tar");
  const std::string local = shards_.docroot() + "/shards/shard-1.tar";

  testing::ToolRun remote_ls = testing::RunCaptured(
      work.path(), Cat(env, testing::ToolPath("wds-shard"), " ls --json ", url));
  testing::ToolRun local_ls =
      testing::RunCaptured(work.path(), Cat(testing::ToolPath("wds-shard"), " ls --json ", local));
  ASSERT_EQ(remote_ls.status, 0) << remote_ls.err;
  std::string expected = local_ls.out;
  for (size_t at; (at = expected.find(local)) != std::string::npos;) {
    expected.replace(at, local.size(), url);
  }
  EXPECT_EQ(remote_ls.out, expected);

  testing::ToolRun verify =
      testing::RunCaptured(work.path(), Cat(env, testing::ToolPath("wds-shard"), " verify ", url));
  EXPECT_EQ(verify.status, 0) << verify.out << verify.err;
  EXPECT_EQ(verify.out, Cat(url, ": ok (50 samples)\n"));

  testing::ToolRun stats = testing::RunCaptured(
      work.path(), Cat(env, testing::ToolPath("wds-shard"), " stats --json ", url));
  EXPECT_EQ(stats.status, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr(Cat("\"file_bytes\": ", shards_.tar(1).size())));

  testing::ToolRun index = testing::RunCaptured(
      work.path(), Cat(env, testing::ToolPath("wds-shard"), " index --dir idx --json all.json ",
                       nginx_->HttpsUrl("/shards/shard-{0..1}.tar")));
  EXPECT_EQ(index.status, 0) << index.err;
  testing::ToolRun local_index =
      testing::RunCaptured(work.path(), Cat(testing::ToolPath("wds-shard"), " index ", local));
  ASSERT_EQ(local_index.status, 0) << local_index.err;
  EXPECT_EQ(testing::ReadFile(work.path() + "/idx/shard-1.tar.idx"),
            testing::ReadFile(local + ".idx"));
  EXPECT_THAT(
      testing::ReadFile(work.path() + "/all.json"),
      HasSubstr(Cat("\"url\": \"", url,
                    "\",\n      \"nsamples\": 50,\n      \"filesize\": ", shards_.tar(1).size())));
}

TEST_F(NginxTest, WdsBenchReadsUrls) {
  testing::TempDir work;
  testing::ToolRun bench = testing::RunCaptured(
      work.path(), Cat(testing::ToolPath("wds-bench"), " --json --decode none --epochs 1 ",
                       nginx_->HttpUrl("/shards/shard-{0..3}.tar")));
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_THAT(bench.out, HasSubstr("\"samples\": 200"));
}

// --- S3

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::FindProgram("node").empty()) {
      GTEST_SKIP() << "node is not installed: run scripts/deps.sh (Debian's nodejs)";
    }
    // Buckets are directories: "shards" holds the set under "train/", and a
    // key with characters that need encoding.
    fs::create_directories(root_.path() + "/shards/train");
    for (int s = 0; s < kShards; ++s) {
      root_.Write(Cat("shards/train/shard-", s, ".tar"), shards_.tar(s));
    }
    root_.Write("shards/odd name+é=1.tar", shards_.tar(2));
  }
  void Start(testing::S3Mock::Options options = {}) {
    absl::StatusOr<std::unique_ptr<testing::S3Mock>> mock =
        testing::S3Mock::Start(root_.path(), options);
    ASSERT_TRUE(mock.ok()) << mock.status();
    mock_ = *std::move(mock);
  }
  RemoteOptions S3(std::string secret = "testsecret", std::string token = "") const {
    RemoteOptions o = Quick();
    o.s3_endpoint = mock_->endpoint();
    o.aws_credentials = AwsCredentials{"AKIDTEST", std::move(secret), std::move(token)};
    return o;
  }

  ShardSet shards_;
  testing::TempDir root_;
  std::unique_ptr<testing::S3Mock> mock_;
};

TEST_F(S3Test, SignedReadsOfTheShardSetAreByteExact) {
  Start();
  const std::vector<Sample> local = *ReadPipeline(shards_.local_pattern(), OpenUrl);
  absl::StatusOr<std::vector<Sample>> got =
      ReadPipeline("s3://shards/train/shard-{0..3}.tar", MakeOpener(S3()));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameSamples(*got, local);
  EXPECT_EQ(testing::FieldText((*got)[0], "__url__"), "s3://shards/train/shard-0.tar");
  absl::StatusOr<std::unique_ptr<ByteStream>> odd =
      MakeOpener(S3())("s3://shards/odd name+é=1.tar");
  ASSERT_TRUE(odd.ok()) << odd.status();
  EXPECT_EQ(Sha256(*ReadAll(**odd)), Sha256(shards_.tar(2)));
}

TEST_F(S3Test, AWrongSecretIsAClear403) {
  Start();
  const std::string url = "s3://shards/train/shard-0.tar";
  absl::Status s = MakeOpener(S3("wrongsecret"))(url).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(Message(s),
            Cat(url, ": HTTP 403 Forbidden: SignatureDoesNotMatch: The request signature we ",
                "calculated does not match the signature you provided. Check your key and ",
                "signing method."));
}

TEST_F(S3Test, MissingKeyIsNotFound) {
  Start();
  absl::Status s = MakeOpener(S3())("s3://shards/train/nope.tar").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(Message(s),
            "s3://shards/train/nope.tar: HTTP 404 Not Found: NoSuchKey: The specified "
            "key does not exist.");
}

TEST_F(S3Test, SessionTokensAreSent) {
  Start({.session_token = "sessiontoken"});
  const std::string url = "s3://shards/train/shard-1.tar";
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(S3("testsecret", "sessiontoken"))(url);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Sha256(*ReadAll(**s)), Sha256(shards_.tar(1)));
  absl::Status missing = MakeOpener(S3())(url).status();
  EXPECT_TRUE(absl::IsPermissionDenied(missing)) << missing;
  EXPECT_THAT(Message(missing), HasSubstr("InvalidToken"));
}

TEST_F(S3Test, GcsHmacKeysGoThroughTheS3Interface) {
  Start({.access_key = "GOOGTESTID", .secret_key = "gcssecret", .region = "auto"});
  RemoteOptions o = Quick();
  o.gcs_endpoint = mock_->endpoint();
  o.gcs_hmac = AwsCredentials{"GOOGTESTID", "gcssecret", ""};
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)("gs://shards/train/shard-3.tar");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Sha256(*ReadAll(**s)), Sha256(shards_.tar(3)));
}

TEST_F(S3Test, WdsShardReadsS3WithTheEnvironmentsCredentials) {
  Start();
  testing::TempDir work;
  const std::string env =
      Cat("AWS_ENDPOINT_URL=", mock_->endpoint(),
          " AWS_ACCESS_KEY_ID=AKIDTEST AWS_SECRET_ACCESS_KEY=testsecret ", "AWS_REGION=us-east-1 ");
  testing::ToolRun ls = testing::RunCaptured(
      work.path(), Cat(env, testing::ToolPath("wds-shard"), " ls s3://shards/train/shard-0.tar"));
  ASSERT_EQ(ls.status, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("sample0_49"));
  testing::ToolRun denied = testing::RunCaptured(
      work.path(), Cat("AWS_ENDPOINT_URL=", mock_->endpoint(),
                       " AWS_ACCESS_KEY_ID=AKIDTEST AWS_SECRET_ACCESS_KEY=nope ",
                       testing::ToolPath("wds-shard"), " ls s3://shards/train/shard-0.tar"));
  EXPECT_NE(denied.status, 0);
  EXPECT_THAT(denied.err, HasSubstr("s3://shards/train/shard-0.tar: HTTP 403 Forbidden: "
                                    "SignatureDoesNotMatch"));
}

}  // namespace
}  // namespace wds
