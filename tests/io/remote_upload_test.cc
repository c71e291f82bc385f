// RemoteUpload against the in-process fault server playing S3 (FakeS3
// below): the requests of a single PUT and of a multipart upload, signed
// payloads, retries of transient failures, and on every other failure an
// error naming the URL and the step, with the upload aborted.
#include "wds/io/remote_upload.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/remote_stream.h"
#include "io/sigv4.h"
#include "util/remote_test_util.h"
#include "util/test_util.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"
#include "wds/tar/shard_writer.h"

namespace wds {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::wds::testing::FaultPlan;
using ::wds::testing::FaultRequest;
using ::wds::testing::FaultServer;

constexpr int64_t kPart = int64_t{5} << 20;

std::string RandomBytes(size_t size, uint32_t seed = 11) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

std::string Message(const absl::Status& s) { return std::string(ToStd(s.message())); }

// S3Error is S3's answer of `status` with an error `code` and `message`.
FaultPlan S3Error(int status, std::string_view code, std::string_view message) {
  FaultPlan plan;
  plan.status = status;
  plan.body = Cat("<Error><Code>", code, "</Code><Message>", message, "</Message></Error>");
  return plan;
}

// FakeS3 answers as S3 does: an upload ID to "?uploads", an ETag per part,
// the parts joined (in the order the completion lists them) at completion,
// 204 to an abort. `fault`, when set, may answer a request instead.
class FakeS3 {
 public:
  std::function<std::optional<FaultPlan>(const FaultRequest&)> fault;
  // drop_completion_answers: that many completions are made, and their
  // answers lost (the connection closes).
  int drop_completion_answers = 0;
  // server, when set, serves a completed object (HEAD, GET) with the ETag
  // S3 gives one of N parts: "<hex>-N", last modified at `completed_at`.
  FaultServer* server = nullptr;
  std::string completed_at = "Tue, 15 Nov 1994 12:45:26 GMT";
  // started_at, when set, is the Date of the answer that starts an upload.
  std::string started_at;

  FaultPlan Answer(const FaultRequest& r) {
    if (fault) {
      if (std::optional<FaultPlan> plan = fault(r); plan.has_value()) return *plan;
    }
    std::lock_guard<std::mutex> lock(mu_);
    FaultPlan plan;
    plan.status = 200;
    const std::string& t = r.target;
    if (r.method == "POST" && EndsWith(t, "?uploads=")) {
      plan.body =
          "<?xml version=\"1.0\"?><InitiateMultipartUploadResult><Bucket>b</Bucket>"
          "<Key>k.tar</Key><UploadId>up&amp;1</UploadId></InitiateMultipartUploadResult>";
      if (!started_at.empty()) plan.extra_headers = Cat("Date: ", started_at, "\r\n");
    } else if (r.method == "PUT" && t.find("partNumber=") != std::string::npos) {
      const int number = std::stoi(t.substr(t.find("partNumber=") + 11));
      parts_[number] = r.body;
      plan.extra_headers = Cat("ETag: \"p", number, "\"\r\n");
    } else if (r.method == "POST" && t.find("uploadId=") != std::string::npos) {
      if (completed_) {
        plan.status = 404;
        plan.body =
            "<Error><Code>NoSuchUpload</Code><Message>The specified upload does not "
            "exist.</Message></Error>";
        return plan;
      }
      std::string_view xml = r.body;
      object_.clear();
      while (!Between(xml, "<PartNumber>", "</PartNumber>").empty()) {
        const int number = std::stoi(std::string(Between(xml, "<PartNumber>", "</PartNumber>")));
        const std::string_view etag = Between(xml, "<ETag>", "</ETag>");
        if (etag != Cat("\"p", number, "\"")) {
          plan.status = 400;
          plan.body = "<Error><Code>InvalidPart</Code><Message>bad etag</Message></Error>";
          return plan;
        }
        object_ += parts_[number];
        xml.remove_prefix(xml.find("</Part>") + 7);
      }
      completed_ = true;
      const std::string etag = Cat("\"0123abcd-", parts_.size(), "\"");
      if (server != nullptr) server->Put(t.substr(0, t.find('?')), object_, etag, completed_at);
      plan.no_response = drop_completion_answers-- > 0;
      plan.body = Cat("<CompleteMultipartUploadResult><ETag>&quot;0123abcd-", parts_.size(),
                      "&quot;</ETag></CompleteMultipartUploadResult>");
    } else if (r.method == "HEAD" || r.method == "GET") {
      plan.status = 0;  // the server's object, if any
    } else if (r.method == "DELETE") {
      plan.status = 204;
    } else if (r.method == "PUT") {
      object_ = r.body;
      completed_ = true;
      plan.extra_headers = "ETag: \"whole\"\r\n";
    } else {
      plan.status = 405;
    }
    return plan;
  }

  std::string object() {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_ ? object_ : "(none)";
  }

 private:
  std::mutex mu_;
  std::map<int, std::string> parts_;
  std::string object_;
  bool completed_ = false;
};

// MultipartRequests lists the requests of a multipart upload of `parts`
// parts to s3://b/k.tar (or gs://b/k.tar), completed once, then `after`.
std::vector<std::string> MultipartRequests(int parts, std::vector<std::string> after = {}) {
  std::vector<std::string> out = {"POST /b/k.tar?uploads="};
  for (int n = 1; n <= parts; ++n)
    out.push_back(Cat("PUT /b/k.tar?partNumber=", n, "&uploadId=up%261"));
  out.push_back("POST /b/k.tar?uploadId=up%261");
  out.insert(out.end(), after.begin(), after.end());
  return out;
}

class RemoteUploadTest : public ::testing::Test {
 protected:
  RemoteUploadTest() {
    server_.SetPlanner([this](const FaultRequest& r) { return s3_.Answer(r); });
    options_ = testing::FastRemoteOptions();
    options_.s3_endpoint = Cat("http://127.0.0.1:", server_.port());
    options_.aws_credentials = AwsCredentials{"AKID", "secret", ""};
    options_.upload_part_size = kPart;
    // One part in flight at a time, so that requests come in order (the
    // concurrency test sets more).
    options_.upload_concurrency = 1;
  }

