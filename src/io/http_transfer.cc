// HttpTransfer: libcurl's multi interface driven from the reading thread.
#include "io/http_transfer.h"

#include <strings.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "wds/base/interrupt.h"
#include "wds/internal/base/strings.h"

namespace wds {
namespace {

// The most of an error response's body kept for the message.
constexpr size_t kMaxErrorBody = 16 << 10;
// libcurl's receive buffer: fewer, larger callbacks (measured on loopback:
// 16 KiB 0.62 GB/s, 128 KiB 0.82, 512 KiB 1.03).
constexpr long kReceiveBufferSize = 512 << 10;
// The longest one wait for the socket lasts, so stalls are seen promptly.
constexpr std::chrono::milliseconds kMaxPollWait(100);

void GlobalInit() {
  // libcurl 7.84+ built thread-safe makes this safe from any thread; once is
  // still required before the first handle.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool NameIs(std::string_view name, const char* want) {
  return name.size() == std::strlen(want) && strncasecmp(name.data(), want, name.size()) == 0;
}

int64_t ParseInt(std::string_view text) {
  int64_t value = 0;
  if (text.empty()) return -1;
  for (char c : text) {
    if (c < '0' || c > '9' || value > (INT64_MAX - 9) / 10) return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// ParseContentRange reads "bytes first-last/total" (total may be "*").
void ParseContentRange(HttpResponse& r) {
  std::string_view v = r.content_range;
  if (!StartsWith(v, "bytes ")) return;
  v.remove_prefix(6);
  const size_t dash = v.find('-');
  const size_t slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return;
  const int64_t first = ParseInt(v.substr(0, dash));
  const int64_t last = ParseInt(v.substr(dash + 1, slash - dash - 1));
  const std::string_view total = v.substr(slash + 1);
  if (first < 0 || last < first) return;
  r.range_first = first;
  r.range_last = last;
  r.range_total = total == "*" ? -1 : ParseInt(total);
}

bool IsTransient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace

HttpTransfer::HttpTransfer() {
  GlobalInit();
  multi_ = curl_multi_init();
  easy_ = curl_easy_init();
}

HttpTransfer::~HttpTransfer() {
  Reset();
  if (easy_ != nullptr) curl_easy_cleanup(easy_);
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
  curl_slist_free_all(headers_);
}

void HttpTransfer::Reset() {
  // Removing an unfinished transfer closes its connection; a finished one
  // was removed already and left its connection in the multi handle's pool.
  if (attached_) curl_multi_remove_handle(multi_, easy_);
  attached_ = false;
  headers_done_ = done_ = paused_ = stalled_ = false;
  result_ = CURLE_OK;
  interrupted_ = absl::OkStatus();
  error_text_[0] = '\0';
  response_ = HttpResponse();
  dest_ = nullptr;
  dest_size_ = dest_filled_ = 0;
  pending_.clear();
  pending_pos_ = 0;
}

void HttpTransfer::Configure(const HttpRequest& request, const RemoteOptions& limits) {
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers_ = curl_slist_append(headers_, Cat(name, ": ", value).c_str());
  }
  // No "Expect: 100-continue" before a body: libcurl would wait up to a
  // second for an interim answer that some servers never send.
  if (!request.method.empty()) headers_ = curl_slist_append(headers_, "Expect:");
  // Options persist on a handle between requests: every one that varies is
  // set each time.
  CURL* e = easy_;
  curl_easy_setopt(e, CURLOPT_URL, request.url.c_str());
  uploading_ = !request.method.empty();
  uploaded_ = 0;
  if (uploading_) {
    // A POST's body from memory, sent under the method's name (libcurl
    // copies the name, not the body). An empty body still needs a pointer:
    // a null one would make libcurl read the body from stdin.
    static constexpr char kNoBody[] = "";
    curl_easy_setopt(e, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, request.body.empty() ? kNoBody : request.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  } else {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, nullptr);
    if (request.head) {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &HttpTransfer::OnWrite);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &HttpTransfer::OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_text_);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
  curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, kReceiveBufferSize);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(limits.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(limits.low_speed_limit));
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(limits.low_speed_time.count()));
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, limits.verify_tls ? 1L : 0L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, limits.verify_tls ? 2L : 0L);
  if (!limits.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, limits.ca_file.c_str());
  curl_easy_setopt(e, CURLOPT_USERAGENT, limits.user_agent.c_str());
  long version = CURL_HTTP_VERSION_2TLS;
  if (limits.http_version == HttpVersion::kHttp1_1) version = CURL_HTTP_VERSION_1_1;
  if (limits.http_version == HttpVersion::kHttp2PriorKnowledge) {
    version = CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
  }
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, version);
  stall_timeout_ = limits.stall_timeout;
  read_ahead_ = std::max<size_t>(limits.read_ahead, 64 << 10);
  follow_redirects_ = request.follow_redirects;
}

