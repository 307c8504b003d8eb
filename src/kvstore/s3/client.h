// An S3 REST client over libcurl, for S3 itself, S3-compatible servers (MinIO, Ceph,
// Swift's s3api) and Cloud Storage's XML API: HEAD, ranged GET into the caller's memory
// (If-Match pinned, resumed after an interruption), PUT (If-None-Match), multipart
// uploads, ListObjectsV2, ListMultipartUploads, DELETE.
//
// Requests are signed with SigV4 (sigv4.h) or carry a bearer token (gs://), per the
// Settings. Connections are kept alive: every request borrows an easy handle from a
// pool and returns it, so N threads calling at once use N connections and reuse them.
// Every method is thread-safe.
//
// Errors are absl::Status naming the operation and the object URL ("GET s3://bkt/k:
// HTTP 404 NoSuchKey: …"), never a credential: NotFound (404), PermissionDenied
// (401/403), FailedPrecondition (412: If-Match failed), AlreadyExists (If-None-Match),
// OutOfRange (416 or a short object), InvalidArgument (other 4xx, e.g. EntityTooSmall),
// Unimplemented (501), Unavailable (server or network still failing when the retries
// are used up).
//
// Requests are signed with what the settings' credential provider hands out for each
// request (credentials.h), so temporary credentials are renewed during long runs; its
// error (no credentials found, a credential service failing) fails the request, not
// retried here.
//
// Retries: 429, 5xx other than 501, SlowDown, RequestTimeout, InternalError,
// ServiceUnavailable, reset connections, timeouts and stalls are retried
// with exponential backoff and full jitter (each wait uniform in
// [0, min(max_delay, initial_delay * 2^attempt)]), like TensorFlow's RetryConfig:
// 10 retries, 100 ms initial, 32 s maximum delay by default. A refused connection and a
// host name that does not resolve are retried only once the endpoint has answered in this
// client's life (a server restarting, a DNS hiccup); before that they fail at once (a
// wrong endpoint or no network is not transient). Each burst of retries is reported
// through ClientOptions::on_retry_burst (retry_bursts.h).
//
// Stopping (run/run.h): once the run a request works for is stopping, no request starts and
// none is retried (the backoff's wait ends at once), and reads and part uploads on their way
// are cut short; the call returns the run's Cancelled error. A request that creates,
// completes or removes something in the bucket is let finish (it is small): the run must
// know what it did in order to undo it. The clean-up of a stopped run (NotCancellable)
// goes out, with at most 2 retries.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/s3/retry_bursts.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/url.h"
#include "kvstore/s3/xml.h"

