// RemoteUpload: writes one s3:// or gs:// object in-process, authenticated
// as reads are (wds/io/remote.h): s3:// signed with AWS Signature Version 4;
// gs:// through GCS's XML API, which takes S3's multipart uploads, with a
// bearer token or HMAC keys (SigV4, region "auto").
//
//   absl::StatusOr<std::unique_ptr<wds::RemoteUpload>> up =
//       wds::RemoteUpload::Create("s3://bucket/train-000000.tar", options);
//   WDS_RETURN_IF_ERROR((*up)->Write(bytes));   // as often as needed
//   WDS_RETURN_IF_ERROR((*up)->Close());        // the object appears now
//
// Bytes are gathered into parts of RemoteOptions::upload_part_size. An
// object smaller than one part goes up in one PUT at Close; a larger one as
// a multipart upload, each part sent as it fills, by a thread of its own
// while the writer fills the next (up to upload_concurrency parts at once,
// so up to upload_concurrency + 1 parts are held in memory), and the upload
// completed at Close. Either way the object appears,
// whole, only when Close succeeds: a reader never sees part of it, and an
// object it replaces stays readable until then.
//
// Each request is retried like a read (RemoteOptions' attempts, backoff and
// Retry-After) after a transient failure: a connection fault, 408, 429, 5xx,
// or S3's InternalError or SlowDown inside a 200 answer to a completion. The
// store checks each body against the SHA-256 in a SigV4 signature (a gs://
// upload with a bearer token has none: TLS guards the body). A completion
// may be silent for up to 10 minutes (GCS says one can take minutes).
//
// Failure: the first error of a Write or Close is returned, naming the URL
// and the step (a part's number; a part's failure is returned by the Write
// or Close that next waits for it), and every later call returns it. The
// multipart upload is then aborted, as it is when an unclosed upload is
// destroyed or Abort is called, so that its parts are not kept (and billed)
// by the store. An abort that fails is added to the error's message with the
// upload's ID (so that a store's lifecycle rule, or the user, can remove
// it); a process that dies mid-upload leaves its parts to such a rule.
//
// Only s3:// and gs:// URLs are written (http(s):// is InvalidArgument at
// Create: write it through a command, pipe:curl -T - https://...). A gs://
// URL without credentials (gcs_token, gcs_hmac) is InvalidArgument too,
// unless gcs_endpoint names another store (an emulator): GCS takes no
// anonymous writes.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wds/io/remote.h"

namespace wds {

class RemoteUpload {
 public:
  // Create checks the URL and options (an upload_part_size outside 5 MiB to
  // 5 GiB is InvalidArgument) and finds the credentials; it sends nothing.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteUpload>> Create(
      std::string url, const RemoteOptions& options = RemoteOptions::FromEnvironment());
  // The destructor aborts an upload that was not closed.
  ~RemoteUpload();
  RemoteUpload(const RemoteUpload&) = delete;
  RemoteUpload& operator=(const RemoteUpload&) = delete;

  // Write appends `data`, sending each part that fills.
  [[nodiscard]] absl::Status Write(std::string_view data);
  // Close sends what is left and makes the object appear. A second Close
  // returns the first one's result.
  [[nodiscard]] absl::Status Close();
  // Abort gives the upload up: nothing appears, and the store is told to
  // drop the parts sent. Later calls of Write and Close fail.
  void Abort();

  const std::string& url() const;
  // size is how many bytes were written.
  int64_t size() const;
  // parts is how many parts were sent and acknowledged (all of them after
  // Close; 0 for an object sent in one PUT).
  int parts() const;
  // etag is the object's ETag once Close succeeded.
  const std::string& etag() const;

 private:
  struct State;
  explicit RemoteUpload(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// UploadFile writes the local file `path` to the s3:// object `url` through
// a RemoteUpload; errors name the file or the URL.
[[nodiscard]] absl::Status UploadFile(
    const std::string& path, const std::string& url,
    const RemoteOptions& options = RemoteOptions::FromEnvironment());

// UploadBytes writes `bytes` to the s3:// object `url` (a sidecar, an index).
[[nodiscard]] absl::Status UploadBytes(
    std::string_view bytes, const std::string& url,
    const RemoteOptions& options = RemoteOptions::FromEnvironment());

// DeleteRemoteObject removes the s3:// object `url`, retried as an upload's
// requests are; an object that does not exist is no error.
[[nodiscard]] absl::Status DeleteRemoteObject(
    const std::string& url, const RemoteOptions& options = RemoteOptions::FromEnvironment());

}  // namespace wds
