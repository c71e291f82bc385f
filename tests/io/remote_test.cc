// Remote streams against the in-process fault server: every fault the
// reader must survive is recovered with the object's exact bytes (compared
// by SHA-256), and every fault it must not survive fails with the documented
// code and a message naming the URL.
#include "wds/io/remote.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/remote_stream.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/loader/loader.h"
#include "wds/pipeline/pipeline.h"
#include "wds/pipeline/web_dataset.h"
#include "wds/tar/tar_reader.h"

namespace wds {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::wds::testing::FaultPlan;
using ::wds::testing::ScopedEnv;
using ::wds::testing::FaultRequest;
using ::wds::testing::FaultServer;
using ::wds::testing::Sha256;

std::string RandomBytes(size_t size, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

RemoteOptions Fast() { return testing::FastRemoteOptions(); }

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
  // Bytes still in flight when an RST arrives are lost to the client, so the
  // server pauses (less than stall_timeout) until the client has all 500'000
  // before it resets: the resumed request must start exactly there.
  FirstThen({.close_after = 500'000, .reset = true, .stall_after = 500'000, .stall_ms = 150});
  ExpectExact();
  EXPECT_EQ(server_.requests(), 2);
  ExpectResumedAt(1, 500'000);
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
  ExpectExact();
  // A second request, from where the stall began, is the abandonment: had the
  // reader waited out the 10 s stall, the first would have ended the object.
  ExpectResumedAt(1, 200'000);
}

TEST_F(RemoteStreamTest, StallBeforeTheHeadersIsAbandoned) {
  server_.SetPlanner([](const FaultRequest& r) {
    // A stall at byte 0 of a body is a stall after the headers; before them,
    // the planner itself takes its time.
    if (r.index == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5000));
    return FaultPlan();
  });
  ExpectExact();
  // The second request is the abandonment: waiting out the first would have
  // needed no other.
  EXPECT_EQ(server_.requests(), 2);
}

// StopAfter makes the calling thread's interrupt check fail with "stopped"
// `ms` milliseconds after construction (as a Loader stopping its workers, or
// Python on Ctrl-C, does).
class StopAfter {
 public:
  explicit StopAfter(int ms)
      : deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)), check_([this] {
          return std::chrono::steady_clock::now() < deadline_ ? absl::OkStatus()
                                                              : absl::CancelledError("stopped");
        }) {}

 private:
  std::chrono::steady_clock::time_point deadline_;
  ScopedInterruptCheck check_;
};

TEST_F(RemoteStreamTest, AnInterruptCheckEndsAStalledReadUnretried) {
  FirstThen({.stall_after = 200'000, .stall_ms = 10'000});
  RemoteOptions o = Fast();
  o.stall_timeout = std::chrono::seconds(30);
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  {
    StopAfter stop(300);
    status = ReadAll(**s).status();
  }
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(Message(status), Cat(url(), ": stopped"));
  // Liveness, with room for a loaded machine: asked only after the 10 s
  // stall, the check would end the read after it.
  EXPECT_LT(Seconds(start), 5.0);
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, AnInterruptCheckEndsTheWaitBeforeARetry) {
  FirstThen({.status = 503, .body = "busy", .extra_headers = "Retry-After: 30\r\n"});
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  {
    StopAfter stop(300);
    status = MakeOpener(Fast())(url()).status();
  }
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(Message(status), "stopped");
  // Liveness, with room for a loaded machine: asked only after the 30 s
  // wait, the check would end it there.
  EXPECT_LT(Seconds(start), 15.0);
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, ASlowReaderIsNotAStall) {
  RemoteOptions o = Fast();
  o.stall_timeout = std::chrono::milliseconds(1000);
  o.read_ahead = 64 << 10;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  std::string data;
  std::vector<char> buffer(250'000);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<size_t> n = (*s)->Read(buffer.data(), buffer.size());
    ASSERT_TRUE(n.ok()) << n.status();
    data.append(buffer.data(), *n);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // longer than a stall
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
  // Liveness, with room for a loaded machine: the wait would be an hour.
  EXPECT_LT(Seconds(start), 30.0);
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
  // Eight faults in all, each after 100'000 bytes (more than kMinProgress):
  // never more than one in a row without progress, and max_attempts (6)
  // limits runs, not the total.
  server_.SetPlanner([](const FaultRequest& r) {
    return r.index < 8 ? FaultPlan{.close_after = 100'000} : FaultPlan();
  });
  ExpectExact();
  EXPECT_EQ(server_.requests(), 9);
  ExpectResumedAt(8, 800'000);
}

TEST_F(RemoteStreamTest, TinyProgressDoesNotEndARunOfFailures) {
  // A server that cuts every connection after 1000 bytes moves the offset
  // on, but never by kMinProgress: its failures count as one run.
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.close_after = 1000}; });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(), ": giving up at offset 6000 of 1000000 after 6 ",
                                         "failed attempt(s) in a row; last error: ")));
  EXPECT_EQ(server_.requests(), 6);
}

TEST_F(RemoteStreamTest, ADrippingServerIsAbandonedAndResumed) {
  // After 100 bytes, one byte every 100 ms: never silent for stall_timeout,
  // but far below low_speed_limit.
  FirstThen({.drip_after = 100, .drip_ms = 100});
  RemoteOptions o = Fast();
  o.low_speed_limit = 1000;
  o.low_speed_time = std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  ExpectExact(o);
  // Liveness, with room for a loaded machine (about 2 s unloaded): the drip
  // would take a day.
  EXPECT_LT(Seconds(start), 30.0);
  EXPECT_EQ(server_.requests(), 2);
  const std::string range = server_.log()[1].headers["range"];
  ASSERT_THAT(range, StartsWith("bytes="));
  // The drip delivered a few bytes more before it was abandoned.
  const int64_t resumed_at = std::stoll(range.substr(6));
  EXPECT_GE(resumed_at, 100);
  EXPECT_LT(resumed_at, 200);
}

