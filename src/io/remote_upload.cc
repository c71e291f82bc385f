// RemoteUpload: one PUT, or a multipart upload (initiate, parts, complete;
// abort on failure) in S3's protocol, which GCS's XML API shares; each
// request retried as reads are.
#include "wds/io/remote_upload.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "io/http_transfer.h"
#include "io/local_url.h"
#include "io/remote_stream.h"
#include "io/remote_target.h"
#include "wds/base/interrupt.h"
#include "wds/internal/base/signals_blocked.h"
#include "wds/internal/base/status_macros.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

constexpr int64_t kMinPartSize = int64_t{5} << 20;
constexpr int64_t kMaxPartSize = int64_t{5} << 30;
constexpr int kMaxParts = 10000;
constexpr int kMaxConcurrency = 64;
// Parts double in size after every kPartsPerSize of them.
constexpr int kPartsPerSize = 1000;
// The most of a successful answer's body read (S3 answers with short XML).
constexpr size_t kMaxAnswerBody = 1 << 20;
// An abort's attempts and retry time (see Exchanger::Exchange).
constexpr int kBriefAttempts = 2;
constexpr std::chrono::milliseconds kBriefWait{5'000};
// How long a completion may be silent: GCS says one can take several
// minutes, and is not known to send spaces meanwhile as S3 does.
constexpr std::chrono::minutes kCompletionSilence{10};
// S3 error codes that a later attempt may not meet.
constexpr std::string_view kTransientCodes[] = {"InternalError", "SlowDown", "ServiceUnavailable",
                                                "RequestTimeout"};

bool IsTransientCode(std::string_view code) {
  return std::find(std::begin(kTransientCodes), std::end(kTransientCodes), code) !=
         std::end(kTransientCodes);
}

// XmlUnescape decodes the five predefined entities of XML text.
std::string XmlUnescape(std::string_view text) {
  static constexpr std::pair<std::string_view, char> kEntities[] = {
      {"&quot;", '"'}, {"&amp;", '&'},   {"&lt;", '<'},
      {"&gt;", '>'},   {"&apos;", '\''}, {"&#34;", '"'}};
  std::string out;
  for (size_t i = 0; i < text.size();) {
    bool decoded = false;
    if (text[i] == '&') {
      for (const auto& [entity, c] : kEntities) {
        if (text.substr(i, entity.size()) == entity) {
          out.push_back(c);
          i += entity.size();
          decoded = true;
          break;
        }
      }
    }
    if (!decoded) out.push_back(text[i++]);
  }
  return out;
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Answer is a successful response and its body.
struct Answer {
  HttpResponse response;
  std::string body;
};

// Exchanger sends one object's requests on one connection, each retried
// after transient failures.
class Exchanger {
 public:
  // A kBrief exchange (an abort, which must also end when an interrupt
  // already ended the upload) ignores the thread's interrupt check, and is
  // bounded instead: at most kBriefAttempts attempts, kBriefWait to
  // connect, of silence, and of retrying. A kPatient one (a completion)
  // waits up to kCompletionSilence for its answer.
  enum class Limits { kUsual, kBrief, kPatient };

  Exchanger(std::string url, RemoteTarget target, const RemoteOptions& options)
      : url_(std::move(url)),
        target_(std::move(target)),
        options_(options),
        brief_(Brief(options)),
        patient_(Patient(options)),
        jitter_(std::random_device{}()) {}

  const std::string& url() const { return url_; }
  const RemoteTarget& target() const { return target_; }

  // Exchange sends the request `make` builds (signed anew for each attempt)
  // until an answer is a success (2xx, or `also_ok`) or an error that is not
  // transient. `what` names the step in errors ("sending part 3").
  absl::StatusOr<Answer> Exchange(std::string_view what, const std::function<HttpRequest()>& make,
                                  long also_ok = 0, Limits kind = Limits::kUsual) {
    std::optional<ScopedInterruptCheck> unstoppable;
    if (kind == Limits::kBrief) unstoppable.emplace([] { return absl::OkStatus(); });
    const RemoteOptions& limits = kind == Limits::kBrief     ? brief_
                                  : kind == Limits::kPatient ? patient_
                                                             : options_;
    int failures = 0;
    // max_retry_time runs from the first failure's end, not the first
    // attempt's start: a completion may take minutes before it fails.
    std::chrono::steady_clock::time_point since;
    while (true) {
      std::string retry_after;
      absl::Status error = Attempt(make(), limits, also_ok, retry_after);
      if (error.ok()) return std::move(answer_);
      if (++failures == 1) since = std::chrono::steady_clock::now();
      const std::string last(ToStd(error.message()));
      if (!absl::IsUnavailable(error))
        return absl::Status(error.code(), Cat(url_, ": ", what, ": ", last));
      auto give_up = [&](std::string_view why) {
        return absl::UnavailableError(Cat(url_, ": ", what, ": giving up after ", failures,
                                          " failed attempt(s) in a row", why,
                                          "; last error: ", last));
      };
      if (transfer_.unresolved()) {
        return give_up(" (a host name that does not resolve is not retried)");
      }
      if (failures >= limits.max_attempts) return give_up("");
      const auto delay = BackoffDelay(failures, limits, RetryAfter(retry_after), jitter_);
      if (std::chrono::steady_clock::now() + delay - since > limits.max_retry_time) {
        return give_up(Cat(" (the next wait, ", delay.count(), " ms, would pass max_retry_time of ",
                           limits.max_retry_time.count(), " ms)"));
      }
      if (absl::Status waited = Backoff(delay); !waited.ok()) {
        return absl::Status(waited.code(), Cat(url_, ": ", what, ": ", ToStd(waited.message())));
      }
    }
  }

 private:
  // Attempt sends `request` once; ok fills answer_. Errors are Unavailable
  // when another attempt may succeed.
  absl::Status Attempt(const HttpRequest& request, const RemoteOptions& limits, long also_ok,
                       std::string& retry_after) {
    WDS_RETURN_IF_ERROR(transfer_.Begin(request, limits));
    const HttpResponse& r = transfer_.response();
    retry_after = r.retry_after;
    const bool ok = (r.status >= 200 && r.status < 300) || r.status == also_ok;
    if (!ok) {
      // HttpStatusError names the URL; the caller adds it again with the step.
      absl::Status status = HttpStatusError("", r);
      // S3's 400 RequestTimeout (it waited too long for the body) is worth
      // another attempt, whatever the status says.
      const absl::StatusCode code = IsTransientCode(Between(r.body, "<Code>", "</Code>"))
                                        ? absl::StatusCode::kUnavailable
                                        : status.code();
      return absl::Status(code, std::string(ToStd(status.message()).substr(2)));
    }
    answer_ = Answer{r, ""};
    char chunk[16 << 10];
    while (answer_.body.size() < kMaxAnswerBody) {
      absl::StatusOr<size_t> n = transfer_.Read(chunk, sizeof(chunk));
      if (!n.ok()) return n.status();
      if (*n == 0) break;
      answer_.body.append(chunk, *n);
    }
    // S3 may answer a completion 200 and then report its failure in the
    // body, sent while it worked.
    if (std::string_view error = Between(answer_.body, "<Error>", "</Error>"); !error.empty()) {
      const std::string code(Between(error, "<Code>", "</Code>"));
      const std::string message = Cat("HTTP ", r.status, " with an error: ", code, ": ",
                                      XmlUnescape(Between(error, "<Message>", "</Message>")));
      return IsTransientCode(code) ? absl::UnavailableError(message) : absl::UnknownError(message);
    }
    return absl::OkStatus();
  }

  std::string url_;
  RemoteTarget target_;
  static RemoteOptions Brief(RemoteOptions o) {
    o.max_attempts = std::min(o.max_attempts, kBriefAttempts);
    o.max_retry_time = std::min<std::chrono::milliseconds>(o.max_retry_time, kBriefWait);
    o.stall_timeout = std::min<std::chrono::milliseconds>(o.stall_timeout, kBriefWait);
    o.connect_timeout = std::min<std::chrono::milliseconds>(o.connect_timeout, kBriefWait);
    return o;
  }
  static RemoteOptions Patient(RemoteOptions o) {
    o.stall_timeout = std::max<std::chrono::milliseconds>(o.stall_timeout, kCompletionSilence);
    o.low_speed_time = std::max<std::chrono::seconds>(o.low_speed_time, kCompletionSilence);
    return o;
  }

  const RemoteOptions& options_;
  RemoteOptions brief_;
  RemoteOptions patient_;
  HttpTransfer transfer_;
  Answer answer_;
  std::mt19937_64 jitter_;
};

absl::StatusOr<RemoteTarget> ResolveForWriting(const std::string& url,
                                               const RemoteOptions& options) {
  if (!StartsWith(url, "s3://") && !StartsWith(url, "gs://")) {
    return absl::InvalidArgumentError(
        Cat(url,
            ": only s3:// and gs:// URLs are written in-process (write others through a "
            "command, pipe:curl -T - https://...)"));
  }
  if (StartsWith(url, "gs://") && options.gcs_token.empty() && !options.gcs_hmac.has_value() &&
      options.gcs_endpoint.empty()) {
    // GCS takes no anonymous writes (but to a bucket anyone may write).
    return absl::InvalidArgumentError(
        Cat(url,
            ": writing to GCS needs credentials: a bearer token (GOOGLE_OAUTH_ACCESS_TOKEN or "
            "gcs_token; `gcloud auth print-access-token` prints one) or HMAC keys "
            "(WDS_GCS_HMAC_ACCESS_ID and WDS_GCS_HMAC_SECRET, or gcs_hmac); or write through "
            "pipe:gsutil cp - ",
            url));
  }
  AwsCredentialSource credentials(options);
  return RemoteTarget::Resolve(url, options, credentials);
}

}  // namespace

// Sender sends one part at a time on a thread of its own, over its own
// connection; an upload reuses its senders (and their buffers) part after
// part.
struct Sender {
  Sender(const std::string& url, const RemoteTarget& target, const RemoteOptions& options)
      : exchanger(url, target, options) {}

  Exchanger exchanger;
  std::string bytes;
  int number = 0;
  std::thread thread;
  // Set by the thread when it ends: its result, and the part's ETag.
  absl::Status status;
  std::string etag;
  bool done = false;  // guarded by State::mu
};

struct RemoteUpload::State {
  State(std::string url, RemoteTarget target, const RemoteOptions& o)
      : options(o),
        gcs(StartsWith(url, "gs://")),
        exchanger(std::move(url), std::move(target), options) {}
  ~State() { StopSenders(); }

  // PartSize is the size of part `number` (1-based).
  int64_t PartSize(int number) const {
    const int doublings = (number - 1) / kPartsPerSize;
    return std::min(kMaxPartSize, options.upload_part_size << std::min(doublings, 20));
  }
  absl::Status Initiate();
  // SendPart hands the full `part` to a sender, first waiting for the
  // oldest one in flight when upload_concurrency are.
  absl::Status SendPart();
  // Send runs on a sender's thread.
  void Send(Sender& sender);
  // Reap waits for the oldest part in flight and takes its result; the
  // caller's interrupt check can end the wait.
  absl::Status Reap();
  // StopSenders cancels the parts in flight and waits for their threads,
  // and frees every sender; true when a part was in flight.
  bool StopSenders();
  absl::Status Complete();
  // CompletedBefore decides on a completion refused with a 404: an earlier
  // attempt may have completed the upload.
  absl::Status CompletedBefore(const std::string& what, const HttpResponse& refusal);
  absl::Status PutWhole();
  // AbortUpload tells the store to drop the multipart upload's parts; twice
  // when `again`: a part cancelled after its body was sent may still be
  // stored after the first (S3 says an abort may need repeating).
  absl::Status AbortUpload(bool again = false);
  // Fail records `status` as the upload's error, aborting the upload.
  absl::Status Fail(absl::Status status);

  RemoteOptions options;
  // gcs: the object is in GCS, whose multipart objects have no MD5-based
  // ETag (CompletedBefore).
  bool gcs;
  Exchanger exchanger;
  std::string part;
  std::string upload_id;
  // initiated: the store's Date when it started the multipart upload.
  std::string initiated;
  // part_etags[n - 1] is part n's ETag, once it was sent.
  std::vector<std::string> part_etags;
  int parts_started = 0;
  std::deque<std::unique_ptr<Sender>> in_flight;  // oldest first
  std::vector<std::unique_ptr<Sender>> idle;
  std::mutex mu;
  std::condition_variable sender_done;
  // cancel ends the senders' requests (their interrupt check).
  std::atomic<bool> cancel{false};
  int64_t size = 0;
  std::string etag;
  absl::Status error;
  bool closed = false;
};

absl::Status RemoteUpload::State::Initiate() {
  WDS_ASSIGN_OR_RETURN(Answer answer, exchanger.Exchange("starting a multipart upload", [&] {
    return exchanger.target().Send("POST", {{"uploads", ""}},
                                   {{"Content-Type", "application/octet-stream"}}, "");
  }));
  upload_id = XmlUnescape(Between(answer.body, "<UploadId>", "</UploadId>"));
  initiated = answer.response.date;
  if (upload_id.empty()) {
    return absl::UnknownError(
        Cat(exchanger.url(), ": starting a multipart upload: the answer names no UploadId"));
  }
  return absl::OkStatus();
}

absl::Status RemoteUpload::State::SendPart() {
  if (upload_id.empty()) WDS_RETURN_IF_ERROR(Initiate());
  while (static_cast<int>(in_flight.size()) >= options.upload_concurrency) {
    WDS_RETURN_IF_ERROR(Reap());
  }
  std::unique_ptr<Sender> sender;
  if (idle.empty()) {
    sender = std::make_unique<Sender>(exchanger.url(), exchanger.target(), options);
  } else {
    sender = std::move(idle.back());
    idle.pop_back();
  }
  sender->number = ++parts_started;
  sender->done = false;
  sender->bytes.swap(part);  // `part` takes the sender's old buffer
  part.clear();
  Sender* s = sender.get();
  try {
    // Senders take no asynchronous signals: the writer's thread handles them.
    const SignalsBlocked senders_take_no_signals;
    s->thread = std::thread([this, s] { Send(*s); });
  } catch (const std::system_error& e) {
    part.swap(s->bytes);  // the part is the writer's again
    --parts_started;
    idle.push_back(std::move(sender));
    return absl::ResourceExhaustedError(
        Cat(exchanger.url(), ": cannot start a thread to send a part: ", e.what()));
  }
  in_flight.push_back(std::move(sender));
  return absl::OkStatus();
}

void RemoteUpload::State::Send(Sender& sender) {
  ScopedInterruptCheck check([this] {
    return cancel ? absl::CancelledError("the upload was given up") : absl::OkStatus();
  });
  const std::string what =
      Cat("sending part ", sender.number, " (", sender.bytes.size(), " bytes)");
  absl::StatusOr<Answer> answer = sender.exchanger.Exchange(what, [&] {
    return sender.exchanger.target().Send(
        "PUT", {{"partNumber", Cat(sender.number)}, {"uploadId", upload_id}},
        {{"Content-Type", "application/octet-stream"}}, sender.bytes);
  });
  absl::Status status = answer.status();
  if (answer.ok() && answer->response.etag.empty()) {
    status = absl::UnknownError(Cat(exchanger.url(), ": ", what, ": the answer has no ETag"));
  }
  std::lock_guard<std::mutex> lock(mu);
  sender.status = std::move(status);
  if (answer.ok()) sender.etag = answer->response.etag;
  sender.done = true;
  sender_done.notify_all();
}

absl::Status RemoteUpload::State::Reap() {
  Sender& oldest = *in_flight.front();
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!oldest.done) {
      sender_done.wait_for(lock, kInterruptCheckInterval);
      if (oldest.done) break;
      lock.unlock();
      absl::Status go_on = CheckInterrupt();
      lock.lock();
      if (!go_on.ok()) {
        return absl::Status(go_on.code(), Cat(exchanger.url(), ": sending part ", oldest.number,
                                              ": ", ToStd(go_on.message())));
      }
    }
  }
  oldest.thread.join();
  absl::Status status = std::move(oldest.status);
  if (status.ok()) {
    if (part_etags.size() < static_cast<size_t>(oldest.number)) part_etags.resize(oldest.number);
    part_etags[oldest.number - 1] = std::move(oldest.etag);
  }
  oldest.bytes.clear();
  idle.push_back(std::move(in_flight.front()));
  in_flight.pop_front();
  return status;
}

