// Remote streams against the in-process fault server: every fault the
// reader must survive is recovered with the object's exact bytes (compared
// by SHA-256), and every fault it must not survive fails with the documented
// code and a message naming the URL.
#include "wds/remote.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "remote_test_util.h"
#include "test_util.h"
#include "wds/internal/strings.h"
#include "wds/loader.h"
#include "wds/pipeline.h"

namespace wds {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::wds::testing::FaultPlan;
using ::wds::testing::FaultRequest;
using ::wds::testing::FaultServer;
using ::wds::testing::Sha256;

std::string RandomBytes(size_t size, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// Fast limits so that a fault costs milliseconds, not the defaults' seconds.
RemoteOptions Fast() {
  RemoteOptions o;
  o.backoff_base = std::chrono::milliseconds(1);
  o.backoff_cap = std::chrono::milliseconds(10);
  o.stall_timeout = std::chrono::milliseconds(300);
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.max_attempts = 6;
  o.aws_credentials_file = "/nonexistent";
  return o;
}

absl::StatusOr<std::string> ReadAll(ByteStream& stream, size_t chunk = 100'000) {
  std::string out;
  std::vector<char> buffer(chunk);
  while (true) {
    absl::StatusOr<size_t> n = stream.Read(buffer.data(), buffer.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buffer.data(), *n);
  }
}

absl::StatusOr<std::string> Fetch(const std::string& url, const RemoteOptions& options) {
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = MakeOpener(options)(url);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<std::string> data = ReadAll(**stream);
  if (!data.ok()) return data.status();
  if (absl::Status s = (*stream)->Finish(); !s.ok()) return s;
  return data;
}

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class RemoteStreamTest : public ::testing::Test {
 protected:
  RemoteStreamTest() : body_(RandomBytes(1'000'000)) { server_.Put("/obj.tar", body_); }
  std::string url() const { return server_.Url("/obj.tar"); }
  // FirstThen answers the first request with `first`, the others normally.
  void FirstThen(FaultPlan first) {
    server_.SetPlanner(
        [first](const FaultRequest& r) { return r.index == 0 ? first : FaultPlan(); });
  }
  void ExpectExact(const RemoteOptions& options = Fast()) {
    absl::StatusOr<std::string> data = Fetch(url(), options);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->size(), body_.size());
    EXPECT_EQ(Sha256(*data), Sha256(body_));
  }
  // ResumedAt checks that request `index` asked for the rest from `offset`
  // of the version first read.
  void ExpectResumedAt(int index, int64_t offset) {
    std::vector<FaultRequest> log = server_.log();
    ASSERT_GT(static_cast<int>(log.size()), index);
    EXPECT_EQ(log[index].headers["range"], Cat("bytes=", offset, "-"));
    EXPECT_EQ(log[index].headers["if-match"], "\"v1\"");
  }

  std::string body_;
  FaultServer server_;
};

TEST_F(RemoteStreamTest, WholeObjectIsByteExact) {
  ExpectExact();
  EXPECT_EQ(server_.requests(), 1);
  EXPECT_EQ(server_.log()[0].headers.count("range"), 0u);
}

TEST_F(RemoteStreamTest, OneOpenerReusesItsConnection) {
  Opener open = MakeOpener(Fast());
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::unique_ptr<ByteStream>> s = open(url());
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(ReadAll(**s).ok());
  }
  EXPECT_EQ(server_.requests(), 3);
  EXPECT_EQ(server_.connections(), 1);
}