TEST_F(RemoteStreamTest, APersistentlyDrippingServerFailsInBoundedTime) {
  server_.SetPlanner(
      [](const FaultRequest&) { return FaultPlan{.drip_after = 0, .drip_ms = 100}; });
  RemoteOptions o = Fast();
  o.low_speed_limit = 1000;
  o.low_speed_time = std::chrono::seconds(1);
  o.max_attempts = 3;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = Fetch(url(), o).status();
  // Three requests, each abandoned after about low_speed_time (libcurl
  // measures at one-second ticks): drips are no progress. Liveness, with room
  // for a loaded machine (about 5 s unloaded): the drip would take a day.
  EXPECT_LT(Seconds(start), 30.0);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(), ": giving up at offset ")));
  EXPECT_THAT(Message(s), HasSubstr(" after 3 failed attempt(s) in a row; last error: "
                                    "Timeout was reached: Operation too slow."));
  EXPECT_EQ(server_.requests(), 3);
}

TEST(RemoteOptionsTest, DefaultsBoundASlowServer) {
  const RemoteOptions o;
  EXPECT_EQ(o.low_speed_limit, 1024);
  EXPECT_EQ(o.low_speed_time, std::chrono::seconds(60));
  EXPECT_EQ(o.stall_timeout, std::chrono::seconds(30));
  EXPECT_EQ(o.max_attempts, 10);
  EXPECT_EQ(o.max_retry_time, std::chrono::minutes(5));
  EXPECT_EQ(o.skip_by_request, 4 << 20);
}

TEST_F(RemoteStreamTest, A206OfAnotherVersionIsAborted) {
  // A server (or cache in between) that ignores If-Match answers the new
  // version's bytes with a 206: its ETag gives it away.
  server_.SetPlanner([this](const FaultRequest& r) {
    if (r.index == 0) return FaultPlan{.close_after = 400'000};
    server_.Put("/obj.tar", RandomBytes(1'000'000, 99), "\"v2\"");
    return FaultPlan{.ignore_if_match = true};
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": the object changed while it was read (ETag \"v1\" became ",
                            "\"v2\" at offset 400000)"));
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteStreamTest, ObjectChangedWithoutAnEtagIsAbortedByLastModified) {
  server_.SetPlanner([this](const FaultRequest& r) {
    if (r.index == 0) return FaultPlan{.close_after = 400'000, .no_etag = true};
    server_.Put("/obj.tar", RandomBytes(1'000'000, 99), "\"v2\"", "Wed, 16 Nov 1994 08:00:00 GMT");
    return FaultPlan{.no_etag = true};
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s), Cat(url(), ": the object changed while it was read (HTTP 412 to a ",
                            "request for offset 400000 with If-Unmodified-Since: Tue, 15 Nov ",
                            "1994 12:45:26 GMT)"));
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].headers.count("if-match"), 0u);
  EXPECT_EQ(log[1].headers["range"], "bytes=400000-");
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

// Names under .invalid never resolve (RFC 6761), offline or not.
constexpr char kNotRetried[] = " (a host name that does not resolve is not retried); last error: ";

TEST_F(RemoteStreamTest, AHostThatDoesNotResolveFailsAtOnce) {
  const std::string url = "http://shard.invalid/x.tar";
  absl::Status s = Fetch(url, Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url, ": giving up at offset 0 after 1 failed attempt(s) ",
                                         "in a row", kNotRetried)));
  EXPECT_THAT(Message(s), HasSubstr("Could not resolve host: shard.invalid (curl error 6)"));
}

