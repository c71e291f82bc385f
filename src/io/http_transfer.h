// HttpTransfer: one HTTP request at a time on a reusable libcurl handle,
// its response body pulled by the caller's thread (libcurl's multi
// interface, paused when the reader falls behind; no thread of its own). A
// request may send a body from memory (PUT, POST: uploads).
//
//   HttpTransfer transfer;                       // keeps its connection between requests
//   absl::Status s = transfer.Begin(request, limits);   // waits for the response headers
//   if (s.ok() && transfer.response().status == 200)
//     while ((n = *transfer.Read(buffer, size)) > 0) ...
//
// A thread with an interrupt check (wds/base/interrupt.h) has it called at least
// every kInterruptCheckInterval while it waits for the server; a non-OK
// check abandons the request and Begin or Read returns that status.
//
// Errors: a failure the same request may overcome when sent again
// (connection refused or reset, closed early, timeouts, no data for
// limits.stall_timeout, HTTP/2 stream errors) is Unavailable, and so is a
// host name (the server's or the proxy's) that does not resolve, which
// unresolved() tells apart because retries treat it as final; a permanent one
// (a malformed URL, a certificate that fails verification, a missing CA file)
// is InvalidArgument or FailedPrecondition. Messages do not name the URL: the
// caller adds what the reader knows it by. HTTP error statuses are not errors
// here: Begin succeeds and response() tells them.
//
// Thread safety: none; one thread at a time.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/io/remote.h"

namespace wds {

struct HttpRequest {
  std::string url;
  // head sends HEAD instead of GET.
  bool head = false;
  // method, when not empty, replaces GET or HEAD ("PUT", "POST", "DELETE"),
  // and `body` is sent with it. The caller keeps the body's bytes alive
  // until the response has been read.
  std::string method;
  std::string_view body;
  // headers are sent as "Name: value" lines.
  std::vector<std::pair<std::string, std::string>> headers;
  bool follow_redirects = false;
};

// HttpResponse is what the final response's headers said (after redirects).
struct HttpResponse {
  long status = 0;
  std::string reason;
  int64_t content_length = -1;
  std::string etag;
  std::string last_modified;
  // date: the server's clock when it answered (the Date header).
  std::string date;
  std::string retry_after;
  // content_range as sent, and parsed ("bytes first-last/total"; total -1
  // for "*"); first is -1 when absent or malformed.
  std::string content_range;
  int64_t range_first = -1;
  int64_t range_last = -1;
  int64_t range_total = -1;
  // body holds the first bytes of an error response's body (status >= 300).
  std::string body;
};

// ParseHeaderLine applies one raw response header line to `r`: a status
// line ("HTTP/1.1 206 Partial Content") starts a new response, "Name: value"
// lines fill the fields above (Content-Range parsed), others are ignored.
// Returns false for the blank line that ends the headers.
bool ParseHeaderLine(std::string_view line, HttpResponse& r);

class HttpTransfer {
 public:
  HttpTransfer();
  ~HttpTransfer();
  HttpTransfer(const HttpTransfer&) = delete;
  HttpTransfer& operator=(const HttpTransfer&) = delete;

  // Begin abandons any unfinished request, sends `request` and waits for the
  // final response's headers. For a status of 300 or more it also reads (the
  // first 16 KiB of) the body into response().body; for another, the body
  // waits paused until the first Read (no speed or stall is judged before
  // the reader asks: a stream opened ahead of its turn may wait long).
  [[nodiscard]] absl::Status Begin(const HttpRequest& request, const RemoteOptions& limits);
  const HttpResponse& response() const { return response_; }
  // Read copies up to `size` body bytes into `buffer`; 0 at the end of a
  // body received whole (per libcurl: Content-Length or chunked framing).
  [[nodiscard]] absl::StatusOr<size_t> Read(void* buffer, size_t size);
  // buffered is how many body bytes have arrived that Read has not returned.
  size_t buffered() const { return pending_.size() - pending_pos_; }
  // Discard drops up to `size` of the buffered body bytes (without waiting
  // for more) and returns how many it dropped.
  size_t Discard(size_t size);
  // Abandon ends an unfinished request (closing its connection, which
  // HTTP/1.1 cannot reuse mid-body) and frees what it buffered.
  void Abandon() { Reset(); }
  // timed_out is true when the last request failed for slowness: no data
  // for stall_timeout, or less than low_speed_limit for low_speed_time (or a
  // connect timeout), as opposed to a refused, reset or closed connection.
  bool timed_out() const { return stalled_ || (done_ && result_ == CURLE_OPERATION_TIMEDOUT); }
  // unresolved is true when the last request failed because the server's or
  // the proxy's host name did not resolve (libcurl cannot tell a name that
  // does not exist from a resolver that failed to answer).
  bool unresolved() const {
    return done_ &&
           (result_ == CURLE_COULDNT_RESOLVE_HOST || result_ == CURLE_COULDNT_RESOLVE_PROXY);
  }
  // connects is how many new connections the last request opened (0 when it
  // reused one).
  long connects() const;
  // finished is true when the last request ended cleanly, so its handle keeps
  // its connection for the next.
  bool finished() const { return done_ && result_ == CURLE_OK; }

 private:
  static size_t OnWrite(char* data, size_t one, size_t size, void* self);
  static size_t OnHeader(char* data, size_t one, size_t size, void* self);
  void Reset();
  void Configure(const HttpRequest& request, const RemoteOptions& limits);
  // Pump runs libcurl once and, when that produced nothing for the waiter
  // (the headers, or body bytes), waits (bounded) for the socket; it abandons
  // a request that made no progress for stall_timeout.
  void Pump(bool for_headers);
  void Unpause();
  absl::Status TransferError() const;

  CURLM* multi_ = nullptr;
  CURL* easy_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::chrono::milliseconds stall_timeout_{0};
  size_t read_ahead_ = 0;
  bool follow_redirects_ = false;
  // uploading_ is true while a request sends a body; uploaded_ is how much
  // of it libcurl has sent (progress, for the stall check).
  bool uploading_ = false;
  curl_off_t uploaded_ = 0;
  bool attached_ = false;
  bool headers_done_ = false;
  bool done_ = false;
  bool paused_ = false;
  bool stalled_ = false;
  CURLcode result_ = CURLE_OK;  // once done_
  // interrupted_ is the interrupt check's status that abandoned the request.
  absl::Status interrupted_;
  char error_text_[256] = {};
  HttpResponse response_;
  // Body bytes arrive first into the reader's buffer when a Read waits for
  // them (dest_), the rest into pending_ (read from pending_pos_).
  char* dest_ = nullptr;
  size_t dest_size_ = 0;
  size_t dest_filled_ = 0;
  std::string pending_;
  size_t pending_pos_ = 0;
  std::chrono::steady_clock::time_point last_progress_;
};

}  // namespace wds