  std::unique_ptr<RemoteUpload> Create(const std::string& url = "s3://b/k.tar") {
    absl::StatusOr<std::unique_ptr<RemoteUpload>> up = RemoteUpload::Create(url, options_);
    EXPECT_TRUE(up.ok()) << up.status();
    return up.ok() ? *std::move(up) : nullptr;
  }

  // Requests lists "METHOD target" of every request.
  std::vector<std::string> Requests() const {
    std::vector<std::string> out;
    for (const FaultRequest& r : server_.log()) out.push_back(Cat(r.method, " ", r.target));
    return out;
  }

  // s3_ outlives server_, whose threads may still be answering through it.
  FakeS3 s3_;
  FaultServer server_;
  RemoteOptions options_;
};

TEST_F(RemoteUploadTest, AnObjectSmallerThanAPartGoesUpInOneSignedPut) {
  const std::string data = RandomBytes(1000);
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(data.substr(0, 10)).ok());
  ASSERT_TRUE(up->Write(data.substr(10)).ok());
  EXPECT_THAT(Requests(), IsEmpty());  // nothing is sent before Close
  ASSERT_TRUE(up->Close().ok());
  EXPECT_THAT(Requests(), ElementsAre("PUT /b/k.tar"));
  EXPECT_EQ(s3_.object(), data);
  EXPECT_EQ(up->etag(), "\"whole\"");
  EXPECT_EQ(up->size(), 1000);
  EXPECT_EQ(up->parts(), 0);
  const FaultRequest put = server_.log()[0];
  EXPECT_EQ(put.headers.at("x-amz-content-sha256"), sigv4::Sha256Hex(data));
  EXPECT_THAT(put.headers.at("authorization"), HasSubstr("AWS4-HMAC-SHA256 Credential=AKID/"));
  EXPECT_EQ(put.headers.at("content-type"), "application/octet-stream");
  EXPECT_EQ(put.headers.count("expect"), 0u);
}

TEST_F(RemoteUploadTest, AnEmptyObjectIsOnePutOfNothing) {
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Close().ok());
  EXPECT_THAT(Requests(), ElementsAre("PUT /b/k.tar"));
  EXPECT_EQ(s3_.object(), "");
  EXPECT_EQ(server_.log()[0].headers.at("content-length"), "0");
}