TEST_F(RemoteStreamTest, ARedirectToAHostThatDoesNotResolveIsSentOnce) {
  server_.SetPlanner([](const FaultRequest&) {
    return FaultPlan{.status = 302, .extra_headers = "Location: http://moved.invalid/x.tar\r\n"};
  });
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(), ": giving up at offset 0 after 1 failed ",
                                         "attempt(s) in a row", kNotRetried)));
  EXPECT_THAT(Message(s), HasSubstr("Could not resolve host: moved.invalid (curl error 6)"));
  // Fast() allows 6 attempts: each would ask this server first.
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, AProxyThatDoesNotResolveFailsAtOnce) {
  // libcurl reads the proxy from the environment at each request.
  ScopedEnv proxy("http_proxy", "http://proxy.invalid:3128");
  ScopedEnv no_proxy("no_proxy", nullptr);
  ScopedEnv no_proxy_upper("NO_PROXY", nullptr);
  absl::Status s = Fetch(url(), Fast()).status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(Message(s), StartsWith(Cat(url(), ": giving up at offset 0 after 1 failed ",
                                         "attempt(s) in a row", kNotRetried)));
  EXPECT_THAT(Message(s), HasSubstr("Could not resolve proxy: proxy.invalid (curl error 5)"));
  EXPECT_EQ(server_.requests(), 0);
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

TEST_F(RemoteStreamTest, HttpHeadersGoWithEveryRequestForHttpUrls) {
  RemoteOptions o = Fast();
  o.http_headers = {{"Authorization", "Bearer hf_secret"}, {"X-Api-Key", "k1"}};
  FirstThen({.close_after = 300'001});  // the resumed request carries them too
  ExpectExact(o);
  char part[10];
  ASSERT_TRUE(RemoteOpener(o).ReadRange(url(), 5, {absl::MakeSpan(part)}).ok());
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 3u);
  for (const FaultRequest& r : log) {
    EXPECT_EQ(r.headers.at("authorization"), "Bearer hf_secret");
    EXPECT_EQ(r.headers.at("x-api-key"), "k1");
  }
  EXPECT_EQ(log[1].headers.at("range"), "bytes=300001-");
  EXPECT_EQ(log[2].headers.at("range"), "bytes=5-14");
}

TEST_F(RemoteStreamTest, HttpHeadersAreNotSentForS3OrGcs) {
  RemoteOptions o = Fast();
  o.http_headers = {{"X-Api-Key", "k1"}};
  o.s3_endpoint = o.gcs_endpoint = Cat("http://127.0.0.1:", server_.port());
  server_.Put("/bucket/x.tar", "bytes");
  ASSERT_EQ(Fetch("s3://bucket/x.tar", o).value(), "bytes");
  ASSERT_EQ(Fetch("gs://bucket/x.tar", o).value(), "bytes");
  for (const FaultRequest& r : server_.log()) EXPECT_EQ(r.headers.count("x-api-key"), 0u);
}

TEST_F(RemoteStreamTest, ARedirectToAnotherHostDropsAuthorizationAndKeepsOtherHeaders) {
  FaultServer other;
  other.Put("/moved.tar", "moved bytes");
  const std::string moved = Cat("http://localhost:", other.port(), "/moved.tar");
  server_.SetPlanner([moved](const FaultRequest&) {
    return FaultPlan{.status = 302, .extra_headers = Cat("Location: ", moved, "\r\n")};
  });
  RemoteOptions o = Fast();
  o.http_headers = {
      {"Authorization", "Bearer hf_secret"}, {"Cookie", "session=s"}, {"X-Api-Key", "k1"}};
  ASSERT_EQ(Fetch(url(), o).value(), "moved bytes");
  EXPECT_EQ(server_.log().at(0).headers.at("authorization"), "Bearer hf_secret");
  EXPECT_EQ(server_.log().at(0).headers.at("cookie"), "session=s");
  // (Another host name and another port: libcurl drops them for either.)
  const FaultRequest there = other.log().at(0);
  EXPECT_EQ(there.headers.count("authorization"), 0u);
  EXPECT_EQ(there.headers.count("cookie"), 0u);
  EXPECT_EQ(there.headers.at("x-api-key"), "k1");
}

TEST_F(RemoteStreamTest, BadHttpHeadersAreInvalidArgumentNamingTheHeaderNotItsValue) {
  const std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>>
      cases = {
          {{{"Bad Name", "v"}}, "the HTTP header name 'Bad Name' is not an HTTP token"},
          {{{"", "v"}}, "the HTTP header name '' is not an HTTP token"},
          {{{"range", "bytes=0-"}}, "the HTTP header range is set by the reader itself"},
          {{{"If-Match", "x"}}, "the HTTP header If-Match is set by the reader itself"},
          {{{"Accept-Encoding", "gzip"}},
           "the HTTP header Accept-Encoding is set by the reader itself"},
          {{{"If-None-Match", "x"}}, "the HTTP header If-None-Match is set by the reader itself"},
          {{{"X-Empty", ""}}, "the HTTP header X-Empty has no value"},
          {{{"X-Token", "secret\r\nHost: evil"}},
           "the value of the HTTP header X-Token holds a line break or a NUL"},
          {{{"X-Token", std::string("a\0b", 3)}},
           "the value of the HTTP header X-Token holds a line break or a NUL"},
      };
  for (const auto& [headers, message] : cases) {
    RemoteOptions o = Fast();
    o.http_headers = headers;
    absl::Status s = Fetch(url(), o).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_EQ(Message(s), Cat(url(), ": ", message));
    EXPECT_EQ(Message(s).find("secret"), std::string::npos);
  }
  EXPECT_EQ(server_.requests(), 0);
  EXPECT_TRUE(CheckHttpHeaders({{"X-Ok", "any value: with colons"}}, "here").ok());
}

TEST_F(RemoteStreamTest, AwsSessionTokenIsSentAndSigned) {
  RemoteOptions o = Fast();
  o.s3_endpoint = Cat("http://127.0.0.1:", server_.port());
  o.aws_credentials = AwsCredentials{"AKIDTEST", "secret", "thetoken"};
  server_.Put("/bucket/x.tar", "s3 bytes");
  absl::StatusOr<std::string> data = Fetch("s3://bucket/x.tar", o);
  ASSERT_TRUE(data.ok()) << data.status();
  FaultRequest r = server_.log()[0];
  EXPECT_EQ(r.headers["x-amz-security-token"], "thetoken");
  EXPECT_THAT(r.headers["authorization"],
              HasSubstr("SignedHeaders=host;x-amz-content-sha256;x-amz-date;"
                        "x-amz-security-token, Signature="));
}

// --- Skip and OpenAt: ranged requests instead of reading

TEST_F(RemoteStreamTest, ASkipWithinWhatIsBufferedCostsNoRequest) {
  RemoteOptions o = Fast();
  o.skip_by_request = 1;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  std::string head(100, '\0');
  ASSERT_EQ(*(*s)->Read(head.data(), head.size()), 100u);
  // The first Read's wait brought more than 100 bytes; wait for a little
  // more to be sure some is buffered, then skip within it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  absl::StatusOr<int64_t> skipped = (*s)->Skip(1);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, 1);
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(head + *rest), Sha256(body_.substr(0, 100) + body_.substr(101)));
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, AShortSkipIsLeftToTheCallerToRead) {
  RemoteOptions o = Fast();
  o.read_ahead = 64 << 10;
  o.skip_by_request = 500'000;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  char byte;
  ASSERT_EQ(*(*s)->Read(&byte, 1), 1u);
  // Less than skip_by_request beyond what is buffered: only the buffered
  // part (at most read_ahead plus a receive buffer) is skipped.
  absl::StatusOr<int64_t> skipped = (*s)->Skip(400'000);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_LT(*skipped, 400'000);
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(*rest), Sha256(body_.substr(1 + *skipped)));
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, ALongSkipIsOneRangedRequestWithTheVersionsEtag) {
  RemoteOptions o = Fast();
  o.read_ahead = 64 << 10;
  o.skip_by_request = 100'000;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  char byte;
  ASSERT_EQ(*(*s)->Read(&byte, 1), 1u);
  absl::StatusOr<int64_t> skipped = (*s)->Skip(700'000);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, 700'000);
  absl::StatusOr<std::string> rest = ReadAll(**s);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Sha256(*rest), Sha256(body_.substr(700'001)));
  EXPECT_EQ(server_.requests(), 2);
  ExpectResumedAt(1, 700'001);
}

TEST_F(RemoteStreamTest, ASkipPastTheEndStopsAtTheEndWithoutARequest) {
  RemoteOptions o = Fast();
  o.skip_by_request = 1;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<int64_t> skipped = (*s)->Skip(5'000'000);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, 1'000'000);
  char byte;
  EXPECT_EQ(*(*s)->Read(&byte, 1), 0u);
  EXPECT_EQ(*(*s)->Skip(10), 0);
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, WithoutValidatorsASkipIsRead) {
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.no_validators = true}; });
  RemoteOptions o = Fast();
  o.skip_by_request = 1;
  o.read_ahead = 64 << 10;
  absl::StatusOr<std::unique_ptr<ByteStream>> s = MakeOpener(o)(url());
  ASSERT_TRUE(s.ok()) << s.status();
  char byte;
  ASSERT_EQ(*(*s)->Read(&byte, 1), 1u);
  absl::StatusOr<int64_t> skipped = (*s)->Skip(900'000);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_LT(*skipped, 900'000);  // what was buffered; the rest is the caller's to read
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(RemoteStreamTest, OpenAtAsksForTheRangeOnly) {
  absl::StatusOr<std::unique_ptr<ByteStream>> s = RemoteOpener(Fast()).OpenAt(url(), 654'321);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::string> data = ReadAll(**s);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Sha256(*data), Sha256(body_.substr(654'321)));
  ASSERT_EQ(server_.requests(), 1);
  FaultRequest r = server_.log()[0];
  EXPECT_EQ(r.headers["range"], "bytes=654321-");
  EXPECT_EQ(r.headers.count("if-match"), 0u);
  EXPECT_EQ(server_.body_bytes(), 1'000'000 - 654'321);
}