TEST_F(RemoteStreamTest, ConnectionClosedMidBodyIsResumed) {
  FirstThen({.close_after = 300'001});
  ExpectExact();
  EXPECT_EQ(server_.requests(), 2);
  ExpectResumedAt(1, 300'001);
}

TEST_F(RemoteStreamTest, ConnectionResetMidBodyIsResumed) {
  FirstThen({.close_after = 500'000, .reset = true});
  ExpectExact();
  EXPECT_EQ(server_.requests(), 2);
  // Bytes in flight when the RST came are lost to the client: it resumes
  // from what it really got, which is at most what the server sent.
  std::vector<FaultRequest> log = server_.log();
  EXPECT_THAT(log[1].headers["range"], StartsWith("bytes="));
}

TEST_F(RemoteStreamTest, RepeatedFaultsAreEachResumed) {
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index < 4 ? FaultPlan{.close_after = 100'000} : FaultPlan();
  });
  ExpectExact();
  EXPECT_EQ(server_.requests(), 5);
  ExpectResumedAt(4, 400'000);
}

TEST_F(RemoteStreamTest, StalledServerIsAbandonedAndResumed) {
  FirstThen({.stall_after = 200'000, .stall_ms = 10'000});
  const auto start = std::chrono::steady_clock::now();
  ExpectExact();
  // stall_timeout is 300 ms: well before the 10 s stall ends.
  EXPECT_LT(Seconds(start), 3.0);
  ExpectResumedAt(1, 200'000);
}

TEST_F(RemoteStreamTest, StallBeforeTheHeadersIsAbandoned) {
  server_.SetPlanner([](const FaultRequest& r) {
    // A stall at byte 0 of a body is a stall after the headers; before them,
    // the planner itself takes its time.
    if (r.index == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return FaultPlan();
  });
  const auto start = std::chrono::steady_clock::now();
  ExpectExact();
  EXPECT_LT(Seconds(start), 1.4);
}

TEST_F(RemoteStreamTest, ASlowReaderIsNotAStall) {
  RemoteOptions o = Fast();
  o.stall_timeout = std::chrono::milliseconds(200);
  o.read_ahead = 64 << 10;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  std::string data;
  std::vector<char> buffer(250'000);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<size_t> n = (*s)->Read(buffer.data(), buffer.size());
    ASSERT_TRUE(n.ok()) << n.status();
    data.append(buffer.data(), *n);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(data + *rest), Sha256(body_));
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, NoResponseIsRetried) {
  FirstThen({.no_response = true});
  ExpectExact();
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteStreamTest, ServiceUnavailableHonoursRetryAfter) {
  FirstThen({.status = 503, .body = "busy", .extra_headers = "Retry-After: 1\r\n"});
  const auto start = std::chrono::steady_clock::now();
  ExpectExact();
  EXPECT_GE(Seconds(start), 0.95);
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteStreamTest, TransientStatusesAreRetried) {
  for (int status : {408, 429, 500, 502, 504}) {
    FaultServer server;
    server.Put("/x", "payload");
    server.SetPlanner([status](const FaultRequest& r) {
      return r.index == 0 ? FaultPlan{.status = status} : FaultPlan();
    });
    absl::StatusOr<std::string> data = Fetch(server.Url("/x"), Fast());
    ASSERT_TRUE(data.ok()) << status << ": " << data.status();
    EXPECT_EQ(*data, "payload");
    EXPECT_EQ(server.requests(), 2) << status;
  }
}

TEST_F(RemoteStreamTest, RetryAfterBeyondTheRetryTimeGivesUpAtOnce) {
  server_.SetPlanner([](const FaultRequest&) {
    return FaultPlan{.status = 503, .extra_headers = "Retry-After: 3600\r\n"};
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_LT(Seconds(start), 1.0);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(), ": giving up at offset 0 after 1 failed attempt")));
  EXPECT_THAT(Message(s), HasSubstr("would pass max_retry_time"));
  EXPECT_THAT(Message(s), HasSubstr("HTTP 503"));
}

TEST_F(RemoteStreamTest, PersistentFailureGivesUpAfterMaxAttempts) {
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.status = 500, .body = "oops"}; });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": giving up at offset 0 after 6 failed attempt(s) in a row; ",
                            "last error: HTTP 500 Planned: oops"));
  EXPECT_EQ(server_.requests(), 6);
}

TEST_F(RemoteStreamTest, FailuresMidBodyAreCountedPerRun) {
  // Eight faults in all, but never more than one in a row without progress:
  // max_attempts (6) limits runs, not the total.
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index < 8 ? FaultPlan{.close_after = 50'000} : FaultPlan();
  });
  ExpectExact();
  EXPECT_EQ(server_.requests(), 9);
}