absl::Status HttpTransfer::Begin(const HttpRequest& request, const RemoteOptions& limits) {
  Reset();
  Configure(request, limits);
  if (curl_multi_add_handle(multi_, easy_) != CURLM_OK) {
    return absl::InternalError("curl_multi_add_handle failed");
  }
  attached_ = true;
  last_progress_ = std::chrono::steady_clock::now();
  while (!headers_done_ && !done_) Pump(/*for_headers=*/true);
  // A redirect libcurl did not follow (no Location) ends as it is.
  if (!headers_done_ && done_ && result_ == CURLE_OK && response_.status >= 200) {
    headers_done_ = true;
  }
  if (!interrupted_.ok()) return interrupted_;
  if (!headers_done_) {
    if (result_ != CURLE_OK || stalled_) return TransferError();
    return absl::UnavailableError("the connection closed before a response");
  }
  if (response_.status >= 300) {
    char chunk[4096];
    while (response_.body.size() < kMaxErrorBody) {
      absl::StatusOr<size_t> n = Read(chunk, sizeof(chunk));
      if (!n.ok() || *n == 0) break;
      response_.body.append(chunk, std::min(*n, kMaxErrorBody - response_.body.size()));
    }
  }
  // The body waits, paused, until the reader asks for it: libcurl then
  // neither reads the socket nor judges its speed (a shard opened ahead may
  // wait a whole shard for its reader), and Read's Unpause starts the stall
  // clock when the reader starts waiting.
  if (!done_ && response_.status < 300) {
    paused_ = true;
    curl_easy_pause(easy_, CURLPAUSE_RECV);
  }
  return absl::OkStatus();
}

bool ParseHeaderLine(std::string_view line, HttpResponse& r) {
  // Every response (100 Continue, each redirect) starts with a status line:
  // only the last one's headers count.
  if (StartsWith(line, "HTTP/")) {
    r = HttpResponse();
    const std::string_view status_line = StripWhitespace(line);
    const size_t space = status_line.find(' ');
    if (space != std::string_view::npos) {
      std::string_view rest = status_line.substr(space + 1);
      const size_t space2 = rest.find(' ');
      r.status = static_cast<long>(ParseInt(rest.substr(0, space2)));
      if (space2 != std::string_view::npos) r.reason = rest.substr(space2 + 1);
    }
    return true;
  }
  line = StripWhitespace(line);
  if (line.empty()) return false;
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return true;
  const std::string_view name = line.substr(0, colon);
  const std::string value(StripWhitespace(line.substr(colon + 1)));
  if (NameIs(name, "etag")) {
    r.etag = value;
  } else if (NameIs(name, "last-modified")) {
    r.last_modified = value;
  } else if (NameIs(name, "date")) {
    r.date = value;
  } else if (NameIs(name, "retry-after")) {
    r.retry_after = value;
  } else if (NameIs(name, "content-length")) {
    r.content_length = ParseInt(value);
  } else if (NameIs(name, "content-range")) {
    r.content_range = value;
    ParseContentRange(r);
  }
  return true;
}

size_t HttpTransfer::OnHeader(char* data, size_t one, size_t size, void* self_ptr) {
  auto* self = static_cast<HttpTransfer*>(self_ptr);
  const size_t bytes = one * size;
  self->last_progress_ = std::chrono::steady_clock::now();
  if (!ParseHeaderLine(std::string_view(data, bytes), self->response_)) {
    // The blank line after the headers: the response is complete unless it
    // is an interim one or a redirect that libcurl follows.
    const long status = self->response_.status;
    const bool redirected =
        self->follow_redirects_ && status >= 300 && status < 400 && status != 304 && status != 305;
    if (status >= 200 && !redirected) self->headers_done_ = true;
  }
  return bytes;
}

size_t HttpTransfer::OnWrite(char* data, size_t one, size_t size, void* self_ptr) {
  auto* self = static_cast<HttpTransfer*>(self_ptr);
  size_t bytes = one * size;
  const size_t pending = self->pending_.size() - self->pending_pos_;
  const bool reader_waiting = self->dest_ != nullptr && self->dest_filled_ < self->dest_size_;
  // All or nothing: a paused chunk is delivered again whole, so part of it
  // must never have been taken.
  if (!reader_waiting && pending >= self->read_ahead_) {
    self->paused_ = true;
    return CURL_WRITEFUNC_PAUSE;
  }
  self->last_progress_ = std::chrono::steady_clock::now();
  if (reader_waiting) {
    const size_t n = std::min(bytes, self->dest_size_ - self->dest_filled_);
    std::memcpy(self->dest_ + self->dest_filled_, data, n);
    self->dest_filled_ += n;
    data += n;
    bytes -= n;
  }
  if (bytes > 0) {
    if (self->pending_pos_ > 0 && self->pending_pos_ == self->pending_.size()) {
      self->pending_.clear();
      self->pending_pos_ = 0;
    }
    self->pending_.append(data, bytes);
  }
  return one * size;
}