TEST_F(RemoteStreamTest, OpenAtResumesWithTheEtagOfItsFirstAnswer) {
  FirstThen({.close_after = 100'000});
  absl::StatusOr<std::unique_ptr<ByteStream>> s = RemoteOpener(Fast()).OpenAt(url(), 500'000);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::StatusOr<std::string> data = ReadAll(**s);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Sha256(*data), Sha256(body_.substr(500'000)));
  EXPECT_EQ(server_.requests(), 2);
  ExpectResumedAt(1, 600'000);
}

TEST_F(RemoteStreamTest, OpenAtRefusesWhatIsNotThatRange) {
  const std::string u = url();
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.ignore_range = true}; });
  absl::Status s = RemoteOpener(Fast()).OpenAt(u, 1000).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": HTTP 200 to a request for bytes from offset 1000 on (expected ",
                            "206 Partial Content): the server ignores Range requests"));
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.content_range_skew = 5}; });
  s = RemoteOpener(Fast()).OpenAt(u, 1000).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": wrong Content-Range 'bytes 1005-1000004/1000000' to a request ",
                            "for bytes from offset 1000 on"));
  server_.SetPlanner(nullptr);
  s = RemoteOpener(Fast()).OpenAt(u, 1'000'000).status();
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": HTTP 416 Range Not Satisfiable"));
  s = RemoteOpener(Fast()).OpenAt(u, -1).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": negative offset -1"));
}