namespace tfckpt::s3 {

// The S3 error code of a request's failure ("NoSuchKey", "NoSuchBucket", "AccessDenied",
// "SignatureDoesNotMatch", ...): the answer's <Code>, carried by the status as a payload;
// "" when the answer had none (a HEAD's has no body) or the request got no answer.
inline constexpr char kS3CodePayload[] = "tfckpt/s3-error-code";
std::string S3ErrorCode(const absl::Status& s);

struct RetryPolicy {
  int max_retries = 10;  // retries after the first attempt
  std::chrono::microseconds initial_delay{100'000};
  std::chrono::microseconds max_delay{32'000'000};
};

// The wait before retry number attempt + 1 (attempt 0 follows the first failure): uniform
// in [0, min(max_delay, initial_delay * 2^attempt)] ("full jitter").
std::chrono::microseconds RetryDelay(const RetryPolicy& policy, int attempt);

struct ClientOptions {
  RetryPolicy retry;
  int connections = 8;  // concurrent transfers of ReadRanges / UploadMultipart
  long connect_timeout_ms = 10'000;
  long stall_seconds = 30;  // a transfer that moves no byte for this long is retried
  // Called at the start of each burst of retries (retry_bursts.h), from the thread of the
  // request; may be empty. REQUIRES: thread-safe.
  std::function<void(const RetryNotice&)> on_retry_burst;
};

struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;  // as the server sent it, quotes included
};

// One range of a ReadRanges call: [offset, offset + size) of the object into out.
struct RangeRead {
  uint64_t offset = 0, size = 0;
  char* out = nullptr;
};

class Client {
 public:
  // REQUIRES: settings from ResolveSettings (or equivalent).
  static absl::StatusOr<std::unique_ptr<Client>> Create(Settings settings, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Settings& settings() const;

  // Creates the bucket `url.bucket`; OK when we already own it.
  absl::Status CreateBucket(const ObjectUrl& url);

  absl::StatusOr<ObjectInfo> Head(const ObjectUrl& url);
  // Head, for a caller asking whether the object is there: NotFound when it is not, which
  // includes the 403 AccessDenied S3 answers for a missing key to a caller without
  // s3:ListBucket (a HEAD's 403 has no body: a 1-byte GET asks for its code, so that a 403
  // for other reasons, a bad signature say, stays an error). A key the caller may not read
  // looks absent too: nothing better can be known without listing.
  absl::StatusOr<ObjectInfo> HeadIfPresent(const ObjectUrl& url);

  // Reads [offset, offset + size) into out[0, size). Sends If-Match: etag when `etag` is
  // not empty; otherwise pins the ETag of the first response for resumed attempts. An
  // interrupted transfer resumes from the last byte received. OutOfRange when the
  // object ends before offset + size.
  absl::Status Read(const ObjectUrl& url, uint64_t offset, uint64_t size, std::string_view etag, char* out);

  // Receives the bytes of a read in order, each call the next ones; an error aborts the
  // read with that error (not retried).
  using ByteSink = std::function<absl::Status(std::string_view data)>;

  // Read() that streams to `sink` instead of a buffer (resumed attempts continue where
  // the sink left off: it never sees a byte twice).
  absl::Status ReadTo(const ObjectUrl& url, uint64_t offset, uint64_t size, std::string_view etag,
                      const ByteSink& sink);

  // Read() of every range, up to options.connections at once; the first error. Pass
  // the ETag from Head(): with "" each range pins the version it finds on its own.
  absl::Status ReadRanges(const ObjectUrl& url, std::string_view etag, const std::vector<RangeRead>& reads);

  // Uploads `body` as the whole object; returns its ETag. With `if_absent` the object
  // must not exist yet (If-None-Match: *, and on gs:// x-goog-if-generation-match: 0; where
  // the server answers 501 to the first, a HEAD checks first, and later calls skip it):
  // AlreadyExists when it does. A 412 is this PUT's own success when the object holds
  // exactly `body` (Holds): an attempt may have been carried out and its answer lost, and
  // the 412 answered its retry. When that cannot be found out, Unavailable (the outcome is
  // unknown).
  absl::StatusOr<std::string> Put(const ObjectUrl& url, std::string_view body, bool if_absent = false);
  // The object's ETag when it holds exactly `body` (its size, and its ETag as the MD5 of
  // `body`, else its bytes read back); nullopt when it is absent or holds other bytes.
  absl::StatusOr<std::optional<std::string>> Holds(const ObjectUrl& url, std::string_view body);

  // Multipart upload, step by step. Parts are numbered from 1; each is retried alone.
  absl::StatusOr<std::string> CreateMultipartUpload(const ObjectUrl& url);
  absl::StatusOr<std::string> UploadPart(const ObjectUrl& url, const std::string& upload_id, int part_number,
                                         std::string_view body);
  // Part `part_number` of the upload copied inside the store from bytes [offset, offset +
  // size) of `source` (UploadPartCopy: x-amz-copy-source, x-amz-copy-source-range, and
  // x-amz-copy-source-if-match with `source_etag` when not empty, so that a source replaced
  // since it was opened fails the copy, FailedPrecondition); the part's ETag. A store
  // without it answers 501 (Unimplemented); a caller who may not read the source, 403
  // (PermissionDenied, code AccessDenied). Errors name both URLs. REQUIRES: size > 0.
  absl::StatusOr<std::string> UploadPartCopy(const ObjectUrl& url, const std::string& upload_id, int part_number,
                                             const ObjectUrl& source, std::string_view source_etag, uint64_t offset,
                                             uint64_t size);
  absl::Status CompleteMultipartUpload(const ObjectUrl& url, const std::string& upload_id,
                                       const std::vector<CompletedPart>& parts);
  // Whether the upload is still in progress (ListParts answers): false once it was
  // completed or aborted (NoSuchUpload). What a completion that failed did.
  absl::StatusOr<bool> UploadInProgress(const ObjectUrl& url, const std::string& upload_id);
  absl::Status AbortMultipartUpload(const ObjectUrl& url, const std::string& upload_id);

  // `body` as a multipart upload of `part_size`-byte parts (MultipartPartSize(size) when
  // 0), up to options.connections parts at once; aborted when any step fails. A
  // MultipartWriter (multipart_writer.h) does the same for bytes that arrive over time.
  absl::Status UploadMultipart(const ObjectUrl& url, std::string_view body, uint64_t part_size = 0);

  // Every object whose key starts with url.key, in key order, `page_size` per request.
  absl::StatusOr<std::vector<ListedObject>> List(const ObjectUrl& prefix, int page_size = 1000);
  // List() with a delimiter: the objects directly under url.key (no `delimiter` after the
  // prefix), and the common prefixes one level below ("url.key + NAME + delimiter").
  // With `first_page_only`, one request of at most `page_size` keys (is anything there?).
  struct Listing {
    std::vector<ListedObject> objects;
    std::vector<std::string> common_prefixes;
  };
  absl::StatusOr<Listing> ListLevel(const ObjectUrl& prefix, std::string_view delimiter, int page_size = 1000,
                                    bool first_page_only = false);
  // Multipart uploads in progress under url.key, `page_size` per request.
  absl::StatusOr<std::vector<MultipartUpload>> ListMultipartUploads(const ObjectUrl& prefix, int page_size = 1000);

  absl::Status Delete(const ObjectUrl& url);

  // HTTP requests sent so far, retries included (for tests and statistics).
  uint64_t requests_sent() const;
  // Bytes moved so far: copied inside the store (the ranges of successful UploadPartCopy
  // requests), sent in the bodies of successful PUTs (objects and parts), received in the
  // bodies of GET answers (every attempt's, listings included).
  uint64_t bytes_copied() const;
  uint64_t bytes_uploaded() const;
  uint64_t bytes_downloaded() const;
  // Bursts of retries so far (on_retry_burst calls, whether or not it is set).
  int retry_bursts() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tfckpt::s3