TEST_F(RemoteUploadTest, ALargerObjectGoesUpInPartsSentAsTheyFill) {
  const std::string data = RandomBytes(2 * kPart + 2'000'007);
  std::unique_ptr<RemoteUpload> up = Create();
  // Writes of an odd size, so parts fill in the middle of one.
  for (size_t at = 0; at < data.size(); at += 999'983) {
    ASSERT_TRUE(up->Write(std::string_view(data).substr(at, 999'983)).ok());
    if (at + 999'983 < static_cast<size_t>(kPart)) EXPECT_THAT(Requests(), IsEmpty());
  }
  // Filling part 2 waited for part 1: it went up before Close.
  EXPECT_GE(Requests().size(), 2u);
  ASSERT_TRUE(up->Close().ok());
  EXPECT_EQ(Requests(), MultipartRequests(3));
  EXPECT_EQ(s3_.object(), data);
  EXPECT_EQ(up->parts(), 3);
  EXPECT_EQ(up->etag(), "\"0123abcd-3\"");
  const std::vector<FaultRequest> log = server_.log();
  EXPECT_EQ(log[1].body.size(), static_cast<size_t>(kPart));
  EXPECT_EQ(log[3].body.size(), 2'000'007u);
  for (const FaultRequest& r : log) {
    EXPECT_EQ(r.headers.at("x-amz-content-sha256"), sigv4::Sha256Hex(r.body)) << r.target;
  }
  EXPECT_EQ(log[4].headers.at("content-type"), "application/xml");
}

TEST_F(RemoteUploadTest, PartsGoUpAtOnceAndAreListedInOrder) {
  // Part 1's answer waits until part 3 has arrived: three parts in flight.
  options_.upload_concurrency = 3;
  // Part 4 may go only once part 1 was answered: never more than three.
  std::atomic<bool> third{false};
  std::atomic<bool> waited_too_long{false};
  std::atomic<bool> first_answered{false};
  std::atomic<bool> fourth_too_soon{false};
  s3_.fault = [&](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=3&") != std::string::npos) third = true;
    if (r.target.find("partNumber=4&") != std::string::npos) fourth_too_soon = !first_answered;
    if (r.target.find("partNumber=1&") != std::string::npos) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!third && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      waited_too_long = !third;
      first_answered = true;
    }
    return std::nullopt;
  };
  const std::string data = RandomBytes(4 * kPart + 999);
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(data).ok());
  ASSERT_TRUE(up->Close().ok());
  EXPECT_FALSE(waited_too_long);
  EXPECT_FALSE(fourth_too_soon);
  EXPECT_EQ(up->parts(), 5);
  EXPECT_EQ(s3_.object(), data);
  const std::string complete = server_.log().back().body;
  EXPECT_EQ(complete.find("<PartNumber>1</PartNumber><ETag>\"p1\"</ETag>"),
            std::string("<CompleteMultipartUpload><Part>").size());
  EXPECT_LT(complete.find("<PartNumber>4<"), complete.find("<PartNumber>5<"));
}

TEST_F(RemoteUploadTest, APartFailingWhileOthersAreInFlightEndsThemAllThenAbortsTwice) {
  // Part 3 is refused while parts 1 and 2 wait for that refusal; parts 4
  // and 5 are started meanwhile. The failure cancels what is in flight, and
  // the abort, sent once they all ended, is sent again (a part cancelled
  // after its body was sent may still be stored after the first).
  options_.upload_concurrency = 3;
  auto refused = std::make_shared<std::atomic<bool>>(false);
  s3_.fault = [refused](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=3&") != std::string::npos) {
      *refused = true;
      return S3Error(403, "AccessDenied", "no");
    }
    if (r.target.find("partNumber=1&") != std::string::npos ||
        r.target.find("partNumber=2&") != std::string::npos) {
      while (!*refused) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return std::nullopt;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(4 * kPart + 10)).ok());
  const absl::Status failed = up->Close();
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: sending part 3 (5242880 bytes): HTTP 403 Planned: AccessDenied: no");
  const std::vector<std::string> requests = Requests();
  ASSERT_GE(requests.size(), 2u);
  EXPECT_EQ(requests[requests.size() - 2], "DELETE /b/k.tar?uploadId=up%261");
  EXPECT_EQ(requests.back(), "DELETE /b/k.tar?uploadId=up%261");
  // Parts 1 to 3 reached the server (4 and 5 may have been cancelled before
  // they did), and every part that did came before the first abort.
  const auto first_delete =
      std::find(requests.begin(), requests.end(), "DELETE /b/k.tar?uploadId=up%261");
  for (int n = 1; n <= 3; ++n) {
    EXPECT_NE(std::find(requests.begin(), first_delete,
                        Cat("PUT /b/k.tar?partNumber=", n, "&uploadId=up%261")),
              first_delete)
        << n;
  }
  EXPECT_EQ(std::count_if(first_delete, requests.end(),
                          [](const std::string& r) { return StartsWith(r, "PUT "); }),
            0);
  EXPECT_EQ(s3_.object(), "(none)");
}

TEST_F(RemoteUploadTest, DestroyingAnUploadWithPartsInFlightCancelsThemThenAborts) {
  options_.upload_concurrency = 3;
  auto answer = std::make_shared<std::atomic<bool>>(false);
  s3_.fault = [answer](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=") == std::string::npos) return std::nullopt;
    while (!*answer) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return std::nullopt;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(3 * kPart)).ok());  // three parts in flight, unanswered
  while (Requests().size() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  up.reset();  // returns: the parts' requests are abandoned, not answered
  *answer = true;
  EXPECT_THAT(Requests(),
              ElementsAre("POST /b/k.tar?uploads=", ::testing::StartsWith("PUT "),
                          ::testing::StartsWith("PUT "), ::testing::StartsWith("PUT "),
                          "DELETE /b/k.tar?uploadId=up%261", "DELETE /b/k.tar?uploadId=up%261"));
  EXPECT_EQ(s3_.object(), "(none)");
}

TEST_F(RemoteUploadTest, TransientFailuresOfEveryStepAreRetried) {
  std::map<std::string, int> seen;
  s3_.fault = [&](const FaultRequest& r) -> std::optional<FaultPlan> {
    const std::string step = r.target.find("partNumber=2") != std::string::npos ? "part2"
                             : r.target.find("uploads") != std::string::npos    ? "start"
                             : r.method == "POST"                               ? "complete"
                                                                                : "";
    if (step.empty() || seen[step]++ > 0) return std::nullopt;
    FaultPlan plan;
    if (step == "start") {
      plan.status = 503;
      plan.extra_headers = "Retry-After: 0\r\n";
    } else if (step == "part2") {
      plan.no_response = true;  // the connection closes without an answer
    } else {
      // S3's way: 200, then the failure in the body.
      plan.status = 200;
      plan.body = "<Error><Code>InternalError</Code><Message>try again</Message></Error>";
    }
    return plan;
  };
  const std::string data = RandomBytes(2 * kPart + 5);
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(data).ok());
  ASSERT_TRUE(up->Close().ok()) << up->Close();
  EXPECT_EQ(s3_.object(), data);
  EXPECT_EQ(seen["start"], 2);
  EXPECT_EQ(seen["part2"], 2);
  EXPECT_EQ(seen["complete"], 2);
}

TEST_F(RemoteUploadTest, APermanentFailureNamesTheStepAndAbortsTheUpload) {
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=2") == std::string::npos) return std::nullopt;
    return S3Error(403, "AccessDenied", "Access Denied");
  };
  std::unique_ptr<RemoteUpload> up = Create();
  // Part 2 is sent as the Write ends; its failure comes with the next call.
  ASSERT_TRUE(up->Write(RandomBytes(2 * kPart)).ok());
  const absl::Status failed = up->Close();
  EXPECT_TRUE(absl::IsPermissionDenied(failed)) << failed;
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: sending part 2 (5242880 bytes): HTTP 403 Planned: AccessDenied: Access "
            "Denied");
  EXPECT_EQ(Requests().back(), "DELETE /b/k.tar?uploadId=up%261");
  // Every later call gives the same error, and sends nothing.
  const size_t requests = Requests().size();
  EXPECT_EQ(up->Write("more"), failed);
  EXPECT_EQ(up->Close(), failed);
  up.reset();
  EXPECT_EQ(Requests().size(), requests);
  EXPECT_EQ(s3_.object(), "(none)");
}