TEST(RemoteOpenerTest, OpenAtReadsLocalFilesAndPipesFromTheOffset) {
  testing::TempDir dir;
  const std::string path = dir.Write("x.bin", RandomBytes(100'000));
  RemoteOpener opener;
  absl::StatusOr<std::unique_ptr<ByteStream>> file = opener.OpenAt(path, 99'000);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*ReadAll(**file), RandomBytes(100'000).substr(99'000));
  absl::StatusOr<std::unique_ptr<ByteStream>> pipe = opener.OpenAt(Cat("pipe:cat ", path), 1);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  EXPECT_EQ(*ReadAll(**pipe), RandomBytes(100'000).substr(1));
  absl::Status past = opener.OpenAt(path, 100'001).status();
  EXPECT_TRUE(absl::IsOutOfRange(past)) << past;
  EXPECT_EQ(Message(past), Cat(path, ": the data ends at offset 100000, before offset 100001"));
}

// --- ReadRange: one request for a range, its connection kept

TEST_F(RemoteStreamTest, ReadRangeIsOneRequestForExactlyThatRange) {
  const RemoteOpener opener(Fast());
  std::string head(100, '\0'), rest(900, '\0');
  absl::StatusOr<ObjectVersion> version =
      opener.ReadRange(url(), 250'000, {absl::MakeSpan(head), absl::MakeSpan(rest)});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->etag, "\"v1\"");
  EXPECT_EQ(version->last_modified, "Tue, 15 Nov 1994 12:45:26 GMT");
  EXPECT_EQ(version->size, 1'000'000);
  EXPECT_EQ(head + rest, body_.substr(250'000, 1000));
  std::string next(10, '\0');
  ASSERT_TRUE(opener.ReadRange(url(), 999'990, {absl::MakeSpan(next)}, *version).ok());
  EXPECT_EQ(next, body_.substr(999'990));
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].headers["range"], "bytes=250000-250999");
  EXPECT_EQ(log[0].headers.count("if-match"), 0u);
  EXPECT_EQ(log[1].headers["range"], "bytes=999990-999999");
  EXPECT_EQ(log[1].headers["if-match"], "\"v1\"");
  EXPECT_EQ(log[1].headers.count("if-unmodified-since"), 0u);
  EXPECT_EQ(server_.body_bytes(), 1010);
  EXPECT_EQ(server_.connections(), 1);  // the first request's connection was reused
}

TEST_F(RemoteStreamTest, ReadRangeResumesInsideTheRange) {
  FirstThen({.close_after = 70'000});
  std::string data(200'000, '\0');
  absl::StatusOr<ObjectVersion> version =
      RemoteOpener(Fast()).ReadRange(url(), 10'000, {absl::MakeSpan(data)});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(Sha256(data), Sha256(body_.substr(10'000, 200'000)));
  std::vector<FaultRequest> log = server_.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].headers["range"], "bytes=80000-209999");
  EXPECT_EQ(log[1].headers["if-match"], "\"v1\"");
}

TEST_F(RemoteStreamTest, ReadRangeOfAnotherVersionIsAborted) {
  const std::string u = url();
  std::string data(10, '\0');
  const RemoteOpener opener(Fast());
  absl::Status s = opener.ReadRange(u, 5, {absl::MakeSpan(data)}, {.etag = "\"v0\""}).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": the object changed since it was first read (HTTP ",
                            "412 to a request for bytes 5-14 with If-Match: \"v0\")"));
  // A server that ignores If-Match is caught by the ETag it sends.
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.ignore_if_match = true}; });
  s = opener.ReadRange(u, 5, {absl::MakeSpan(data)}, {.etag = "\"v0\""}).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s),
            Cat(u, ": the object changed since it was first read (ETag \"v0\" ", "became \"v1\")"));
  EXPECT_EQ(server_.requests(), 2);
}

TEST(RemoteRangeTest, AWeakEtagIsNotSentAndLastModifiedPinsTheVersion) {
  FaultServer server;
  server.Put("/w.tar", RandomBytes(1000), "W/\"w1\"", "Tue, 15 Nov 1994 12:45:26 GMT");
  const std::string u = server.Url("/w.tar");
  const RemoteOpener opener(Fast());
  std::string data(10, '\0');
  absl::StatusOr<ObjectVersion> version = opener.ReadRange(u, 0, {absl::MakeSpan(data)});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->etag, "W/\"w1\"");  // compared, never sent: If-Match compares strongly
  EXPECT_EQ(version->last_modified, "Tue, 15 Nov 1994 12:45:26 GMT");
  EXPECT_EQ(version->size, 1000);
  ASSERT_TRUE(opener.ReadRange(u, 100, {absl::MakeSpan(data)}, *version).ok());
  EXPECT_EQ(server.log()[1].headers["if-unmodified-since"], "Tue, 15 Nov 1994 12:45:26 GMT");
  EXPECT_EQ(server.log()[1].headers.count("if-match"), 0u);
  server.Put("/w.tar", RandomBytes(1000), "W/\"w2\"", "Wed, 16 Nov 1994 12:45:26 GMT");
  absl::Status s = opener.ReadRange(u, 100, {absl::MakeSpan(data)}, *version).status();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": the object changed since it was first read (HTTP 412 to a ",
                            "request for bytes 100-109 with If-Unmodified-Since: Tue, 15 Nov ",
                            "1994 12:45:26 GMT)"));
}

TEST_F(RemoteStreamTest, ReadRangeRefusesWhatIsNotThatRange) {
  const std::string u = url();
  const RemoteOpener opener(Fast());
  std::string data(1000, '\0');
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.ignore_range = true}; });
  absl::Status s = opener.ReadRange(u, 1000, {absl::MakeSpan(data)}).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": HTTP 200 to a request for bytes 1000-1999 (expected 206 ",
                            "Partial Content): the server ignores Range requests"));
  server_.SetPlanner([](const FaultRequest&) { return FaultPlan{.content_range_skew = 5}; });
  s = opener.ReadRange(u, 1000, {absl::MakeSpan(data)}).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": wrong Content-Range 'bytes 1005-2004/1000000' to a request ",
                            "for bytes 1000-1999"));
  server_.SetPlanner(nullptr);
  // A range running past the end is answered with what there is.
  s = opener.ReadRange(u, 999'500, {absl::MakeSpan(data)}).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": wrong Content-Range 'bytes 999500-999999/1000000' to a request ",
                            "for bytes 999500-1000499"));
  s = opener.ReadRange(u, 1'000'000, {absl::MakeSpan(data)}).status();
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": HTTP 416 Range Not Satisfiable"));
  s = opener.ReadRange(u, 0, {}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(Message(s), Cat(u, ": a range of 0 bytes from offset 0 cannot be read"));
}