TEST_F(RemoteStreamTest, ObjectChangedBetweenRequestsIsAborted) {
  server_.SetPlanner([this](const FaultRequest& r) {
    if (r.index == 0) return FaultPlan{.close_after = 400'000};
    // The object is replaced before the resumed request is answered.
    server_.Put("/obj.tar", RandomBytes(1'000'000, 99), "\"v2\"");
    return FaultPlan();
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": the object changed while it was read (HTTP 412 to a ",
                            "request for offset 400000 with If-Match: \"v1\")"));
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteStreamTest, RangeAnsweredWithTheWholeObjectIsDataLoss) {
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index == 0 ? FaultPlan{.close_after = 1000} : FaultPlan{.ignore_range = true};
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": HTTP 200 to a request for bytes from offset 1000 on ",
                            "(expected 206 Partial Content): the server does not resume, and the ",
                            "object cannot be read past the fault"));
}

TEST_F(RemoteStreamTest, WrongContentRangeIsDataLoss) {
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index == 0 ? FaultPlan{.close_after = 1000} : FaultPlan{.content_range_skew = 1};
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": wrong Content-Range 'bytes 1001-1000000/1000000' to a ",
                            "request for bytes 1000-999999/1000000"));
}

TEST_F(RemoteStreamTest, NoValidatorMeansNoResume) {
  server_.SetPlanner(
      [](const FaultRequest&) { return FaultPlan{.close_after = 1000, .no_validators = true}; });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(),
                                         ": cannot resume at offset 1000 safely: the server "
                                         "sent no strong ETag and no Last-Modified to check the "
                                         "object by; the failure: ")));
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, WeakEtagResumesWithIfUnmodifiedSince) {
  server_.Put("/weak", body_, "W/\"weak\"");
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index == 0 ? FaultPlan{.close_after = 1000} : FaultPlan();
  });
  absl::StatusOr<std::string> data = Fetch(server_.Url("/weak"), Fast());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Sha256(*data), Sha256(body_));
  FaultRequest second = server_.log()[1];
  EXPECT_EQ(second.headers.count("if-match"), 0u);
  EXPECT_EQ(second.headers["if-unmodified-since"], "Tue, 15 Nov 1994 12:45:26 GMT");
}

TEST_F(RemoteStreamTest, NotFoundFailsAtOnceWithTheServersMessage) {
  const std::string missing = server_.Url("/missing.tar");
  absl::Status s = Fetch(missing, Fast()).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(Message(s), Cat(missing, ": HTTP 404 Not Found: 404 Not Found"));
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, ClientErrorsFailAtOnce) {
  const std::string xml =
      "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
      "</Error>";
  struct Case {
    int status;
    absl::StatusCode code;
  };
  for (Case c :
       {Case{400, absl::StatusCode::kInvalidArgument},
        Case{401, absl::StatusCode::kPermissionDenied},
        Case{403, absl::StatusCode::kPermissionDenied}, Case{410, absl::StatusCode::kNotFound}}) {
    FaultServer server;
    server.SetPlanner(
        [&](const FaultRequest&) { return FaultPlan{.status = c.status, .body = xml}; });
    absl::Status s = Fetch(server.Url("/x.tar"), Fast()).status();
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_EQ(Message(s), Cat(server.Url("/x.tar"), ": HTTP ", c.status,
                              " Planned: AccessDenied: Access Denied"));
    EXPECT_EQ(server.requests(), 1);
  }
}

TEST_F(RemoteStreamTest, NothingListeningIsRetriedThenUnavailable) {
  RemoteOptions o = Fast();
  o.max_attempts = 3;
  const std::string url = Cat("http://127.0.0.1:", testing::FreePort(), "/x.tar");
  absl::Status s = Fetch(url, o).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url,
                                         ": giving up at offset 0 after 3 failed attempt(s) "
                                         "in a row; last error: Couldn't connect to server")));
}

TEST_F(RemoteStreamTest, MalformedUrlsAreInvalidArgument) {
  absl::Status s = Fetch("http://[::1/x.tar", Fast()).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(Message(s), StartsWith("http://[::1/x.tar: URL using bad/illegal format"));
  EXPECT_EQ(Fetch("s3://bucket-only", Fast()).status().message(),
            "s3://bucket-only: no object key (expected scheme://bucket/key)");
}