TEST_F(RemoteUploadTest, ACompletionRefusedInsideA200IsAnErrorAndAborts) {
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method != "POST" || r.target.find("uploadId=") == std::string::npos) return std::nullopt;
    FaultPlan plan;
    plan.status = 200;
    plan.body =
        "<?xml version=\"1.0\"?>\n<Error><Code>InvalidPart</Code><Message>One or more "
        "of the specified parts could not be found.</Message></Error>";
    return plan;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(kPart + 1)).ok());
  const absl::Status failed = up->Close();
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: completing the multipart upload of 2 parts: HTTP 200 with an error: "
            "InvalidPart: One or more of the specified parts could not be found.");
  EXPECT_EQ(Requests().back(), "DELETE /b/k.tar?uploadId=up%261");
  EXPECT_EQ(s3_.object(), "(none)");
}

TEST_F(RemoteUploadTest, ACompletionWhoseAnswerWasLostIsFoundDoneByItsRetry) {
  // The completion is made and its answer lost; the retry is told the upload
  // is gone (NoSuchUpload), and the object's size and multipart ETag show
  // that it was this upload that completed.
  s3_.drop_completion_answers = 1;
  s3_.server = &server_;
  const std::string data = RandomBytes(kPart + 7);
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(data).ok());
  ASSERT_TRUE(up->Close().ok());
  EXPECT_EQ(up->etag(), "\"0123abcd-2\"");
  // The completion, its retry told NoSuchUpload, and the check of the object.
  EXPECT_EQ(Requests(), MultipartRequests(2, {"POST /b/k.tar?uploadId=up%261", "HEAD /b/k.tar"}));
  EXPECT_EQ(s3_.object(), data);
}

TEST_F(RemoteUploadTest, AnUploadGoneWithoutItsObjectIsNotFound) {
  // NoSuchUpload at completion, and the object there is another one (an
  // older object of the key, of another size): the upload failed.
  server_.Put("/b/k.tar", "older object", "\"0123abcd-2\"");
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method != "POST" || r.target.find("uploadId=") == std::string::npos) return std::nullopt;
    return S3Error(404, "NoSuchUpload", "gone");
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(kPart + 7)).ok());
  const absl::Status failed = up->Close();
  EXPECT_TRUE(absl::IsNotFound(failed)) << failed;
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: completing the multipart upload of 2 parts: HTTP 404 Planned: "
            "NoSuchUpload: gone (and the object is not this upload's: 12 bytes, ETag "
            "\"0123abcd-2\")");
}

// --- gs://: GCS's XML API takes S3's multipart protocol

class GcsUploadTest : public RemoteUploadTest {
 protected:
  GcsUploadTest() {
    options_.gcs_endpoint = Cat("http://127.0.0.1:", server_.port());
    options_.gcs_token = "ya29.token";
  }
};

TEST_F(GcsUploadTest, AnObjectGoesUpInPartsWithTheBearerToken) {
  const std::string data = RandomBytes(kPart + 1'000);
  std::unique_ptr<RemoteUpload> up = Create("gs://b/k.tar");
  ASSERT_TRUE(up->Write(data).ok());
  ASSERT_TRUE(up->Close().ok());
  EXPECT_EQ(Requests(), MultipartRequests(2));
  EXPECT_EQ(s3_.object(), data);
  EXPECT_EQ(up->parts(), 2);
  for (const FaultRequest& r : server_.log()) {
    EXPECT_EQ(r.headers.at("authorization"), "Bearer ya29.token") << r.target;
    EXPECT_EQ(r.headers.count("x-amz-content-sha256"), 0u) << r.target;
  }
  // A small one is one PUT.
  ASSERT_TRUE(UploadBytes("small", "gs://b/small.tar", options_).ok());
  EXPECT_EQ(Requests().back(), "PUT /b/small.tar");
  EXPECT_EQ(s3_.object(), "small");
}

TEST_F(GcsUploadTest, HmacKeysSignWithSigV4ForRegionAuto) {
  options_.gcs_token.clear();
  options_.gcs_hmac = AwsCredentials{"GOOGHMAC", "hmacsecret", ""};
  ASSERT_TRUE(UploadBytes("abc", "gs://b/k.tar", options_).ok());
  const FaultRequest put = server_.log().at(0);
  EXPECT_THAT(put.headers.at("authorization"), HasSubstr("AWS4-HMAC-SHA256 Credential=GOOGHMAC/"));
  EXPECT_THAT(put.headers.at("authorization"), HasSubstr("/auto/s3/aws4_request"));
  EXPECT_EQ(put.headers.at("x-amz-content-sha256"), sigv4::Sha256Hex("abc"));
  EXPECT_EQ(s3_.object(), "abc");
}

TEST_F(GcsUploadTest, ACompletionWhoseAnswerWasLostIsFoundDoneByItsDate) {
  // GCS gives a multipart object no MD5-based ETag: the retried completion,
  // told NoSuchUpload, finds this upload's object by its size and a
  // Last-Modified no earlier than the Date the store started the upload.
  s3_.drop_completion_answers = 1;
  s3_.server = &server_;
  s3_.started_at = "Sat, 28 Nov 2026 10:00:00 GMT";
  s3_.completed_at = "Sat, 28 Nov 2026 10:00:00 GMT";  // the same second counts
  const std::string data = RandomBytes(kPart + 7);
  std::unique_ptr<RemoteUpload> up = Create("gs://b/k.tar");
  ASSERT_TRUE(up->Write(data).ok());
  ASSERT_TRUE(up->Close().ok());
  // The completion, its retry told NoSuchUpload, and the check of the object.
  EXPECT_EQ(Requests(), MultipartRequests(2, {"POST /b/k.tar?uploadId=up%261", "HEAD /b/k.tar"}));
  EXPECT_EQ(s3_.object(), data);
}

TEST_F(GcsUploadTest, AnOlderObjectOfTheSameSizeIsNotTheUploads) {
  const std::string data = RandomBytes(kPart + 7);
  server_.Put("/b/k.tar", data, "\"CJjx\"", "Sat, 28 Nov 2026 09:59:59 GMT");
  s3_.started_at = "Sat, 28 Nov 2026 10:00:00 GMT";
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method != "POST" || r.target.find("uploadId=") == std::string::npos) return std::nullopt;
    return S3Error(404, "NoSuchUpload", "gone");
  };
  std::unique_ptr<RemoteUpload> up = Create("gs://b/k.tar");
  ASSERT_TRUE(up->Write(data).ok());
  const absl::Status failed = up->Close();
  EXPECT_TRUE(absl::IsNotFound(failed)) << failed;
  EXPECT_EQ(Message(failed),
            "gs://b/k.tar: completing the multipart upload of 2 parts: HTTP 404 Planned: "
            "NoSuchUpload: gone (and the object is not this upload's: 5242887 bytes, ETag "
            "\"CJjx\", last modified Sat, 28 Nov 2026 09:59:59 GMT; the upload began Sat, 28 Nov "
            "2026 10:00:00 GMT)");
  // Without the store's Date, nothing shows the object is the upload's.
  s3_.started_at.clear();
  up = Create("gs://b/k.tar");
  ASSERT_TRUE(up->Write(data).ok());
  EXPECT_THAT(Message(up->Close()), HasSubstr("; the upload began at an unknown time)"));
}