bool RemoteUpload::State::StopSenders() {
  const bool any = !in_flight.empty();
  cancel = true;
  for (std::unique_ptr<Sender>& sender : in_flight) {
    if (sender->thread.joinable()) sender->thread.join();
  }
  in_flight.clear();
  idle.clear();
  return any;
}

absl::Status RemoteUpload::State::Complete() {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < part_etags.size(); ++i) {
    xml += Cat("<Part><PartNumber>", i + 1, "</PartNumber><ETag>", XmlEscape(part_etags[i]),
               "</ETag></Part>");
  }
  xml += "</CompleteMultipartUpload>";
  const std::string what = Cat("completing the multipart upload of ", part_etags.size(), " parts");
  WDS_ASSIGN_OR_RETURN(Answer answer, exchanger.Exchange(
                                          what,
                                          [&] {
                                            return exchanger.target().Send(
                                                "POST", {{"uploadId", upload_id}},
                                                {{"Content-Type", "application/xml"}}, xml);
                                          },
                                          404, Exchanger::Limits::kPatient));
  if (answer.response.status == 404) return CompletedBefore(what, answer.response);
  etag = XmlUnescape(Between(answer.body, "<ETag>", "</ETag>"));
  upload_id.clear();
  return absl::OkStatus();
}

absl::Status RemoteUpload::State::CompletedBefore(const std::string& what,
                                                  const HttpResponse& refusal) {
  // A completion whose answer was lost is retried, and the retry finds the
  // upload gone: the object is there if it has this upload's size and, in
  // S3, a multipart ETag of as many parts ("<md5 of the parts' md5s>-N");
  // in GCS (whose ETag is not based on MD5), a Last-Modified no earlier
  // than the Date the store started the upload.
  const std::string error = Cat(exchanger.url(), ": ", what, ": ",
                                ToStd(HttpStatusError("", refusal).message()).substr(2));
  if (Between(refusal.body, "<Code>", "</Code>") != "NoSuchUpload") {
    return absl::NotFoundError(error);
  }
  absl::StatusOr<Answer> head = exchanger.Exchange(
      "checking the object", [&] { return exchanger.target().Request(/*head=*/true, {}); });
  const std::string parts_suffix = Cat("-", part_etags.size(), "\"");
  auto ours = [&](const HttpResponse& r) {
    if (r.content_length != size) return false;
    if (!gcs) return EndsWith(r.etag, parts_suffix);
    const int64_t started = HttpDate(initiated);
    return started >= 0 && HttpDate(r.last_modified) >= started;
  };
  if (!head.ok() || !ours(head->response)) {
    std::string seen(ToStd(head.status().message()));
    if (head.ok()) {
      seen = Cat(head->response.content_length, " bytes, ETag ", head->response.etag);
      if (gcs) {
        seen += Cat(", last modified ", head->response.last_modified, "; the upload began ",
                    initiated.empty() ? "at an unknown time" : initiated);
      }
    }
    return absl::NotFoundError(Cat(error, " (and the object is not this upload's: ", seen, ")"));
  }
  etag = head->response.etag;
  upload_id.clear();
  return absl::OkStatus();
}