TEST_F(RemoteStreamTest, StreamsAreIndependentOfEachOther) {
  // Two streams of one opener read interleaved: each keeps its own transfer.
  server_.Put("/b", RandomBytes(300'000, 3));
  Opener open = MakeOpener(Fast());
  auto a = open(url());
  auto b = open(server_.Url("/b"));
  ASSERT_TRUE(a.ok() && b.ok());
  std::string da, db;
  std::vector<char> buffer(7777);
  bool a_done = false, b_done = false;
  while (!a_done || !b_done) {
    for (auto [s, out, done] : {std::tie(*a, da, a_done), std::tie(*b, db, b_done)}) {
      if (done) continue;
      absl::StatusOr<size_t> n = s->Read(buffer.data(), buffer.size());
      ASSERT_TRUE(n.ok()) << n.status();
      out.append(buffer.data(), *n);
      done = *n == 0;
    }
  }
  EXPECT_EQ(Sha256(da), Sha256(body_));
  EXPECT_EQ(Sha256(db), Sha256(RandomBytes(300'000, 3)));
}

TEST_F(RemoteStreamTest, GcsBearerTokenIsSent) {
  RemoteOptions o = Fast();
  o.gcs_endpoint = Cat("http://127.0.0.1:", server_.port());
  o.gcs_token = "ya29.secret";
  server_.Put("/bucket/dir/x.tar", "gcs bytes");
  absl::StatusOr<std::string> data = Fetch("gs://bucket/dir/x.tar", o);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "gcs bytes");
  EXPECT_EQ(server_.log()[0].headers["authorization"], "Bearer ya29.secret");
}

TEST(RemoteOptionsTest, EnvironmentVariablesAreRead) {
  setenv("WDS_CACHE", "/tmp/some-cache", 1);
  setenv("WDS_CACHE_SIZE", "1.5G", 1);
  setenv("AWS_REGION", "eu-central-1", 1);
  setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000", 1);
  absl::StatusOr<RemoteOptions> o = RemoteOptions::ParseFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache_dir, "/tmp/some-cache");
  EXPECT_EQ(o->cache_size, int64_t{3} << 29);
  EXPECT_EQ(o->s3_region, "eu-central-1");
  EXPECT_EQ(o->s3_endpoint, "http://127.0.0.1:9000");
  setenv("WDS_CACHE_SIZE", "1e9", 1);
  EXPECT_EQ(RemoteOptions::ParseFromEnvironment()->cache_size, 1'000'000'000);
  setenv("WDS_CACHE_SIZE", "lots", 1);
  absl::Status bad = RemoteOptions::ParseFromEnvironment().status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_EQ(Message(bad),
            "WDS_CACHE_SIZE='lots' is not a byte count (e.g. 50000000000, 5e10, 50G)");
  // FromEnvironment keeps the variables that parse.
  EXPECT_EQ(RemoteOptions::FromEnvironment().cache_dir, "/tmp/some-cache");
  EXPECT_EQ(RemoteOptions::FromEnvironment().cache_size, 0);
  for (const char* v : {"WDS_CACHE", "WDS_CACHE_SIZE", "AWS_REGION", "AWS_ENDPOINT_URL"}) {
    unsetenv(v);
  }
}

TEST(RemoteOptionsTest, IsRemoteUrl) {
  EXPECT_TRUE(IsRemoteUrl("http://h/x"));
  EXPECT_TRUE(IsRemoteUrl("HTTPS://h/x"));
  EXPECT_TRUE(IsRemoteUrl("s3://b/k"));
  EXPECT_TRUE(IsRemoteUrl("gs://b/k"));
  EXPECT_FALSE(IsRemoteUrl("ftp://h/x"));
  EXPECT_FALSE(IsRemoteUrl("data/x.tar"));
  EXPECT_FALSE(IsRemoteUrl("pipe:curl http://h/x"));
}

TEST(RemoteOptionsTest, OpenUrlReadsRemoteUrls) {
  FaultServer server;
  server.Put("/x", "through OpenUrl");
  absl::StatusOr<std::unique_ptr<ByteStream>> s = OpenUrl(server.Url("/x"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*ReadAll(**s), "through OpenUrl");
  EXPECT_EQ((*s)->url(), server.Url("/x"));
}

// --- the pipeline over remote shards

std::vector<testing::TarEntry> ShardEntries(int shard, int samples) {
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < samples; ++i) {
    const std::string key = Cat("s", shard, "_", i);
    entries.push_back({key + ".bin", RandomBytes(20'000 + i, shard * 1000 + i)});
    entries.push_back({key + ".cls", std::to_string(i % 10)});
  }
  return entries;
}

TEST(RemotePipelineTest, FaultyShardsGiveTheSameSamplesAsLocalFiles) {
  FaultServer server;
  testing::TempDir dir;
  for (int shard = 0; shard < 3; ++shard) {
    const std::string tar = testing::MakeTar(ShardEntries(shard, 40));
    server.Put(Cat("/shard-", shard, ".tar"), tar);
    dir.Write(Cat("shard-", shard, ".tar"), tar);
  }
  // Every first request of each shard is cut short.
  server.SetPlanner([](const FaultRequest& r) {
    return r.headers.count("range") == 0 ? FaultPlan{.close_after = 123'457} : FaultPlan();
  });
  auto read = [](const std::string& pattern, Opener opener) {
    absl::StatusOr<Pipeline> p = WebDataset(pattern, {.opener = std::move(opener)});
    EXPECT_TRUE(p.ok()) << p.status();
    std::unique_ptr<SampleStream> stream = p->Open({});
    return testing::Drain(*stream);
  };
  absl::StatusOr<std::vector<Sample>> remote =
      read(Cat("http://127.0.0.1:", server.port(), "/shard-{0..2}.tar"), MakeOpener(Fast()));
  absl::StatusOr<std::vector<Sample>> local = read(dir.path() + "/shard-{0..2}.tar", OpenUrl);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(remote->size(), 120u);
  ASSERT_EQ(testing::Keys(*remote), testing::Keys(*local));
  for (size_t i = 0; i < local->size(); ++i) {
    EXPECT_EQ(testing::FieldText((*remote)[i], "bin"), testing::FieldText((*local)[i], "bin"));
    EXPECT_THAT(testing::FieldText((*remote)[i], "__url__"), StartsWith("http://127.0.0.1:"));
  }
  EXPECT_EQ(server.requests(), 6);
}

TEST(RemotePipelineTest, EachLoaderWorkerKeepsOneConnection) {
  FaultServer server;
  for (int shard = 0; shard < 6; ++shard) {
    server.Put(Cat("/shard-", shard, ".tar"), testing::MakeTar(ShardEntries(shard, 10)));
  }
  absl::StatusOr<Pipeline> p =
      WebDataset(Cat("http://127.0.0.1:", server.port(), "/shard-{0..5}.tar"), {});
  ASSERT_TRUE(p.ok());
  Loader loader(*p, {.workers = 2, .rank = 0, .world_size = 1});
  int samples = 0;
  for (const Sample& s : loader) samples += s.Has("bin") ? 1 : 0;
  EXPECT_EQ(samples, 60);
  EXPECT_EQ(server.requests(), 6);
  EXPECT_LE(server.connections(), 2);
}

TEST(RemotePipelineTest, ARemoteShardErrorGoesToTheHandler) {
  FaultServer server;
  server.Put("/shard-0.tar", testing::MakeTar(ShardEntries(0, 5)));
  server.Put("/shard-2.tar", testing::MakeTar(ShardEntries(2, 5)));
  absl::StatusOr<Pipeline> p =
      WebDataset(Cat("http://127.0.0.1:", server.port(), "/shard-{0..2}.tar"),
                 {.handler = Handler::kWarnAndContinue, .opener = MakeOpener(Fast())});
  ASSERT_TRUE(p.ok());
  auto counters = std::make_shared<ErrorCounters>();
  WorkerContext ctx;
  ctx.errors = counters;
  std::unique_ptr<SampleStream> stream = p->Open(ctx);
  absl::StatusOr<std::vector<Sample>> samples = testing::Drain(*stream);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->size(), 10u);
  EXPECT_EQ(counters->Total(), 1);
}

}  // namespace
}  // namespace wds