void HttpTransfer::Unpause() {
  if (!paused_) return;
  paused_ = false;
  last_progress_ = std::chrono::steady_clock::now();
  // May call OnWrite at once with the chunk held back.
  curl_easy_pause(easy_, CURLPAUSE_CONT);
}

void HttpTransfer::Pump(bool for_headers) {
  int running = 0;
  const CURLMcode mc = curl_multi_perform(multi_, &running);
  int queued = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == easy_) {
      result_ = msg->data.result;
      done_ = true;
    }
  }
  if (mc != CURLM_OK && !done_) {
    std::snprintf(error_text_, sizeof(error_text_), "%s", curl_multi_strerror(mc));
    result_ = CURLE_RECV_ERROR;
    done_ = true;
  }
  if (done_) {
    curl_multi_remove_handle(multi_, easy_);
    attached_ = false;
    return;
  }
  const bool news =
      for_headers ? headers_done_ : (dest_filled_ > 0 || pending_pos_ < pending_.size());
  if (news || paused_) return;
  const auto now = std::chrono::steady_clock::now();
  if (uploading_) {
    // Sending the body is progress too: a long upload is not a stall.
    curl_off_t sent = 0;
    curl_easy_getinfo(easy_, CURLINFO_SIZE_UPLOAD_T, &sent);
    if (sent > uploaded_) {
      uploaded_ = sent;
      last_progress_ = now;
    }
  }
  const auto idle = now - last_progress_;
  if (idle >= stall_timeout_) {
    stalled_ = true;
    result_ = CURLE_OPERATION_TIMEDOUT;
    done_ = true;
    curl_multi_remove_handle(multi_, easy_);
    attached_ = false;
    return;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(stall_timeout_ - idle);
  const bool checked = InterruptCheckInstalled();
  const auto longest = checked ? std::min(kMaxPollWait, kInterruptCheckInterval) : kMaxPollWait;
  const int wait_ms =
      static_cast<int>(std::clamp(left, std::chrono::milliseconds(1), longest).count());
  curl_multi_poll(multi_, nullptr, 0, wait_ms, nullptr);
  if (!checked) return;
  if (absl::Status go_on = CheckInterrupt(); !go_on.ok()) {
    // Abandoned like a stall, but not retried: the status is not Unavailable.
    interrupted_ = std::move(go_on);
    result_ = CURLE_ABORTED_BY_CALLBACK;
    done_ = true;
    curl_multi_remove_handle(multi_, easy_);
    attached_ = false;
  }
}

absl::StatusOr<size_t> HttpTransfer::Read(void* buffer, size_t size) {
  if (size == 0) return 0;
  if (pending_pos_ < pending_.size()) {
    const size_t n = std::min(size, pending_.size() - pending_pos_);
    std::memcpy(buffer, pending_.data() + pending_pos_, n);
    pending_pos_ += n;
    if (paused_ && pending_.size() - pending_pos_ < read_ahead_ / 2) Unpause();
    return n;
  }
  if (!done_) {
    dest_ = static_cast<char*>(buffer);
    dest_size_ = size;
    dest_filled_ = 0;
    Unpause();
    while (dest_filled_ == 0 && pending_pos_ == pending_.size() && !done_) Pump(false);
    dest_ = nullptr;
    if (dest_filled_ > 0) return dest_filled_;
    if (pending_pos_ < pending_.size()) return Read(buffer, size);
  }
  if (!interrupted_.ok()) return interrupted_;
  if (result_ == CURLE_OK && !stalled_) return 0;
  return TransferError();
}

size_t HttpTransfer::Discard(size_t size) {
  const size_t n = std::min(size, buffered());
  pending_pos_ += n;
  if (paused_ && buffered() < read_ahead_ / 2) Unpause();
  return n;
}

absl::Status HttpTransfer::TransferError() const {
  if (stalled_) {
    return absl::UnavailableError(
        Cat("no data for ", stall_timeout_.count(), " ms (stalled connection)"));
  }
  std::string message = curl_easy_strerror(result_);
  if (error_text_[0] != '\0') message += Cat(": ", error_text_);
  message += Cat(" (curl error ", static_cast<int>(result_), ")");
  if (IsTransient(result_)) return absl::UnavailableError(message);
  switch (result_) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
      return absl::InvalidArgumentError(message);
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_TOO_MANY_REDIRECTS:
      return absl::FailedPreconditionError(message);
    default:
      return absl::UnknownError(message);
  }
}

long HttpTransfer::connects() const {
  long n = -1;
  curl_easy_getinfo(easy_, CURLINFO_NUM_CONNECTS, &n);
  return n;
}

}  // namespace wds