absl::Status RemoteUpload::State::PutWhole() {
  WDS_ASSIGN_OR_RETURN(Answer answer,
                       exchanger.Exchange(Cat("sending the object (", part.size(), " bytes)"), [&] {
                         return exchanger.target().Send(
                             "PUT", {}, {{"Content-Type", "application/octet-stream"}}, part);
                       }));
  etag = answer.response.etag;
  return absl::OkStatus();
}

absl::Status RemoteUpload::State::AbortUpload(bool again) {
  if (upload_id.empty()) return absl::OkStatus();
  // A 404 (NoSuchUpload): nothing is left to drop.
  auto abort = [&] {
    return exchanger.Exchange(
        "aborting the multipart upload",
        [&] {
          return exchanger.target().Send("DELETE", {{"uploadId", upload_id}}, {}, "");
        },
        404, Exchanger::Limits::kBrief);
  };
  absl::StatusOr<Answer> answer = abort();
  if (answer.ok() && again) answer = abort();
  if (!answer.ok()) {
    return absl::Status(answer.status().code(),
                        Cat(ToStd(answer.status().message()), " (upload ID ", upload_id,
                            ": its parts stay stored until it is aborted)"));
  }
  upload_id.clear();
  return absl::OkStatus();
}

absl::Status RemoteUpload::State::Fail(absl::Status status) {
  // Every part has ended before the abort (a cancelled one may still have
  // reached the store: the abort is then sent again).
  const bool cancelled = StopSenders();
  absl::Status aborted = AbortUpload(cancelled);
  if (!aborted.ok()) {
    status = absl::Status(status.code(),
                          Cat(ToStd(status.message()), "; then ", ToStd(aborted.message())));
  }
  part = std::string();
  error = status;
  return status;
}

