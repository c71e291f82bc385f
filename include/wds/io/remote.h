// Remote shards: http://, https://, s3:// and gs:// URLs streamed in-process
// with libcurl, resumed byte-exactly after transient faults, optionally
// through a local cache shared by processes.
//
//   wds::RemoteOptions options = wds::RemoteOptions::FromEnvironment();
//   options.cache_dir = "/scratch/shards";       // or WDS_CACHE=/scratch/shards
//   auto pipe = wds::WebDataset("s3://bucket/train-{000000..000099}.tar",
//                               {.opener = wds::MakeOpener(options)});
//
// Plain OpenUrl(url) and the default WebDatasetOptions::opener read remote
// URLs with RemoteOptions::FromEnvironment().
//
// docs/REMOTE.md has the contract: what a reader gets (retries, resumption,
// what bounds a stream, errors), the URL schemes and credentials, connection
// reuse, the cache, skips and offsets, costs and interrupts.
//
// Thread safety: RemoteOptions is a value. An Opener from MakeOpener may be
// called from any thread; each stream it returns is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "wds/io/byte_stream.h"

namespace wds {

// HttpVersion is the HTTP version libcurl asks for.
enum class HttpVersion {
  // HTTP/2 over TLS when the server offers it (ALPN), else HTTP/1.1.
  kDefault,
  kHttp1_1,
  // HTTP/2 without TLS too, assuming the server speaks it ("prior knowledge").
  kHttp2PriorKnowledge,
};

// S3Addressing is how a bucket appears in an S3 URL.
enum class S3Addressing {
  // Virtual-hosted (https://bucket.s3.REGION.amazonaws.com/key) on AWS for
  // bucket names without dots; path-style otherwise and for custom endpoints.
  kAuto,
  kPathStyle,      // ENDPOINT/bucket/key
  kVirtualHosted,  // bucket.ENDPOINT-HOST/key
};

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // optional
};

