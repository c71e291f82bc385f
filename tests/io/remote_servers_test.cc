// Remote shards through real servers started by the test on 127.0.0.1:
// Debian's nginx (http, and https with HTTP/2 and a self-signed certificate)
// and s3rver, an S3-compatible server that checks SigV4 signatures, filled
// through AWS's JavaScript client (tests/s3/s3.js under node). The
// shard set is read through each byte-exact, by the library, by wds-shard
// and by wds-bench.
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/internal/base/strings.h"
#include "wds/io/remote.h"
#include "wds/io/remote_upload.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/shard_writer.h"

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

// Quick: fast retries, but the default stall and connect timeouts (real
// servers under load may pause).
RemoteOptions Quick() {
  RemoteOptions o = testing::FastRemoteOptions();
  o.stall_timeout = RemoteOptions().stall_timeout;
  o.connect_timeout = RemoteOptions().connect_timeout;
  o.max_attempts = 3;
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

// JsonNumber returns the number after "key": in wds-bench's JSON line.
std::string JsonNumber(const std::string& json, const std::string& key) {
  const std::string field = Cat("\"", key, "\": ");
  const size_t at = json.find(field);
  if (at == std::string::npos) return "(no " + key + ")";
  const size_t begin = at + field.size();
  return json.substr(begin, json.find_first_of(",}", begin) - begin);
}

// ExpectSameBenchCounts checks that wds-bench read from a remote source what
// it reads from the local files: the samples, the batches and every byte.
void ExpectSameBenchCounts(const std::string& remote, const std::string& local, int samples) {
  EXPECT_EQ(JsonNumber(remote, "samples"), std::to_string(samples)) << remote;
  for (const char* key : {"samples", "batches", "bytes"}) {
    EXPECT_EQ(JsonNumber(remote, key), JsonNumber(local, key)) << key << "\n" << remote;
  }
  // Every .bin (10'000 + 400 i bytes for i < 50) and .cls (one digit) field.
  EXPECT_EQ(JsonNumber(local, "bytes"), std::to_string(kShards * (50 * 10'000 + 400 * 1225 + 50)))
      << local;
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
    // nginx logs a request once it has finished it, which may come after
    // the client has read the last byte.
    size_t count = 0;
    std::string log;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (count < 2u * kShards && std::chrono::steady_clock::now() < deadline) {
      if (!log.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      count = 0;
      log = nginx_->access_log();
      for (size_t at = log.find(protocol); at != std::string::npos;
           at = log.find(protocol, at + 1)) {
        ++count;
      }
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
  testing::ToolRun local = testing::RunCaptured(
      work.path(), Cat(testing::ToolPath("wds-bench"), " --json --decode none --epochs 1 ",
                       shards_.local_pattern()));
  ASSERT_EQ(local.status, 0) << local.err;
  ExpectSameBenchCounts(bench.out, local.out, 200);
}

// --- S3: s3rver, which checks every signature with the secret it knows

constexpr char kKeyId[] = "AKIDTEST";
constexpr char kSecret[] = "testsecret";

class S3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = testing::S3Server::Available(); !why.empty()) GTEST_SKIP() << why;
    // Buckets are directories: "shards" holds the set under "train/", and a
    // key with characters that need encoding.
    fs::create_directories(root_.path() + "/shards/train");
    for (int s = 0; s < kShards; ++s) {
      root_.Write(Cat("shards/train/shard-", s, ".tar"), shards_.tar(s));
    }
    root_.Write("shards/odd name+é=1.tar", shards_.tar(2));
    absl::StatusOr<std::unique_ptr<testing::S3Server>> server =
        testing::S3Server::Start(root_.path(), {{kKeyId, kSecret}, {"GOOGTESTID", "gcssecret"}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  RemoteOptions S3(std::string secret = kSecret, std::string token = "") const {
    RemoteOptions o = Quick();
    o.s3_endpoint = server_->endpoint();
    o.aws_credentials = AwsCredentials{kKeyId, std::move(secret), std::move(token)};
    return o;
  }
  // Env is the environment that points wds-shard and wds-bench at the server.
  std::string Env(const std::string& secret = kSecret) const {
    return Cat("AWS_ENDPOINT_URL=", server_->endpoint(), " AWS_ACCESS_KEY_ID=", kKeyId,
               " AWS_SECRET_ACCESS_KEY=", secret, " AWS_REGION=us-east-1 ");
  }

  ShardSet shards_;
  testing::TempDir root_;
  std::unique_ptr<testing::S3Server> server_;
};

TEST_F(S3Test, SignedReadsOfTheShardSetAreByteExact) {
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

// --- Writing: what RemoteUpload sends, s3rver checks (signatures) and stores,
// and AWS's own client reads back.

TEST_F(S3Test, UploadsInOnePutAndInPartsReadBackExactlyThroughAwsClient) {
  RemoteOptions o = S3();
  o.upload_part_size = int64_t{5} << 20;
  const std::string small = RandomBytes(1000, 1);
  const std::string large = RandomBytes((size_t{5} << 20) * 2 + 3, 2);
  for (const auto& [key, data] : std::vector<std::pair<std::string, std::string>>{
           {"up/small.tar", small}, {"up/large.tar", large}, {"up/odd name+é=1.bin", small}}) {
    absl::StatusOr<std::unique_ptr<RemoteUpload>> up =
        RemoteUpload::Create("s3://shards/" + key, o);
    ASSERT_TRUE(up.ok()) << up.status();
    // Writes of an odd size, so parts fill in the middle of one.
    for (size_t at = 0; at < data.size(); at += 700'001) {
      ASSERT_TRUE((*up)->Write(std::string_view(data).substr(at, 700'001)).ok()) << key;
    }
    ASSERT_TRUE((*up)->Close().ok()) << key;
    EXPECT_EQ((*up)->parts(), data.size() > 1000 ? 3 : 0) << key;
    absl::StatusOr<std::string> got = server_->Get("shards", key);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Sha256(*got), Sha256(data)) << key;
  }
}

TEST_F(S3Test, AnUploadWithAWrongSecretFailsAndLeavesNoObject) {
  absl::StatusOr<std::unique_ptr<RemoteUpload>> up =
      RemoteUpload::Create("s3://shards/up/refused.tar", S3("wrongsecret"));
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->Write("abc").ok());
  const absl::Status s = (*up)->Close();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(Message(s),
            "s3://shards/up/refused.tar: sending the object (3 bytes): HTTP 403 Forbidden: "
            "SignatureDoesNotMatch: The request signature we calculated does not match the "
            "signature you provided. Check your key and signing method.");
  EXPECT_TRUE(absl::IsNotFound(MakeOpener(S3())("s3://shards/up/refused.tar").status()));
}

TEST_F(S3Test, AShardWriterUploadsTheShardsAndIndexesALocalOneWrites) {
  const std::vector<Sample> samples = *ReadPipeline(shards_.local_pattern(), OpenUrl);
  testing::TempDir local, staging;
  auto write = [&](const std::string& pattern, ShardWriterOptions o) {
    o.maxcount = 70;
    o.write_index = true;
    absl::StatusOr<std::unique_ptr<ShardWriter>> w = ShardWriter::Create(pattern, o);
    EXPECT_TRUE(w.ok()) << w.status();
    for (const Sample& s : samples) EXPECT_TRUE((*w)->Write(s).ok());
    EXPECT_TRUE((*w)->Close().ok());
    return (*w)->shards_written();
  };
  ASSERT_EQ(write(local.path() + "/part-%02d.tar", {}), 3);
  ShardWriterOptions remote;
  remote.remote = S3();
  remote.staging_dir = staging.path();
  std::vector<std::string> closed;
  remote.on_close = [&](const ShardInfo& shard) {
    closed.push_back(shard.path);
    return absl::OkStatus();
  };
  ASSERT_EQ(write("s3://shards/out/part-%02d.tar", remote), 3);
  EXPECT_EQ(closed,
            (std::vector<std::string>{"s3://shards/out/part-00.tar", "s3://shards/out/part-01.tar",
                                      "s3://shards/out/part-02.tar"}));
  for (int n = 0; n < 3; ++n) {
    for (const std::string suffix : {"", ".idx"}) {
      const std::string name = Cat("part-0", n, ".tar", suffix);
      absl::StatusOr<std::string> got = server_->Get("shards", "out/" + name);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, testing::ReadFile(Cat(local.path(), "/", name))) << name;
    }
  }
  EXPECT_TRUE(fs::is_empty(staging.path()));
  ExpectSameSamples(*ReadPipeline("s3://shards/out/part-{00..02}.tar", MakeOpener(S3())), samples);
}

TEST_F(S3Test, AShardWriterWhoseUploadFailsSaysSoAndLeavesNothing) {
  const std::vector<Sample> samples = *ReadPipeline(shards_.local_pattern(), OpenUrl);
  testing::TempDir staging;
  ShardWriterOptions o;
  o.remote = S3("wrongsecret");
  o.staging_dir = staging.path();
  absl::StatusOr<std::unique_ptr<ShardWriter>> w =
      ShardWriter::Create("s3://shards/bad/part-%02d.tar", o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*w)->Write(samples[i]).ok());
  EXPECT_FALSE(fs::is_empty(staging.path()));  // the shard being written
  const absl::Status s = (*w)->Close();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(Message(s), StartsWith("s3://shards/bad/part-00.tar: sending the object ("));
  EXPECT_TRUE(fs::is_empty(staging.path()));
  EXPECT_EQ((*w)->shards_written(), 0);
  EXPECT_TRUE(absl::IsNotFound(MakeOpener(S3())("s3://shards/bad/part-00.tar").status()));

  // Only s3:// and gs:// are written in-process; the error comes at Create.
  o.remote = S3();
  EXPECT_EQ(Message(ShardWriter::Create("https://example.com/part-%02d.tar", o).status()),
            "https://example.com/part-00.tar: only s3:// and gs:// URLs are written in-process "
            "(write others through a command, pipe:curl -T - https://...)");
}

TEST_F(S3Test, AShardWriterWritesGsShardsWithHmacKeysThroughTheS3Interface) {
  // GCS's XML API takes S3's multipart uploads and SigV4 (region "auto");
  // the server checks the signatures and joins the parts.
  const std::vector<Sample> samples = *ReadPipeline(shards_.local_pattern(), OpenUrl);
  testing::TempDir staging;
  ShardWriterOptions o;
  o.maxcount = 70;
  o.staging_dir = staging.path();
  o.remote = Quick();
  o.remote->gcs_endpoint = server_->endpoint();
  o.remote->gcs_hmac = AwsCredentials{"GOOGTESTID", "gcssecret", ""};
  o.remote->upload_part_size = 5 << 20;
  absl::StatusOr<std::unique_ptr<ShardWriter>> w =
      ShardWriter::Create("gs://shards/gcs/p-%d.tar", o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const Sample& s : samples) ASSERT_TRUE((*w)->Write(s).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->shards_written(), 3);
  ExpectSameSamples(*ReadPipeline("gs://shards/gcs/p-{0..2}.tar", MakeOpener(*o.remote)), samples);
  // A multipart upload: 5 MiB and a bit, in two parts.
  const std::string big = Cat(std::string(5 << 20, 'x'), "tail");
  ASSERT_TRUE(UploadBytes(big, "gs://shards/gcs/big.bin", *o.remote).ok());
  EXPECT_EQ(Sha256(*server_->Get("shards", "gcs/big.bin")), Sha256(big));
  o.remote->gcs_hmac->secret_access_key = "wrong";
  const absl::Status refused = UploadBytes("x", "gs://shards/gcs/refused.bin", *o.remote);
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  o.remote->gcs_hmac->secret_access_key = "gcssecret";
  EXPECT_TRUE(absl::IsNotFound(MakeOpener(*o.remote)("gs://shards/gcs/refused.bin").status()));
}

TEST_F(S3Test, AWrongSecretIsAClear403) {
  const std::string url = "s3://shards/train/shard-0.tar";
  absl::Status s = MakeOpener(S3("wrongsecret"))(url).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(Message(s),
            Cat(url, ": HTTP 403 Forbidden: SignatureDoesNotMatch: The request signature we ",
                "calculated does not match the signature you provided. Check your key and ",
                "signing method."));
  RemoteOptions unknown = S3();
  unknown.aws_credentials->access_key_id = "AKIDNOBODY";
  s = MakeOpener(unknown)(url).status();
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_EQ(Message(s), Cat(url, ": HTTP 403 Forbidden: InvalidAccessKeyId: The AWS Access Key ",
                            "Id you provided does not exist in our records."));
}

TEST_F(S3Test, MissingKeyIsNotFound) {
  absl::Status s = MakeOpener(S3())("s3://shards/train/nope.tar").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(Message(s),
            "s3://shards/train/nope.tar: HTTP 404 Not Found: NoSuchKey: The specified "
            "key does not exist.");
}

TEST_F(S3Test, ASessionTokenIsSigned) {
  // s3rver has no STS to check the token itself, but the token's header is
  // one of the signed ones: a signature that left it out, or signed another
  // value, would not match. (remote_test checks that it is sent.)
  const std::string url = "s3://shards/train/shard-1.tar";
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(S3(kSecret, "sessiontoken"))(url);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Sha256(*ReadAll(**s)), Sha256(shards_.tar(1)));
}

TEST_F(S3Test, GcsHmacKeysGoThroughTheS3Interface) {
  RemoteOptions o = Quick();
  o.gcs_endpoint = server_->endpoint();
  o.gcs_hmac = AwsCredentials{"GOOGTESTID", "gcssecret", ""};
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)("gs://shards/train/shard-3.tar");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Sha256(*ReadAll(**s)), Sha256(shards_.tar(3)));
  o.gcs_hmac->secret_access_key = "wrong";
  EXPECT_TRUE(absl::IsPermissionDenied(MakeOpener(o)("gs://shards/train/shard-3.tar").status()));
}

TEST_F(S3Test, SkipsAndOffsetsAreRangedRequestsByteExact) {
  RemoteOptions o = S3();
  o.skip_by_request = 1;
  o.read_ahead = 64 << 10;
  const std::string& tar = shards_.tar(0);
  const int64_t size = static_cast<int64_t>(tar.size());
  RemoteOpener remote(o);
  absl::StatusOr<std::unique_ptr<ByteStream>> at =
      remote.OpenAt("s3://shards/train/shard-0.tar", size / 3);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(Sha256(*ReadAll(**at)), Sha256(tar.substr(size / 3)));

  absl::StatusOr<std::unique_ptr<ByteStream>> s = remote.Open("s3://shards/train/shard-0.tar");
  ASSERT_TRUE(s.ok()) << s.status();
  std::string head(1000, '\0');
  ASSERT_EQ(*(*s)->Read(head.data(), head.size()), 1000u);
  const int64_t skip = size / 2 - 1000;
  absl::StatusOr<int64_t> skipped = (*s)->Skip(skip);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, skip);
  EXPECT_EQ(Sha256(head + *ReadAll(**s)), Sha256(tar.substr(0, 1000) + tar.substr(size / 2)));
}

TEST_F(S3Test, AnObjectReplacedBeforeASkipIsAborted) {
  // s3rver ignores If-Match: it answers the new version's bytes with a 206.
  // The client compares that answer's ETag with the one it started with.
  RemoteOptions o = S3();
  o.skip_by_request = 1;
  o.read_ahead = 64 << 10;
  const std::string url = "s3://shards/train/shard-0.tar";
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url);
  ASSERT_TRUE(s.ok()) << s.status();
  char head[1000];
  ASSERT_TRUE((*s)->Read(head, sizeof(head)).ok());
  ASSERT_TRUE(server_->Put("shards", "train/shard-0.tar", shards_.tar(1)).ok());
  const int64_t offset = static_cast<int64_t>(shards_.tar(0).size()) / 2;
  ASSERT_TRUE((*s)->Skip(offset - 1000).ok());
  absl::Status changed = ReadAll(**s).status();
  EXPECT_TRUE(absl::IsAborted(changed)) << changed;
  EXPECT_THAT(Message(changed),
              StartsWith(Cat(url, ": the object changed while it was read (ETag \"")));
  EXPECT_THAT(Message(changed), HasSubstr(Cat("\" at offset ", offset, ")")));
}

TEST_F(S3Test, WdsShardReadsS3WithTheEnvironmentsCredentials) {
  testing::TempDir work;
  testing::ToolRun ls = testing::RunCaptured(
      work.path(), Cat(Env(), testing::ToolPath("wds-shard"), " ls s3://shards/train/shard-0.tar"));
  ASSERT_EQ(ls.status, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("sample0_49"));
  testing::ToolRun denied = testing::RunCaptured(
      work.path(),
      Cat(Env("nope"), testing::ToolPath("wds-shard"), " ls s3://shards/train/shard-0.tar"));
  EXPECT_NE(denied.status, 0);
  EXPECT_THAT(denied.err, HasSubstr("s3://shards/train/shard-0.tar: HTTP 403 Forbidden: "
                                    "SignatureDoesNotMatch"));
}

TEST_F(S3Test, WdsShardCreateUploadsWhatItWritesLocally) {
  testing::TempDir work;
  const std::string inputs =
      Cat(shards_.docroot(), "/shards/shard-0.tar ", shards_.docroot(), "/shards/shard-1.tar");
  const std::string create =
      Cat(testing::ToolPath("wds-shard"), " create --maxcount 40 --index --workers 2 --output ");
  testing::ToolRun local =
      testing::RunCaptured(work.path(), Cat(create, "out/t-%02d.tar ", inputs));
  ASSERT_EQ(local.status, 0) << local.err;
  testing::ToolRun remote = testing::RunCaptured(
      work.path(),
      Cat(Env(), "TMPDIR=", work.path(), " ", create, "s3://shards/made/t-%02d.tar ", inputs));
  ASSERT_EQ(remote.status, 0) << remote.err;
  EXPECT_THAT(remote.err, HasSubstr("wrote 3 shard(s), 100 samples"));
  EXPECT_THAT(remote.err, HasSubstr("s3://shards/made/t-00.tar .. s3://shards/made/t-02.tar"));
  for (const std::string name : {"t-00.tar", "t-01.tar", "t-02.tar", "t-00.tar.idx", "t-01.tar.idx",
                                 "t-02.tar.idx", "t-shardindex.json"}) {
    absl::StatusOr<std::string> got = server_->Get("shards", "made/" + name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, testing::ReadFile(Cat(work.path(), "/out/", name))) << name;
  }
  // Nothing staged is left behind.
  for (const auto& entry : fs::directory_iterator(work.path())) {
    EXPECT_FALSE(wds::StartsWith(entry.path().filename().string(), "wds-shard-")) << entry.path();
  }
}

TEST_F(S3Test, AProfileOfASharedCredentialsFileIsRead) {
  testing::TempDir work;
  work.Write("credentials",
             Cat("[default]\naws_access_key_id = AKIDNOBODY\n",
                 "aws_secret_access_key = nothing\n\n[training]\n", "aws_access_key_id = ", kKeyId,
                 "\naws_secret_access_key = ", kSecret, "\naws_session_token = tok\n"));
  const std::string env =
      Cat("AWS_ENDPOINT_URL=", server_->endpoint(), " AWS_SHARED_CREDENTIALS_FILE=", work.path(),
          "/credentials ", "AWS_DEFAULT_REGION=eu-west-3 ");
  const std::string ls = Cat(testing::ToolPath("wds-shard"), " ls s3://shards/train/shard-2.tar");
  testing::ToolRun profile =
      testing::RunCaptured(work.path(), Cat(env, "AWS_PROFILE=training ", ls));
  ASSERT_EQ(profile.status, 0) << profile.err;
  EXPECT_THAT(profile.out, HasSubstr("sample2_49"));
  // Without AWS_PROFILE, [default] is used, whose key s3rver does not know.
  testing::ToolRun fallback = testing::RunCaptured(work.path(), Cat(env, ls));
  EXPECT_NE(fallback.status, 0);
  EXPECT_THAT(fallback.err, HasSubstr("s3://shards/train/shard-2.tar: HTTP 403 Forbidden: "
                                      "InvalidAccessKeyId"));
  testing::ToolRun missing = testing::RunCaptured(work.path(), Cat(env, "AWS_PROFILE=nosuch ", ls));
  EXPECT_NE(missing.status, 0);
  EXPECT_THAT(missing.err, HasSubstr(Cat("s3://shards/train/shard-2.tar: AWS credentials: ",
                                         work.path(), "/credentials: no profile [nosuch]")));
}

TEST_F(S3Test, WdsBenchReadsS3) {
  testing::TempDir work;
  const std::string args = " --json --decode none --epochs 1 ";
  testing::ToolRun bench = testing::RunCaptured(
      work.path(),
      Cat(Env(), testing::ToolPath("wds-bench"), args, "s3://shards/train/shard-{0..3}.tar"));
  ASSERT_EQ(bench.status, 0) << bench.err;
  testing::ToolRun local = testing::RunCaptured(
      work.path(), Cat(testing::ToolPath("wds-bench"), args, shards_.local_pattern()));
  ASSERT_EQ(local.status, 0) << local.err;
  ExpectSameBenchCounts(bench.out, local.out, 200);
}

}  // namespace
}  // namespace wds