absl::StatusOr<std::unique_ptr<RemoteUpload>> RemoteUpload::Create(std::string url,
                                                                   const RemoteOptions& options) {
  if (options.upload_part_size < kMinPartSize || options.upload_part_size > kMaxPartSize) {
    return absl::InvalidArgumentError(
        Cat(url, ": upload_part_size must be from ", kMinPartSize, " to ", kMaxPartSize,
            " bytes (S3's and GCS's limits), got ", options.upload_part_size));
  }
  if (options.upload_concurrency < 1 || options.upload_concurrency > kMaxConcurrency) {
    return absl::InvalidArgumentError(Cat(url, ": upload_concurrency must be from 1 to ",
                                          kMaxConcurrency, ", got ", options.upload_concurrency));
  }
  WDS_ASSIGN_OR_RETURN(RemoteTarget target, ResolveForWriting(url, options));
  return std::unique_ptr<RemoteUpload>(
      new RemoteUpload(std::make_unique<State>(std::move(url), std::move(target), options)));
}

RemoteUpload::RemoteUpload(std::unique_ptr<State> state) : state_(std::move(state)) {}

RemoteUpload::~RemoteUpload() {
  if (!state_->closed) Abort();
}

absl::Status RemoteUpload::Write(std::string_view data) {
  State& s = *state_;
  if (!s.error.ok()) return s.error;
  if (s.closed) return absl::FailedPreconditionError(Cat(url(), ": write after Close"));
  while (!data.empty()) {
    const int number = s.parts_started + 1;
    if (number > kMaxParts) {
      return s.Fail(absl::OutOfRangeError(Cat(url(), ": the object passes the store's limit of ",
                                              kMaxParts, " parts (", s.size, " bytes so far)")));
    }
    const size_t part_size = static_cast<size_t>(s.PartSize(number));
    const size_t n = std::min(data.size(), part_size - s.part.size());
    if (s.part.capacity() < s.part.size() + n) {
      // Grown as data comes (a small object holds little), at most to a part.
      s.part.reserve(std::min(part_size, std::max(2 * s.part.capacity(), s.part.size() + n)));
    }
    s.part.append(data.substr(0, n));
    data.remove_prefix(n);
    s.size += static_cast<int64_t>(n);
    if (s.part.size() == part_size) {
      if (absl::Status sent = s.SendPart(); !sent.ok()) return s.Fail(sent);
    }
  }
  return absl::OkStatus();
}