TEST_F(RemoteUploadTest, ACompletionMayBeSilentLongerThanTheStallTimeout) {
  // GCS says a completion can take minutes; it is waited for, not retried.
  // (600 ms: the parts, 5 MiB each, are not cut on a loaded machine.)
  options_.stall_timeout = std::chrono::milliseconds(600);
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method == "POST" && r.target.find("uploadId=") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1'500));
    }
    return std::nullopt;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(kPart + 7)).ok());
  ASSERT_TRUE(up->Close().ok());
  EXPECT_EQ(Requests().size(), 4u);  // one completion
  EXPECT_EQ(up->etag(), "\"0123abcd-2\"");
}

TEST_F(RemoteUploadTest, MaxRetryTimeRunsFromTheFirstFailureNotTheFirstAttempt) {
  // A completion that fails after longer than max_retry_time is still
  // retried: the time runs from that failure.
  options_.max_retry_time = std::chrono::milliseconds(800);
  std::atomic<int> completions{0};
  s3_.fault = [&](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method != "POST" || r.target.find("uploadId=") == std::string::npos) return std::nullopt;
    if (completions++ > 0) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(1'200));
    return S3Error(503, "SlowDown", "later");
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(kPart + 7)).ok());
  const absl::Status closed = up->Close();
  ASSERT_TRUE(closed.ok()) << closed;
  EXPECT_EQ(completions.load(), 2);
  EXPECT_EQ(Requests().back(), "POST /b/k.tar?uploadId=up%261");
}

TEST_F(RemoteUploadTest, S3sRequestTimeoutIsRetriedThoughItIsA400) {
  int refused = 0;
  s3_.fault = [&](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method != "PUT" || refused++ > 0) return std::nullopt;
    FaultPlan plan;
    plan.status = 400;
    plan.body =
        "<Error><Code>RequestTimeout</Code><Message>Your socket connection to the "
        "server was not read from or written to within the timeout period.</Message>"
        "</Error>";
    return plan;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write("abc").ok());
  ASSERT_TRUE(up->Close().ok());
  EXPECT_THAT(Requests(), ElementsAre("PUT /b/k.tar", "PUT /b/k.tar"));
  EXPECT_EQ(s3_.object(), "abc");
}

TEST_F(RemoteUploadTest, AnInterruptEndsTheUploadAndTheAbortIsStillSent) {
  // Shared: the server's thread may look at it after the test body ended.
  auto answer_part2 = std::make_shared<std::atomic<bool>>(false);
  s3_.fault = [answer_part2](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=2") == std::string::npos) return std::nullopt;
    // Part 2 waits for an answer the test gives only after the interrupt.
    while (!*answer_part2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return std::nullopt;
  };
  std::unique_ptr<RemoteUpload> up = Create();
  std::atomic<bool> stop{false};
  absl::Status failed;
  {
    ScopedInterruptCheck check(
        [&] { return stop ? absl::CancelledError("stopped by the test") : absl::OkStatus(); });
    std::thread stopper([&] {
      while (server_.log().size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      stop = true;
    });
    // Part 2 is sent as the Write ends; Close waits for it.
    EXPECT_TRUE(up->Write(RandomBytes(2 * kPart)).ok());
    failed = up->Close();
    stopper.join();
  }
  *answer_part2 = true;
  EXPECT_TRUE(absl::IsCancelled(failed)) << failed;
  EXPECT_EQ(Message(failed), "s3://b/k.tar: sending part 2: stopped by the test");
  EXPECT_EQ(Requests().back(), "DELETE /b/k.tar?uploadId=up%261");
}

TEST_F(RemoteUploadTest, AShardWriterThatCannotStartAShardLeavesNoStagingFile) {
  testing::TempDir staging;
  ShardWriterOptions o;
  o.remote = options_;
  o.staging_dir = staging.path();
  o.tar.compression = TarCompression::kGzip;
  o.tar.level = 42;
  absl::StatusOr<std::unique_ptr<ShardWriter>> w = ShardWriter::Create("s3://b/x-%02d.tar.gz", o);
  ASSERT_TRUE(w.ok()) << w.status();
  Sample sample;
  sample.Set("__key__", std::string("a"));
  sample.Set("txt", std::string("hello"));
  const absl::Status failed = (*w)->Write(sample);
  EXPECT_TRUE(absl::IsInvalidArgument(failed)) << failed;
  EXPECT_TRUE(std::filesystem::is_empty(staging.path()));
  EXPECT_THAT(Requests(), IsEmpty());
}

TEST_F(RemoteUploadTest, AnAbortThatFailsIsAddedToTheErrorWithTheUploadId) {
  s3_.fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.target.find("partNumber=2") == std::string::npos && r.method != "DELETE") {
      return std::nullopt;
    }
    return S3Error(403, "AccessDenied", "no");
  };
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(2 * kPart)).ok());
  const absl::Status failed = up->Close();
  EXPECT_TRUE(absl::IsPermissionDenied(failed)) << failed;
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: sending part 2 (5242880 bytes): HTTP 403 Planned: AccessDenied: no; "
            "then s3://b/k.tar: aborting the multipart upload: HTTP 403 Planned: AccessDenied: "
            "no (upload ID up&1: its parts stay stored until it is aborted)");
}