// RemoteOptions hold every limit of remote reading. The environment names in
// brackets are what FromEnvironment reads.
struct RemoteOptions {
  // --- connections
  // connect_timeout bounds TCP connect plus the TLS handshake.
  std::chrono::milliseconds connect_timeout{10'000};
  // stall_timeout: a request that delivers no byte (headers or body) for
  // this long while the reader waits for data is abandoned as transient.
  // A reader that is slow to consume never counts as a stall.
  std::chrono::milliseconds stall_timeout{30'000};
  // low_speed_limit (bytes/s, 0 = off) and low_speed_time: a request whose
  // transfer averages less than the limit for that long (libcurl's measure,
  // not counting time paused for a slow reader) is abandoned as transient,
  // so a server that drips a byte now and then, which stall_timeout never
  // catches, is left within low_speed_time (whole seconds, at least 1).
  int64_t low_speed_limit = 1024;
  std::chrono::seconds low_speed_time{60};
  // read_ahead bounds the body bytes buffered ahead of the reader.
  size_t read_ahead = size_t{4} << 20;
  // skip_by_request: ByteStream::Skip moves past this many bytes or more
  // (beyond those already buffered) by a new ranged request; less is read
  // and dropped. A request costs a round trip, and over HTTP/1.1 a new
  // connection, worth a few MB on a fast network.
  int64_t skip_by_request = int64_t{4} << 20;
  // open_ahead: how many of a WebDataset source's next shards it opens
  // while it reads one, 0 to kMaxOpenAhead, when they are remote URLs read
  // from their start: each is opened on a thread of its own, so that its
  // request (a TLS handshake, a redirect, the server's first byte) and the
  // first bytes the socket holds overlap the current shard's reading. 0
  // opens each shard when it is reached. docs/REMOTE.md ("Opening ahead")
  // says what the server sees. Read by the Python bindings and, from the
  // environment, by WebDatasetOptions' default; MakeOpener ignores it: set
  // WebDatasetOptions::open_ahead to it too [WDS_OPEN_AHEAD]:
  //   {.open_ahead = options.open_ahead, .opener = wds::MakeOpener(options)}
  int open_ahead = 1;
  static constexpr int kMaxOpenAhead = 16;
  // --- retries
  // max_attempts: failed requests in a run (see above: 64 KiB of progress,
  // not cut for slowness, ends a run) before giving up; 1 means no retry.
  int max_attempts = 10;
  // max_retry_time: time since a run's first failure before giving up (a
  // Retry-After beyond it gives up at once).
  std::chrono::milliseconds max_retry_time{300'000};
  // The n-th retry in a row waits uniform(0, min(backoff_cap, backoff_base * 2^(n-1))).
  std::chrono::milliseconds backoff_base{250};
  std::chrono::milliseconds backoff_cap{20'000};
  // --- TLS and HTTP
  // ca_file is a PEM bundle used instead of the system's [CURL_CA_BUNDLE].
  std::string ca_file;
  // verify_tls checks the server's certificate and host name; turn it off
  // only for tests [WDS_TLS_VERIFY=0].
  bool verify_tls = true;
  HttpVersion http_version = HttpVersion::kDefault;
  // user_agent is sent with every request.
  std::string user_agent = "webdataset-cpp";
  // http_headers go with every request for an http(s):// URL (not s3:// or
  // gs://, which authenticate their own way): a token, say, {"Authorization",
  // "Bearer hf_..."}. After a redirect to another host or port, libcurl
  // drops an Authorization or Cookie header and sends the others: put a
  // secret in Authorization. Values never appear in errors. A name that is
  // not an HTTP token, one the reader or libcurl sets (Range, the If-*
  // preconditions, Host, Accept-Encoding, TE, Content-Length,
  // Transfer-Encoding, Connection, Expect, Upgrade), an empty value, or a
  // value with a line break is InvalidArgument naming the header, at the
  // first request.
  std::vector<std::pair<std::string, std::string>> http_headers;
  // --- S3
  // s3_endpoint: e.g. "http://127.0.0.1:9000" for an S3-compatible store
  // [AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL]; empty means AWS.
  std::string s3_endpoint;
  // s3_region [AWS_REGION, else AWS_DEFAULT_REGION]; empty means us-east-1.
  std::string s3_region;
  S3Addressing s3_addressing = S3Addressing::kAuto;
  // aws_credentials: explicit keys [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  // AWS_SESSION_TOKEN]; when absent, the profile below is read at the first
  // s3:// open.
  std::optional<AwsCredentials> aws_credentials;
  // aws_profile [AWS_PROFILE]; empty means "default".
  std::string aws_profile;
  // aws_credentials_file [AWS_SHARED_CREDENTIALS_FILE]; empty means
  // $HOME/.aws/credentials.
  std::string aws_credentials_file;
  // --- Google Cloud Storage
  // gcs_endpoint [STORAGE_EMULATOR_HOST]; empty means https://storage.googleapis.com.
  std::string gcs_endpoint;
  // gcs_token: an OAuth2 access token sent as "Authorization: Bearer"
  // [GOOGLE_OAUTH_ACCESS_TOKEN].
  std::string gcs_token;
  // gcs_hmac: GCS HMAC keys, used through the S3-compatible interface
  // (SigV4, region "auto") [WDS_GCS_HMAC_ACCESS_ID, WDS_GCS_HMAC_SECRET].
  std::optional<AwsCredentials> gcs_hmac;
  // --- uploads (wds/io/remote_upload.h)
  // upload_part_size: the size of a multipart upload's parts (S3 allows 5
  // MiB to 5 GiB), doubled after every 1,000 parts so that an object of any
  // size fits S3's 10,000 parts; an object smaller than one part goes up in
  // one PUT.
  int64_t upload_part_size = int64_t{16} << 20;
  // upload_concurrency: parts of one upload sent at once, each on a thread
  // and a connection of its own, while the writer fills the next part; an
  // upload holds up to upload_concurrency + 1 parts in memory.
  int upload_concurrency = 4;
  // --- cache
  // cache_dir: empty means no cache [WDS_CACHE]; created when missing.
  std::string cache_dir;
  // cache_size: the byte limit of complete cached files, 0 = no limit; a
  // download that passes it evicts the least recently used down to 90% of it
  // [WDS_CACHE_SIZE: bytes, "1e9", or a K/M/G/T suffix].
  int64_t cache_size = 0;
  // cache_revalidate: check a cached copy's ETag with a HEAD request on each
  // open, re-downloading a changed object [WDS_CACHE_REVALIDATE=1].
  bool cache_revalidate = false;
  // cache_pipes: cache pipe: shards too (with a cache_dir): a command's
  // output, named by the SHA-256 of its URL, is kept once a reader read it
  // to its end and the command exited 0, and later opens read the copy
  // instead of running the command, which suits commands that fetch fixed
  // objects ("pipe:aws s3 cp s3://bucket/train-000.tar -"). Nothing tells a
  // changed output from the copy: an opt-in [WDS_CACHE_PIPES=1].
  bool cache_pipes = false;

  // FromEnvironment returns the defaults above overridden by the environment
  // variables named in brackets. Malformed values (a WDS_CACHE_SIZE that is
  // not a size) are ignored; use ParseFromEnvironment to see them.
  static RemoteOptions FromEnvironment();
  // ParseFromEnvironment is FromEnvironment that reports a malformed value
  // as InvalidArgument naming the variable. The variables named in `skip`
  // are not read (their fields keep the defaults): a caller that sets those
  // fields itself does not fail on a malformed value it would override.
  [[nodiscard]] static absl::StatusOr<RemoteOptions> ParseFromEnvironment(
      const std::vector<std::string>& skip = {});
};

// CheckHttpHeaders says whether `headers` may be RemoteOptions::http_headers:
// InvalidArgument naming `source` (a URL, say) and the header, never its
// value, as described there.
[[nodiscard]] absl::Status CheckHttpHeaders(
    const std::vector<std::pair<std::string, std::string>>& headers, std::string_view source);

// IsRemoteUrl is true for http://, https://, s3:// and gs:// URLs.
bool IsRemoteUrl(std::string_view url);

// ObjectVersion names one version of a remote object by what its server
// said of it: its ETag (as sent, weak or strong), its Last-Modified and its
// size. Requests pinned to it ask for it (If-Match with a strong ETag, else
// If-Unmodified-Since) and check every answer against all three, so that a
// server that ignores those headers, a weak ETag, or a replacement with an
// older time are caught too. Only a replacement of the same size within the
// same second, from a server that sends no ETag, passes unseen.
struct ObjectVersion {
  std::string etag;
  std::string last_modified;
  int64_t size = -1;  // -1: unknown
  bool empty() const { return etag.empty() && last_modified.empty() && size < 0; }
};

class RemoteSession;

// RemoteOpener opens remote URLs with its options (everything else as
// OpenUrl does), from their start or from a byte offset. Its streams, and
// the Openers it gives, share one connection pool and one cache.
//
//   wds::RemoteOpener remote(options);
//   auto rest = remote.OpenAt("s3://bucket/shard-000007.tar", member_offset);
//
// Thread-safe.
class RemoteOpener {
 public:
  explicit RemoteOpener(RemoteOptions options = RemoteOptions::FromEnvironment());

  // Open is OpenAt(url, 0).
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> Open(std::string_view url) const;
  // OpenAt returns a stream of `url`'s bytes from `offset` on. A remote URL
  // is asked for `Range: bytes=<offset>-` in its first request, and only a
  // 206 whose Content-Range starts there is accepted (a 200 or another range
  // is DataLoss, an offset at or past the end the server's 416, OutOfRange);
  // its retries then resume with the validator of that first answer, as
  // from offset 0. Through the cache: a complete local copy is read from the
  // offset; a miss streams from the server uncached (a cache file must hold
  // the object from its first byte). A local path or pipe: is opened and
  // skipped (or read) to the offset. Errors: those of OpenUrl and of
  // remote reading, InvalidArgument for a negative offset.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<ByteStream>> OpenAt(std::string_view url,
                                                                   int64_t offset) const;
  // ReadRange fills `parts`, in order, with `url`'s bytes from `offset` on
  // (as many as the parts hold together, at least one) and returns the
  // version it read (empty for a local file). A remote URL is one request
  // for `Range: bytes=<offset>-<last>` to the server (never the cache, which
  // holds whole objects), resumed as OpenAt's streams are; only a 206 of
  // exactly that range is accepted (an object that ends inside the range is
  // DataLoss, its wrong Content-Range quoted), and the connection stays in
  // the pool for the next request. A non-empty `pin` is asked for and checked
  // (see ObjectVersion), and another version is Aborted. A local path
  // or pipe: is read as OpenAt reads it (DataLoss naming the offset where
  // it ends inside the range). Errors: also OpenAt's; InvalidArgument for a
  // negative offset or no bytes to read.
  [[nodiscard]] absl::StatusOr<ObjectVersion> ReadRange(std::string_view url, int64_t offset,
                                                        absl::Span<const absl::Span<char>> parts,
                                                        const ObjectVersion& pin = {}) const;
  // AsOpener returns an Opener sharing this one's connections and cache.
  Opener AsOpener() const;
  // AsUncachedOpener is AsOpener reading remote URLs from their servers
  // always (what may have changed since it was cached: an index).
  Opener AsUncachedOpener() const;

  // Keep stores `bytes`, made from the remote object `url` at `version`
  // (its index, say; `what` names it), in the cache directory, where the
  // machine's processes share it until it is evicted with the cached copies
  // (least recently used). Nothing is kept without a cache directory, or
  // for a version without a size and an ETag or Last-Modified, which could
  // not tell it from another.
  void Keep(std::string_view url, std::string_view what, const ObjectVersion& version,
            std::string_view bytes) const;
  // keeps says whether Keep stores anything (there is a cache directory), so
  // that a caller makes what it would keep only then.
  bool keeps() const;
  // Kept returns what Keep stored for `url` and `what` at exactly `version`
  // (ETag, Last-Modified and size); nullopt when nothing of that version is
  // kept, or there is no cache directory.
  [[nodiscard]] std::optional<std::string> Kept(std::string_view url, std::string_view what,
                                                const ObjectVersion& version) const;
  // Forget drops what Keep stored for `url` and `what`, whatever its
  // version: what proved wrong is asked of the server again next time.
  void Forget(std::string_view url, std::string_view what) const;

 private:
  std::shared_ptr<RemoteSession> session_;
};

// MakeOpener returns an Opener that reads remote URLs with `options` and
// everything else as OpenUrl does: RemoteOpener(options).AsOpener(). Its
// copies share one connection pool and one cache.
Opener MakeOpener(RemoteOptions options = RemoteOptions::FromEnvironment());

}  // namespace wds