absl::Status RemoteUpload::Close() {
  State& s = *state_;
  if (s.closed || !s.error.ok()) {
    s.closed = true;
    return s.error;
  }
  s.closed = true;
  absl::Status status;
  if (s.upload_id.empty()) {
    status = s.PutWhole();
  } else {
    if (!s.part.empty()) status = s.SendPart();
    while (status.ok() && !s.in_flight.empty()) status = s.Reap();
    if (status.ok()) status = s.Complete();
  }
  if (!status.ok()) return s.Fail(status);
  s.part = std::string();
  s.idle.clear();  // their buffers and connections
  return absl::OkStatus();
}

void RemoteUpload::Abort() {
  State& s = *state_;
  // A closed upload either made its object or failed, and then aborted.
  if (!s.closed && s.error.ok()) {
    (void)s.Fail(absl::CancelledError(Cat(url(), ": the upload was aborted")));
  }
  s.closed = true;
}

const std::string& RemoteUpload::url() const { return state_->exchanger.url(); }
int64_t RemoteUpload::size() const { return state_->size; }
int RemoteUpload::parts() const { return static_cast<int>(state_->part_etags.size()); }
const std::string& RemoteUpload::etag() const { return state_->etag; }

absl::Status UploadFile(const std::string& path, const std::string& url,
                        const RemoteOptions& options) {
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<RemoteUpload> upload, RemoteUpload::Create(url, options));
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<ByteStream> file, OpenLocalUrl(path));
  std::vector<char> buffer(size_t{1} << 20);
  while (true) {
    // An error returns: the upload is aborted as it is destroyed.
    WDS_ASSIGN_OR_RETURN(size_t n, file->Read(buffer.data(), buffer.size()));
    if (n == 0) break;
    WDS_RETURN_IF_ERROR(upload->Write(std::string_view(buffer.data(), n)));
  }
  WDS_RETURN_IF_ERROR(file->Finish());
  return upload->Close();
}

absl::Status UploadBytes(std::string_view bytes, const std::string& url,
                         const RemoteOptions& options) {
  WDS_ASSIGN_OR_RETURN(std::unique_ptr<RemoteUpload> upload, RemoteUpload::Create(url, options));
  WDS_RETURN_IF_ERROR(upload->Write(bytes));
  return upload->Close();
}

absl::Status DeleteRemoteObject(const std::string& url, const RemoteOptions& options) {
  WDS_ASSIGN_OR_RETURN(RemoteTarget target, ResolveForWriting(url, options));
  Exchanger exchanger(url, std::move(target), options);
  return exchanger
      .Exchange(
          "deleting the object", [&] { return exchanger.target().Send("DELETE", {}, {}, ""); }, 404)
      .status();
}

}  // namespace wds