TEST_F(RemoteUploadTest, DestroyingAnUnclosedUploadAbortsIt) {
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write(RandomBytes(kPart + 10)).ok());
  up.reset();
  EXPECT_EQ(Requests().back(), "DELETE /b/k.tar?uploadId=up%261");
  EXPECT_EQ(s3_.object(), "(none)");

  // With no part sent yet, nothing was started, and nothing is sent.
  const size_t requests = Requests().size();
  up = Create();
  ASSERT_TRUE(up->Write("abc").ok());
  up->Abort();
  EXPECT_TRUE(absl::IsCancelled(up->Close()));
  EXPECT_EQ(Message(up->Write("x")), "s3://b/k.tar: the upload was aborted");
  up.reset();
  EXPECT_EQ(Requests().size(), requests);
}

TEST_F(RemoteUploadTest, AnAbortAfterCloseLeavesTheObject) {
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write("abc").ok());
  ASSERT_TRUE(up->Close().ok());
  up->Abort();
  EXPECT_TRUE(up->Close().ok());
  EXPECT_THAT(Requests(), ElementsAre("PUT /b/k.tar"));
  EXPECT_EQ(s3_.object(), "abc");
}

TEST_F(RemoteUploadTest, TransientFailuresThatLastGiveUpAfterMaxAttempts) {
  s3_.fault = [](const FaultRequest&) -> std::optional<FaultPlan> {
    return S3Error(503, "SlowDown", "Reduce your rate");
  };
  options_.max_attempts = 3;
  std::unique_ptr<RemoteUpload> up = Create();
  ASSERT_TRUE(up->Write("abc").ok());
  const absl::Status failed = up->Close();
  EXPECT_TRUE(absl::IsUnavailable(failed)) << failed;
  EXPECT_EQ(Message(failed),
            "s3://b/k.tar: sending the object (3 bytes): giving up after 3 failed attempt(s) in a "
            "row; last error: HTTP 503 Planned: SlowDown: Reduce your rate");
  EXPECT_EQ(Requests().size(), 3u);
}

TEST_F(RemoteUploadTest, CreateRefusesWhatItCannotWrite) {
  for (const std::string url : {"https://example.com/k.tar", "pipe:cat", "/tmp/k.tar"}) {
    absl::StatusOr<std::unique_ptr<RemoteUpload>> up = RemoteUpload::Create(url, options_);
    EXPECT_TRUE(absl::IsInvalidArgument(up.status())) << url;
    EXPECT_EQ(Message(up.status()),
              Cat(url,
                  ": only s3:// and gs:// URLs are written in-process (write others through "
                  "a command, pipe:curl -T - https://...)"));
  }
  // GCS takes no anonymous writes: a gs:// URL needs a token or HMAC keys
  // (or an emulator's endpoint).
  EXPECT_EQ(Message(RemoteUpload::Create("gs://b/k.tar", options_).status()),
            "gs://b/k.tar: writing to GCS needs credentials: a bearer token "
            "(GOOGLE_OAUTH_ACCESS_TOKEN or gcs_token; `gcloud auth print-access-token` prints "
            "one) or HMAC keys (WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET, or gcs_hmac); or "
            "write through pipe:gsutil cp - gs://b/k.tar");
  options_.gcs_endpoint = "http://127.0.0.1:1";
  EXPECT_EQ(Message(RemoteUpload::Create("gs://b/", options_).status()),
            "gs://b/: no object key (expected scheme://bucket/key)");
  EXPECT_EQ(Message(RemoteUpload::Create("s3://b", options_).status()),
            "s3://b: no object key (expected scheme://bucket/key)");
  options_.upload_part_size = (int64_t{5} << 20) - 1;
  EXPECT_EQ(Message(RemoteUpload::Create("s3://b/k", options_).status()),
            "s3://b/k: upload_part_size must be from 5242880 to 5368709120 bytes (S3's and "
            "GCS's limits), "
            "got 5242879");
  options_.upload_part_size = kPart;
  options_.upload_concurrency = 0;
  EXPECT_EQ(Message(RemoteUpload::Create("s3://b/k", options_).status()),
            "s3://b/k: upload_concurrency must be from 1 to 64, got 0");
  EXPECT_THAT(Requests(), IsEmpty());
}