TEST_F(RemoteStreamTest, ReadRangeAsksTheServerEvenWithACompleteCachedCopy) {
  testing::TempDir dir;
  RemoteOptions o = Fast();
  o.cache_dir = dir.path();
  const RemoteOpener opener(o);
  std::string data(100, '\0');
  ASSERT_TRUE(opener.ReadRange(url(), 0, {absl::MakeSpan(data)}).ok());
  EXPECT_EQ(data, body_.substr(0, 100));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    files += e.path().filename().string()[0] != '.';
  }
  EXPECT_EQ(files, 0u);                                 // a range is never a cache file
  absl::StatusOr<std::string> whole = Fetch(url(), o);  // fills the cache
  ASSERT_TRUE(whole.ok()) << whole.status();
  const int requests = server_.requests();
  // (A cached copy may be of another version than a pinned range.)
  ASSERT_TRUE(opener.ReadRange(url(), 500'000, {absl::MakeSpan(data)}).ok());
  EXPECT_EQ(data, body_.substr(500'000, 100));
  EXPECT_EQ(server_.requests(), requests + 1);
  absl::StatusOr<std::unique_ptr<ByteStream>> uncached = opener.AsUncachedOpener()(url());
  ASSERT_TRUE(uncached.ok()) << uncached.status();
  EXPECT_EQ(Sha256(*ReadAll(**uncached)), Sha256(body_));
  EXPECT_EQ(server_.requests(), requests + 2);
}

TEST(RemoteOpenerTest, ReadRangeReadsLocalFiles) {
  testing::TempDir dir;
  const std::string path = dir.Write("x.bin", RandomBytes(100'000));
  std::string a(10, '\0'), b(5, '\0');
  absl::StatusOr<ObjectVersion> version =
      RemoteOpener().ReadRange(path, 99'985, {absl::MakeSpan(a), absl::MakeSpan(b)});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_TRUE(version->empty());
  EXPECT_EQ(a + b, RandomBytes(100'000).substr(99'985));
  std::string c(20, '\0');
  absl::Status s = RemoteOpener().ReadRange(path, 99'990, {absl::MakeSpan(c)}).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_EQ(Message(s), Cat(path, ": the data ends at offset 100000, inside the range read from ",
                            "offset 99990"));
}

TEST(RemoteTarTest, AStartOffsetInAPlainTarCostsOneRangedRequest) {
  // 40 samples of 1 MB: the reader starts at sample 30's header.
  std::vector<testing::TarEntry> entries;
  for (int i = 0; i < 40; ++i) {
    entries.push_back({Cat("s", i, ".bin"), RandomBytes(1'000'000, 500 + i)});
  }
  const std::string tar = testing::MakeTar(entries);
  int64_t offset = -1;
  {
    absl::StatusOr<std::unique_ptr<TarReader>> local =
        TarReader::Open(MemoryStream("local", tar), {.read_data = false});
    ASSERT_TRUE(local.ok());
    for (int i = 0; i <= 30; ++i) offset = (**(*local)->Next()).offset;
  }
  FaultServer server;
  server.Put("/big.tar", tar);
  RemoteOptions o = Fast();
  o.read_ahead = 1 << 20;
  absl::StatusOr<std::unique_ptr<ByteStream>> stream = MakeOpener(o)(server.Url("/big.tar"));
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<std::unique_ptr<TarReader>> reader =
      TarReader::Open(*std::move(stream), {.start_offset = offset});
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::string> names;
  while (true) {
    absl::StatusOr<std::optional<TarMember>> m = (*reader)->Next();
    ASSERT_TRUE(m.ok()) << m.status();
    if (!m->has_value()) break;
    EXPECT_EQ(Sha256(std::string((*m)->data.view())), Sha256(entries[30 + names.size()].data));
    names.push_back((*m)->name);
  }
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names.front(), "s30.bin");
  // The first request reads the tar's first block (its format); the skip to
  // the offset is the second, ranged one. What the first request served
  // before it was abandoned is bounded by the buffers (read_ahead, socket
  // buffers), far below the 30 MB skipped.
  std::vector<FaultRequest> log = server.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].headers.count("range"), 0u);
  EXPECT_EQ(log[1].headers["range"], Cat("bytes=", offset, "-"));
  EXPECT_EQ(log[1].headers["if-match"], "\"v1\"");
  const int64_t rest = static_cast<int64_t>(tar.size()) - offset;
  EXPECT_GE(server.body_bytes(), rest);
  EXPECT_LT(server.body_bytes(), rest + (12 << 20));
}

TEST(BackoffTest, DrawsAreJitteredUpToTheCapAndReproducible) {
  RemoteOptions o;
  o.backoff_base = std::chrono::milliseconds(100);
  o.backoff_cap = std::chrono::milliseconds(1000);
  const std::chrono::milliseconds none(0);
  // The ceiling doubles per failure in a row, from backoff_base up to backoff_cap.
  const std::vector<int64_t> ceilings = {100, 200, 400, 800, 1000, 1000};
  std::mt19937_64 rng(42);
  for (size_t n = 0; n < ceilings.size(); ++n) {
    int64_t lo = INT64_MAX, hi = -1;
    for (int i = 0; i < 2000; ++i) {
      const int64_t d = BackoffDelay(static_cast<int>(n) + 1, o, none, rng).count();
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    // Full jitter: the draws fill [0, ceiling].
    EXPECT_GE(lo, 0) << n;
    EXPECT_LE(lo, ceilings[n] / 20) << n;
    EXPECT_LE(hi, ceilings[n]) << n;
    EXPECT_GE(hi, ceilings[n] - ceilings[n] / 20) << n;
  }
  // A huge failure count neither overflows nor passes the cap.
  EXPECT_LE(BackoffDelay(1000, o, none, rng).count(), 1000);
  // The same seed gives the same waits.
  std::mt19937_64 a(7), b(7);
  for (int n = 1; n <= 8; ++n) EXPECT_EQ(BackoffDelay(n, o, none, a), BackoffDelay(n, o, none, b));
}

TEST(BackoffTest, RetryAfterIsAFloor) {
  RemoteOptions o;
  o.backoff_base = std::chrono::milliseconds(100);
  o.backoff_cap = std::chrono::milliseconds(1000);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(BackoffDelay(1, o, std::chrono::seconds(3), rng), std::chrono::seconds(3));
    EXPECT_GE(BackoffDelay(4, o, std::chrono::milliseconds(500), rng).count(), 500);
  }
  EXPECT_EQ(RetryAfter("7"), std::chrono::seconds(7));
  EXPECT_EQ(RetryAfter(""), std::chrono::seconds(0));
  EXPECT_EQ(RetryAfter("soon"), std::chrono::seconds(0));
  EXPECT_EQ(RetryAfter("Tue, 15 Nov 1994 12:45:26 GMT"), std::chrono::seconds(0));  // past
}

TEST(RemoteOptionsTest, CredentialAndGcsVariablesAreRead) {
  setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
  setenv("AWS_SESSION_TOKEN", "envtoken", 1);
  setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
  setenv("AWS_PROFILE", "training", 1);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/etc/wds/credentials", 1);
  setenv("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.env", 1);
  absl::StatusOr<RemoteOptions> o = RemoteOptions::ParseFromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(o->aws_credentials.has_value());
  EXPECT_EQ(o->aws_credentials->access_key_id, "AKIDENV");
  EXPECT_EQ(o->aws_credentials->secret_access_key, "envsecret");
  EXPECT_EQ(o->aws_credentials->session_token, "envtoken");
  EXPECT_EQ(o->s3_region, "ap-south-1");  // AWS_REGION, when set, wins
  EXPECT_EQ(o->aws_profile, "training");
  EXPECT_EQ(o->aws_credentials_file, "/etc/wds/credentials");
  EXPECT_EQ(o->gcs_token, "ya29.env");
  setenv("AWS_REGION", "eu-north-1", 1);
  EXPECT_EQ(RemoteOptions::ParseFromEnvironment()->s3_region, "eu-north-1");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  absl::Status half = RemoteOptions::ParseFromEnvironment().status();
  EXPECT_TRUE(absl::IsInvalidArgument(half)) << half;
  EXPECT_EQ(Message(half), "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
  for (const char* v :
       {"AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE", "GOOGLE_OAUTH_ACCESS_TOKEN"}) {
    unsetenv(v);
  }
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

TEST(RemoteOptionsTest, OpenAheadComesFromTheEnvironment) {
  EXPECT_EQ(RemoteOptions().open_ahead, 1);
  setenv("WDS_OPEN_AHEAD", "3", 1);
  EXPECT_EQ(RemoteOptions::ParseFromEnvironment()->open_ahead, 3);
  EXPECT_EQ(WebDatasetOptions().open_ahead, 3);
  setenv("WDS_OPEN_AHEAD", "0", 1);
  EXPECT_EQ(WebDatasetOptions().open_ahead, 0);
  for (const char* bad : {"17", "-1", "two", "1.5"}) {
    setenv("WDS_OPEN_AHEAD", bad, 1);
    absl::Status s = RemoteOptions::ParseFromEnvironment().status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_EQ(Message(s), Cat("WDS_OPEN_AHEAD='", bad, "' is not a whole number from 0 to 16"));
    EXPECT_EQ(RemoteOptions::FromEnvironment().open_ahead, 1);  // the default
  }
  unsetenv("WDS_OPEN_AHEAD");
  for (int bad : {-1, 17}) {
    absl::Status s = WebDataset("a.tar", {.open_ahead = bad}).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_EQ(Message(s), Cat("WebDataset: open_ahead must be from 0 to 16, got ", bad));
  }
}

TEST(RemoteOptionsTest, SkippedVariablesAreNotRead) {
  setenv("WDS_CACHE", "/tmp/some-cache", 1);
  setenv("WDS_CACHE_SIZE", "lots", 1);
  setenv("WDS_TLS_VERIFY", "0", 1);
  absl::StatusOr<RemoteOptions> o = RemoteOptions::ParseFromEnvironment({"WDS_CACHE_SIZE"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache_dir, "/tmp/some-cache");
  EXPECT_EQ(o->cache_size, 0);
  EXPECT_FALSE(o->verify_tls);
  o = RemoteOptions::ParseFromEnvironment({"WDS_CACHE", "WDS_TLS_VERIFY", "WDS_CACHE_SIZE"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->cache_dir, "");
  EXPECT_TRUE(o->verify_tls);
  // Another variable skipped: the malformed one still counts.
  absl::Status bad = RemoteOptions::ParseFromEnvironment({"WDS_CACHE"}).status();
  EXPECT_EQ(Message(bad),
            "WDS_CACHE_SIZE='lots' is not a byte count (e.g. 50000000000, 5e10, 50G)");
  for (const char* v : {"WDS_CACHE", "WDS_CACHE_SIZE", "WDS_TLS_VERIFY"}) unsetenv(v);
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

TEST(RemotePipelineTest, AShardOpenedAheadWaitsIdleWithoutAStallOrARetry) {
  FaultServer server;
  for (int shard = 0; shard < 3; ++shard) {
    server.Put(Cat("/shard-", shard, ".tar"), testing::MakeTar(ShardEntries(shard, 40)));
  }
  // Shard 1's body waits after its headers until the test lets it go, once
  // the reader has been away for 2.5 s (past both the stall timeout and
  // low_speed_time): a gate, not a race between the server's 2.6 s of 10 ms
  // sleeps and the reader's return, which a loaded machine loses.
  auto go = std::make_shared<std::atomic<bool>>(false);
  server.SetPlanner([go](const FaultRequest& r) {
    return r.target == "/shard-1.tar" ? FaultPlan{.stall_after = 0,
                                                  .stall_ms = 60'000,
                                                  .until = [go] { return go->load(); }}
                                      : FaultPlan();
  });
  RemoteOptions options = Fast();
  options.stall_timeout = std::chrono::milliseconds(300);
  // Idle is 0 bytes/s: any limit judges it. Not 1 MiB/s, which shard 0
  // (under 1 MiB, read across the 2.5 s wait) fails in any 1 s window.
  options.low_speed_limit = 1000;
  options.low_speed_time = std::chrono::seconds(1);
  options.max_attempts = 1;  // a retry would fail the read
  absl::StatusOr<Pipeline> p =
      WebDataset(Cat("http://127.0.0.1:", server.port(), "/shard-{0..2}.tar"),
                 {.open_ahead = 1, .opener = MakeOpener(options)});
  ASSERT_TRUE(p.ok()) << p.status();
  std::unique_ptr<SampleStream> stream = p->Open({});
  ASSERT_TRUE(stream->Next().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (server.log().size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  go->store(true);
  absl::StatusOr<std::vector<Sample>> rest = testing::Drain(*stream);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->size(), 119u);
  EXPECT_EQ(server.requests(), 3);  // one per shard: nothing resumed
}

TEST(RemotePipelineTest, ColonColonListsMixRemoteAndLocalShards) {
  FaultServer server;
  testing::TempDir dir;
  for (int shard = 0; shard < 3; ++shard) {
    server.Put(Cat("/shard-", shard, ".tar"), testing::MakeTar(ShardEntries(shard, 4)));
  }
  const std::string local = dir.Write("local.tar", testing::MakeTar(ShardEntries(9, 4)));
  const std::string base = Cat("http://127.0.0.1:", server.port());
  absl::StatusOr<Pipeline> p =
      WebDataset(Cat(base, "/shard-{0..1}.tar::", local, "::", base, "/shard-2.tar"),
                 {.opener = MakeOpener(Fast())});
  ASSERT_TRUE(p.ok()) << p.status();
  std::unique_ptr<SampleStream> stream = p->Open({});
  absl::StatusOr<std::vector<Sample>> samples = testing::Drain(*stream);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 16u);
  const std::vector<std::string> urls = {Cat(base, "/shard-0.tar"), Cat(base, "/shard-1.tar"),
                                         local, Cat(base, "/shard-2.tar")};
  for (size_t i = 0; i < samples->size(); ++i) {
    EXPECT_EQ(testing::FieldText((*samples)[i], "__url__"), urls[i / 4]) << i;
  }
  EXPECT_EQ((*samples)[8].key(), "s9_0");
  EXPECT_EQ(server.requests(), 3);
}

TEST(RemotePipelineTest, EachLoaderWorkerKeepsAConnectionPerShardOpen) {
  for (int ahead : {0, 1}) {
    FaultServer server;
    for (int shard = 0; shard < 6; ++shard) {
      server.Put(Cat("/shard-", shard, ".tar"), testing::MakeTar(ShardEntries(shard, 10)));
    }
    absl::StatusOr<Pipeline> p = WebDataset(
        Cat("http://127.0.0.1:", server.port(), "/shard-{0..5}.tar"), {.open_ahead = ahead});
    ASSERT_TRUE(p.ok());
    Loader loader(*p, {.workers = 2, .rank = 0, .world_size = 1});
    int samples = 0;
    for (const Sample& s : loader) samples += s.Has("bin") ? 1 : 0;
    EXPECT_EQ(samples, 60);
    EXPECT_EQ(server.requests(), 6);
    // The shard read and the ones opened ahead, per worker.
    EXPECT_LE(server.connections(), 2 * (1 + ahead)) << "open_ahead " << ahead;
  }
}

TEST(RemotePipelineTest, TheNextShardIsRequestedWhileOneIsRead) {
  FaultServer server;
  testing::TempDir dir;
  for (int shard = 0; shard < 3; ++shard) {
    const std::string tar = testing::MakeTar(ShardEntries(shard, 40));
    server.Put(Cat("/shard-", shard, ".tar"), tar);
    dir.Write(Cat("shard-", shard, ".tar"), tar);
  }
  absl::StatusOr<Pipeline> p =
      WebDataset(Cat("http://127.0.0.1:", server.port(), "/shard-{0..2}.tar"),
                 {.open_ahead = 1, .opener = MakeOpener(Fast())});
  ASSERT_TRUE(p.ok()) << p.status();
  std::unique_ptr<SampleStream> stream = p->Open({});
  SampleResult first = stream->Next();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (server.log().size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Shard 1's request, while shard 0 is read; not shard 2's yet.
  std::vector<FaultRequest> log = server.log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].target, "/shard-1.tar");
  absl::StatusOr<std::vector<Sample>> rest = testing::Drain(*stream);
  ASSERT_TRUE(rest.ok()) << rest.status();
  std::unique_ptr<SampleStream> local =
      WebDataset(dir.path() + "/shard-{0..2}.tar", {.opener = OpenUrl})->Open({});
  absl::StatusOr<std::vector<Sample>> expected = testing::Drain(*local);
  ASSERT_TRUE(expected.ok()) << expected.status();
  rest->insert(rest->begin(), **std::move(first));
  ASSERT_EQ(testing::Keys(*rest), testing::Keys(*expected));
  for (size_t i = 0; i < rest->size(); ++i) {
    EXPECT_EQ(testing::FieldText((*rest)[i], "bin"), testing::FieldText((*expected)[i], "bin"));
  }
  EXPECT_EQ(server.requests(), 3);
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