TEST_F(RemoteUploadTest, DeleteRemoteObjectTakesAMissingObjectAsDeleted) {
  EXPECT_TRUE(DeleteRemoteObject("s3://b/k.tar.idx", options_).ok());
  s3_.fault = [](const FaultRequest&) -> std::optional<FaultPlan> {
    return S3Error(404, "NoSuchKey", "none");
  };
  EXPECT_TRUE(DeleteRemoteObject("s3://b/k.tar.idx", options_).ok());
  s3_.fault = [](const FaultRequest&) -> std::optional<FaultPlan> {
    FaultPlan plan;
    plan.status = 403;
    return plan;
  };
  EXPECT_EQ(Message(DeleteRemoteObject("s3://b/k.tar.idx", options_)),
            "s3://b/k.tar.idx: deleting the object: HTTP 403 Planned");
  EXPECT_THAT(Requests(),
              ElementsAre("DELETE /b/k.tar.idx", "DELETE /b/k.tar.idx", "DELETE /b/k.tar.idx"));
}

// --- ShardWriter: each shard uploads in the background while the next fills

// ObjectStore plays S3 for single PUTs of many keys (shards under the part
// size), kept by path; `fault` may answer a request instead. Shared with the
// server's threads, which may still answer while a test ends.
struct ObjectStore {
  std::function<std::optional<FaultPlan>(const FaultRequest&)> fault;
  // held: the PUTs of this path are answered only once `gate` opens (or
  // after 30 s): the server's thread waits before it answers.
  std::string held;
  std::atomic<bool> gate{true};
  std::mutex mu;
  std::map<std::string, std::string> objects;

  FaultPlan Answer(const FaultRequest& r) {
    if (r.method == "PUT" && r.target == held) {
      for (int ms = 0; ms < 30'000 && !gate.load(); ms += 10) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (fault) {
      if (std::optional<FaultPlan> plan = fault(r); plan.has_value()) return *plan;
    }
    FaultPlan plan;
    plan.status = r.method == "PUT" ? 200 : r.method == "DELETE" ? 204 : 405;
    if (r.method == "PUT") {
      std::lock_guard<std::mutex> lock(mu);
      objects[r.target] = r.body;
      plan.extra_headers = "ETag: \"whole\"\r\n";
    }
    return plan;
  }
  std::map<std::string, std::string> Objects() {
    std::lock_guard<std::mutex> lock(mu);
    return objects;
  }
};

class ShardUploadTest : public RemoteUploadTest {
 protected:
  ShardUploadTest() {
    server_.SetPlanner([store = store_](const FaultRequest& r) { return store->Answer(r); });
  }
  // The server's threads still waiting at the gate answer at once.
  ~ShardUploadTest() override { store_->gate = true; }

  // Writer writes shards of 2 samples to s3://b/x-NN.tar, recording on_close.
  std::unique_ptr<ShardWriter> Writer(bool in_background = true) {
    ShardWriterOptions o;
    o.maxcount = 2;
    o.upload_in_background = in_background;
    o.remote = options_;
    o.staging_dir = staging_.path();
    o.on_close = [this](const ShardInfo& shard) {
      closed_.push_back(shard.path);
      return absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<ShardWriter>> w = ShardWriter::Create("s3://b/x-%02d.tar", o);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? *std::move(w) : nullptr;
  }

  static Sample Numbered(int i) {
    Sample s;
    s.Set("__key__", Cat("k", i));
    s.Set("txt", Cat("sample ", i));
    return s;
  }

  // LocalShards is what a local ShardWriter writes of samples [0, n): the
  // bytes of each shard, by the path S3 would store it under.
  std::map<std::string, std::string> LocalShards(int n) {
    testing::TempDir dir;
    ShardWriterOptions o;
    o.maxcount = 2;
    auto w = ShardWriter::Create(dir.path() + "/x-%02d.tar", o).value();
    for (int i = 0; i < n; ++i) EXPECT_TRUE(w->Write(Numbered(i)).ok());
    EXPECT_TRUE(w->Close().ok());
    std::map<std::string, std::string> shards;
    for (int s = 0; s < (n + 1) / 2; ++s) {
      shards[Cat("/b/x-0", s, ".tar")] = testing::ReadFile(Cat(dir.path(), "/x-0", s, ".tar"));
    }
    return shards;
  }

  // HoldAtTheGate holds the PUTs of `target` until OpenTheGate.
  void HoldAtTheGate(const std::string& target) {
    store_->held = target;
    store_->gate = false;
  }
  void OpenTheGate() { store_->gate = true; }

  std::shared_ptr<ObjectStore> store_ = std::make_shared<ObjectStore>();
  testing::TempDir staging_;
  std::vector<std::string> closed_;
};

TEST_F(ShardUploadTest, TheNextShardFillsWhileTheLastUploads) {
  HoldAtTheGate("/b/x-00.tar");
  std::unique_ptr<ShardWriter> w = Writer();
  // Sample 2 finishes shard 0, whose upload waits at the gate; samples 2
  // and 3 fill shard 1 meanwhile.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  EXPECT_EQ(w->shards_written(), 0);
  EXPECT_THAT(closed_, IsEmpty());
  OpenTheGate();
  // Sample 4 finishes shard 1: shard 0's upload is waited for, and counted.
  ASSERT_TRUE(w->Write(Numbered(4)).ok());
  EXPECT_EQ(w->shards_written(), 1);
  EXPECT_THAT(closed_, ElementsAre("s3://b/x-00.tar"));
  ASSERT_TRUE(w->Close().ok());
  EXPECT_EQ(w->shards_written(), 3);
  EXPECT_THAT(closed_, ElementsAre("s3://b/x-00.tar", "s3://b/x-01.tar", "s3://b/x-02.tar"));
  EXPECT_EQ(store_->Objects(), LocalShards(5));
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, WithoutTheBackgroundTheWriteThatFinishesAShardUploadsIt) {
  std::unique_ptr<ShardWriter> w = Writer(/*in_background=*/false);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  EXPECT_EQ(w->shards_written(), 1);
  EXPECT_THAT(closed_, ElementsAre("s3://b/x-00.tar"));
  EXPECT_EQ(store_->Objects(),
            (std::map<std::string, std::string>{{"/b/x-00.tar", LocalShards(2)["/b/x-00.tar"]}}));
  ASSERT_TRUE(w->Close().ok());
  EXPECT_EQ(store_->Objects(), LocalShards(3));
}

TEST_F(ShardUploadTest, AnUploadsErrorIsReturnedWhenTheNextShardFinishes) {
  store_->fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method == "PUT" && r.target == "/b/x-00.tar") return S3Error(403, "AccessDenied", "no");
    return std::nullopt;
  };
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  const absl::Status failed = w->Write(Numbered(4));
  EXPECT_EQ(failed.code(), absl::StatusCode::kPermissionDenied) << failed;
  EXPECT_THAT(Message(failed), HasSubstr("s3://b/x-00.tar"));
  EXPECT_THAT(Message(failed), HasSubstr("AccessDenied"));
  // The writer stays failed; nothing after shard 0 went up, nothing is staged.
  EXPECT_EQ(w->Write(Numbered(5)), failed);
  EXPECT_EQ(w->Close(), failed);
  EXPECT_EQ(w->shards_written(), 0);
  EXPECT_THAT(closed_, IsEmpty());
  EXPECT_THAT(store_->Objects(), IsEmpty());
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, TheLastShardsUploadErrorIsReturnedByClose) {
  store_->fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method == "PUT" && r.target == "/b/x-01.tar") return S3Error(403, "AccessDenied", "no");
    return std::nullopt;
  };
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  const absl::Status failed = w->Close();
  EXPECT_EQ(failed.code(), absl::StatusCode::kPermissionDenied) << failed;
  EXPECT_THAT(Message(failed), HasSubstr("s3://b/x-01.tar"));
  EXPECT_EQ(w->shards_written(), 1);
  EXPECT_THAT(closed_, ElementsAre("s3://b/x-00.tar"));
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, AnErrorOfTheWriterStillPublishesTheShardUploading) {
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  Sample bad = Numbered(3);
  bad.Set("__key__", std::string("a.b"));
  EXPECT_TRUE(absl::IsInvalidArgument(w->Write(bad)));
  EXPECT_EQ(w->shards_written(), 1);
  EXPECT_THAT(closed_, ElementsAre("s3://b/x-00.tar"));
  EXPECT_EQ(store_->Objects(),
            (std::map<std::string, std::string>{{"/b/x-00.tar", LocalShards(2)["/b/x-00.tar"]}}));
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, AFailedWriteAddsTheErrorOfTheShardUploading) {
  store_->fault = [](const FaultRequest& r) -> std::optional<FaultPlan> {
    if (r.method == "PUT" && r.target == "/b/x-00.tar") return S3Error(403, "AccessDenied", "no");
    return std::nullopt;
  };
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  Sample bad = Numbered(3);
  bad.Set("__key__", std::string("a.b"));
  const absl::Status failed = w->Write(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(failed)) << failed;
  EXPECT_THAT(Message(failed), HasSubstr("key 'a.b' cannot be written"));
  EXPECT_THAT(Message(failed), HasSubstr("; and the shard before, s3://b/x-00.tar: "));
  EXPECT_THAT(Message(failed), HasSubstr("AccessDenied"));
  EXPECT_EQ(w->shards_written(), 0);
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, AnAbortCountsAShardThatHadGoneUp) {
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  // Shard 0's upload ends on its own (the server has it, and answered).
  for (int i = 0; i < 1000 && store_->Objects().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  w->Abort();
  EXPECT_EQ(w->shards_written(), 1);
  EXPECT_THAT(closed_, IsEmpty());  // on_close runs in Write and Close only
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

TEST_F(ShardUploadTest, AForkedChildThatDropsTheWriterLeavesTheUploadToTheParent) {
  HoldAtTheGate("/b/x-00.tar");
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  const pid_t child = fork();
  if (child == 0) {
    alarm(10);  // a join of the parent's thread would hang: die instead
    w.reset();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  OpenTheGate();
  ASSERT_TRUE(w->Close().ok());  // the staged files were left alone
  EXPECT_EQ(w->shards_written(), 2);
  EXPECT_EQ(store_->Objects(), LocalShards(3));
}

TEST_F(ShardUploadTest, AbortAndAnInterruptCancelTheUploadInProgress) {
  HoldAtTheGate("/b/x-00.tar");
  const auto start = std::chrono::steady_clock::now();
  {
    std::unique_ptr<ShardWriter> w = Writer();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  }  // destroyed: the upload held at the gate is cancelled, not waited for
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
  // The caller's interrupt check gives up on the wait for the upload.
  std::unique_ptr<ShardWriter> w = Writer();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(w->Write(Numbered(i)).ok()) << i;
  std::atomic<bool> stop{false};
  absl::Status interrupted;
  {
    ScopedInterruptCheck check(
        [&] { return stop.load() ? absl::CancelledError("Ctrl-C") : absl::OkStatus(); });
    stop = true;
    interrupted = w->Write(Numbered(4));
  }
  EXPECT_EQ(interrupted, absl::CancelledError("Ctrl-C"));
  EXPECT_EQ(w->shards_written(), 0);
  EXPECT_THAT(closed_, IsEmpty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(std::filesystem::is_empty(staging_.path()));
}

}  // namespace
}  // namespace wds
