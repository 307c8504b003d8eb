#include "kvstore/s3/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "kvstore/s3/curl_method.h"
#include "kvstore/s3/multipart_writer.h"
#include "kvstore/s3/ranges.h"
#include "kvstore/s3/sigv4.h"
#include "base/parallel.h"
#include "kvstore/s3/http_fetch.h"
#include "run/run.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Response;

// A fault of an answer's body (shorter or longer than it says, headers that disagree):
// the network's or the server's, not the object's, so the request is tried again.
constexpr char kBodyFaultPayload[] = "tfckpt/s3-body-fault";
absl::Status BodyFault(std::string message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kBodyFaultPayload, absl::Cord("1"));
  return s;
}
bool IsBodyFault(const absl::Status& s) { return s.GetPayload(kBodyFaultPayload).has_value(); }

// One HTTP request. `sink`, when set, receives the body of a 2xx response (a GET)
// instead of Response::body; a non-OK return aborts the transfer with that error (a
// BodyFault: the attempt is retried). `finish`, when set, judges a 2xx answer received
// whole (OK, a BodyFault to try again, else a failure). `satisfied`, when set, says that the
// caller has every byte it asked for: a failure after that is not retried.
struct Request {
  std::string method;
  const ObjectUrl* url = nullptr;
  std::vector<QueryParam> query;
  Headers headers;
  std::string_view body;
  std::string payload_hash = std::string(kEmptySha256);
  std::function<absl::Status(const Response& resp, std::string_view data)> sink;
  std::function<absl::Status(const Response& resp)> finish;
  std::function<bool()> satisfied;
};

struct Response {
  CURLcode curl = CURLE_OK;
  std::string curl_error;
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lowercase names
  absl::Status sink_status;
  absl::Status body_fault;  // the sink found the answer's body faulty (BodyFault)

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// An easy handle and the multi handle that runs its transfers (so that a stop of the run
// can cut one short at once: RunTransfer). The multi handle keeps the connection cache, so
// the pair stays together for good.
struct Handle {
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
};

// Handles kept between requests, so their connections stay alive.
class HandlePool {
 public:
  ~HandlePool() {
    for (Handle& h : free_) {
      curl_multi_cleanup(h.multi);
      curl_easy_cleanup(h.easy);
    }
  }
  Handle Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        Handle h = free_.back();
        free_.pop_back();
        curl_easy_reset(h.easy);
        return h;
      }
    }
    return Handle{curl_easy_init(), curl_multi_init()};
  }
  void Put(Handle h) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<Handle> free_;
};

// Runs the transfer set up on `h` to its end, or until the run it works for is stopping
// (run/run.h): then it is cut short at once (the stop wakes the poll) and the result is
// CURLE_ABORTED_BY_CALLBACK.
CURLcode RunTransfer(const Handle& h) {
  if (CurrentRun() == nullptr) return curl_easy_perform(h.easy);
  curl_multi_add_handle(h.multi, h.easy);
  CURLcode result = CURLE_OK;
  {
    std::stop_callback wake(CurrentRun()->stop_token(), [multi = h.multi] { curl_multi_wakeup(multi); });
    for (;;) {
      int running = 0;
      const CURLMcode mc = curl_multi_perform(h.multi, &running);
      bool done = false;
      int queued = 0;
      while (const CURLMsg* msg = curl_multi_info_read(h.multi, &queued)) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == h.easy) {
          result = msg->data.result;
          done = true;
        }
      }
      if (done) break;
      if (mc != CURLM_OK) {
        result = CURLE_OUT_OF_MEMORY;  // (curl_multi_perform fails only for want of memory or a bug)
        break;
      }
      if (Stopping()) {
        result = CURLE_ABORTED_BY_CALLBACK;
        break;
      }
      curl_multi_poll(h.multi, nullptr, 0, 1000, nullptr);
    }
  }
  curl_multi_remove_handle(h.multi, h.easy);
  return result;
}

// Whether a stop of the run may cut `method`'s request short while it is on its way: reads
// and part uploads (an aborted upload drops its parts), but never a request that creates,
// completes or removes something in the bucket: its server may carry it out all the same,
// and the run must know whether it did, to undo it (aborting an upload needs its id; a
// deletion must come after the creation it undoes). Those finish first (they are small).
bool CutShortOnStop(std::string_view method, const std::vector<QueryParam>& query) {
  if (method == "GET" || method == "HEAD") return true;
  if (method != "PUT") return false;
  return std::any_of(query.begin(), query.end(), [](const QueryParam& q) { return q.name == "partNumber"; });
}

// What one attempt's callbacks share.
struct Transfer {
  CURL* handle = nullptr;
  const Request* request = nullptr;
  Response* response = nullptr;
  UploadBody body;
  uint64_t received = 0;  // body bytes of a GET's 2xx answer
};

size_t OnHeader(char* data, size_t size, size_t n, void* arg) {
  auto* t = static_cast<Transfer*>(arg);
  std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {
    t->response->headers.clear();  // a new response (after 100 Continue, say)
  } else if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
    t->response->headers[absl::AsciiStrToLower(AV(line.substr(0, colon)))] =
        std::string(SV(absl::StripAsciiWhitespace(AV(line.substr(colon + 1)))));
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* arg) {
  auto* t = static_cast<Transfer*>(arg);
  curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &t->response->status);
  const std::string_view chunk(data, size * n);
  if (t->request->method == "GET" && t->response->status / 100 == 2) t->received += chunk.size();
  if (t->request->sink && t->response->status / 100 == 2) {
    absl::Status s = t->request->sink(*t->response, chunk);
    if (!s.ok()) {
      (IsBodyFault(s) ? t->response->body_fault : t->response->sink_status) = std::move(s);
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    return chunk.size();
  }
  t->response->body.append(chunk);
  return chunk.size();
}

bool RetryableCurlCode(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_FAIL_REWIND:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool RetryableS3Code(std::string_view code) {
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" || code == "ServiceUnavailable";
}

absl::StatusCode CodeForHttp(long status, std::string_view s3_code) {
  if (status == 404) return absl::StatusCode::kNotFound;
  if (status == 401 || status == 403) return absl::StatusCode::kPermissionDenied;
  if (status == 412) return absl::StatusCode::kFailedPrecondition;
  if (status == 416) return absl::StatusCode::kOutOfRange;
  if (status == 501) return absl::StatusCode::kUnimplemented;
  if (status == 429 || status >= 500 || RetryableS3Code(s3_code)) return absl::StatusCode::kUnavailable;
  if (status >= 400) return absl::StatusCode::kInvalidArgument;
  return absl::StatusCode::kUnknown;
}

enum class Verdict { kOk, kRetry, kFail };

struct Outcome {
  Verdict verdict;
  absl::Status status;
};

// "scheme://host[:port]" of an endpoint URL (settings checked it starts with http).
struct Endpoint {
  std::string scheme, host;
};

Endpoint SplitEndpoint(const std::string& endpoint) {
  const size_t sep = endpoint.find("://");
  std::string rest = endpoint.substr(sep + 3);
  rest = rest.substr(0, rest.find('/'));
  if (const size_t at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);  // no userinfo
  return {endpoint.substr(0, sep), rest};
}

}  // namespace

struct Client::Impl {
  Settings settings;
  ClientOptions options;
  Endpoint endpoint;
  HandlePool pool;
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> copied{0}, uploaded{0}, downloaded{0};
  std::atomic<bool> if_none_match_supported{true};
  std::atomic<bool> answered{false};  // the endpoint has answered a request (any HTTP status)
  std::unique_ptr<RetryBursts> bursts;
  mutable std::mutex regions_mu;
  std::map<std::string, std::string> bucket_regions;  // buckets found in another region

  // The region requests for `bucket` are signed for (and, where the endpoint follows the
  // region, sent to): the one a redirect named, else the settings'.
  std::string RegionOf(const std::string& bucket) const {
    std::lock_guard<std::mutex> lock(regions_mu);
    auto it = bucket_regions.find(bucket);
    return it == bucket_regions.end() ? settings.region : it->second;
  }

  // Host header and decoded path of a request for `url`.
  void Target(const ObjectUrl& url, std::string* host, std::string* path) const {
    const bool path_style = settings.path_style || url.bucket.find('.') != std::string::npos;
    std::string endpoint_host = endpoint.host;
    if (settings.endpoint_follows_region) {
      if (std::string region = RegionOf(url.bucket); region != settings.region) {
        endpoint_host = StrCat("s3.", region, ".amazonaws.com");
      }
    }
    if (path_style) {
      *host = endpoint_host;
      *path = url.key.empty() ? StrCat("/", url.bucket) : StrCat("/", url.bucket, "/", url.key);
    } else {
      *host = StrCat(url.bucket, ".", endpoint_host);
      *path = StrCat("/", url.key);
    }
  }

  // The headers that authenticate `r` (and say what its payload is).
  absl::Status AddAuthHeaders(const Request& r, const std::string& host, const std::string& path, Headers* out) {
    // Asked for every request: temporary credentials are renewed before they expire.
    TFCKPT_ASSIGN_OR_RETURN(const Credentials c, settings.credentials->Get());
    if (!c.bearer_token.empty()) {
      out->emplace_back("Authorization", StrCat("Bearer ", c.bearer_token));
      return absl::OkStatus();
    }
    SigningRequest s{r.method, path, r.query, r.headers, r.payload_hash};
    s.headers.emplace_back("host", host);
    s.headers.emplace_back("x-amz-date", AmzDate(std::chrono::system_clock::now()));
    s.headers.emplace_back("x-amz-content-sha256", r.payload_hash);
    if (!c.session_token.empty()) s.headers.emplace_back("x-amz-security-token", c.session_token);
    if (c.has_keys()) {
      out->emplace_back("Authorization",
                        AuthorizationHeader(s, {c.access_key_id, c.secret_access_key, RegionOf(r.url->bucket), "s3"}));
    }
    for (size_t i = r.headers.size() + 1; i < s.headers.size(); ++i) out->push_back(s.headers[i]);
    return absl::OkStatus();
  }

  // One attempt.
  Response Perform(const Request& r) {
    Response resp;
    std::string host, path;
    Target(*r.url, &host, &path);
    Headers auth;
    if (absl::Status s = AddAuthHeaders(r, host, path, &auth); !s.ok()) {
      resp.sink_status = std::move(s);
      return resp;
    }
    const std::string query = CanonicalQueryString(r.query);
    const std::string url =
        StrCat(endpoint.scheme, "://", host, UriEncode(path, false), query.empty() ? "" : "?", query);
    curl_slist* list = nullptr;
    list = curl_slist_append(list, StrCat("Host: ", host).c_str());
    list = curl_slist_append(list, "Expect:");
    for (const auto& [name, value] : r.headers) list = curl_slist_append(list, StrCat(name, ": ", value).c_str());
    for (const auto& [name, value] : auth) list = curl_slist_append(list, StrCat(name, ": ", value).c_str());

    const Handle handle = pool.Get();
    CURL* h = handle.easy;
    Transfer t{h, &r, &resp, {r.body, 0}};
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, options.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, options.stall_seconds);
    if (!settings.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, settings.ca_bundle.c_str());
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    SetRequestMethod(h, r.method.c_str(), &t.body);
    resp.curl = CutShortOnStop(r.method, r.query) ? RunTransfer(handle) : curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp.status);
    resp.curl_error = error[0] != 0 ? error : curl_easy_strerror(resp.curl);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, nullptr);
    pool.Put(handle);
    curl_slist_free_all(list);
    ++requests;
    downloaded += t.received;
    return resp;
  }

  Outcome Classify(const Request& r, const Response& resp) const {
    const std::string what = StrCat(r.method, " ", r.url->ToString());
    if (!resp.sink_status.ok()) return {Verdict::kFail, Annotate(resp.sink_status, what)};
    if (!resp.body_fault.ok()) return {Verdict::kRetry, Annotate(resp.body_fault, what)};
    if (resp.curl != CURLE_OK) {
      // An endpoint that never answered and refuses connections or has no address is not
      // going to (a wrong endpoint, no network): one line at once instead of the budget.
      const bool never_answered = !answered && (resp.curl == CURLE_COULDNT_CONNECT ||
                                                resp.curl == CURLE_COULDNT_RESOLVE_HOST ||
                                                resp.curl == CURLE_COULDNT_RESOLVE_PROXY);
      // (a certificate no CA vouches for: a private CA's, which the settings can name)
      const bool untrusted = resp.curl == CURLE_PEER_FAILED_VERIFICATION || resp.curl == CURLE_SSL_CACERT_BADFILE;
      absl::Status s = absl::UnavailableError(StrCat(
          what, ": cannot complete the request to ", settings.endpoint, ": ", resp.curl_error, " (curl code ",
          static_cast<int>(resp.curl), never_answered ? "; not retried: the endpoint has not answered yet" : "", ")",
          !untrusted                    ? ""
          : settings.ca_bundle.empty() ? "; a private certificate authority? name its PEM file with AWS_CA_BUNDLE or the profile's ca_bundle"
                                        : StrCat("; the CA bundle is ", settings.ca_bundle, " (", settings.ca_bundle_from, ")")));
      return {RetryableCurlCode(resp.curl) && !never_answered ? Verdict::kRetry : Verdict::kFail, std::move(s)};
    }
    const std::optional<S3Error> err = ParseError(resp.body);
    // CompleteMultipartUpload may answer 200 and report its failure in the body.
    if (resp.status / 100 == 2 && !err.has_value()) {
      if (r.finish) {
        if (absl::Status s = r.finish(resp); !s.ok()) {
          return {IsBodyFault(s) ? Verdict::kRetry : Verdict::kFail, Annotate(s, what)};
        }
      }
      return {Verdict::kOk, absl::OkStatus()};
    }
    const std::string code = err.has_value() ? err->code : "";
    const long status = resp.status / 100 == 2 ? 500 : resp.status;
    std::string message = StrCat(what, ": HTTP ", resp.status);
    if (!code.empty()) StrAppend(&message, " ", code);
    if (err.has_value() && !err->message.empty()) StrAppend(&message, ": ", err->message);
    const bool retry = status == 429 || (status >= 500 && status != 501) || RetryableS3Code(code);
    absl::Status failed(CodeForHttp(status, code), message);
    if (!code.empty()) failed.SetPayload(kS3CodePayload, absl::Cord(code));
    return {retry ? Verdict::kRetry : Verdict::kFail, std::move(failed)};
  }

  // Sends make() until it succeeds, fails for good or the retries are used up. A stop of
  // the run (run/run.h) ends it at once: no request starts, none is retried, and the
  // request on its way is cut short where CutShortOnStop allows; the result is then the
  // run's stopped error. The clean-up after a stop (NotCancellable) has a short budget of
  // its own (kCleanUpRetry): it must not hold the end of the run back for minutes.
  absl::StatusOr<Response> Execute(const std::function<Request()>& make) {
    const RetryPolicy& retry = CleaningUpAfterStop() ? kCleanUpRetry : options.retry;
    RetryBursts::Request burst(bursts.get());
    bool redirected = false;
    for (int attempt = 0;; ++attempt) {
      if (Stopping()) return StoppedError();
      const Request r = make();
      Response resp = Perform(r);
      if (resp.status != 0) answered = true;
      Outcome o = Classify(r, resp);
      if (o.verdict == Verdict::kOk) {
        if (r.method == "PUT") uploaded += r.body.size();
        return resp;
      }
      if (Stopping()) return StoppedError();
      if (settings.scheme == "s3" && WrongRegion(r, resp)) {
        // botocore's S3RegionRedirector: once per request, at once, not a retry.
        const std::string region = redirected ? "" : BucketRegion(r, resp);
        if (!region.empty() && region != RegionOf(r.url->bucket)) {
          {
            std::lock_guard<std::mutex> lock(regions_mu);
            bucket_regions[r.url->bucket] = region;
          }
          redirected = true;
          --attempt;
          continue;
        }
        if (redirected) {
          return absl::Status(o.status.code(), StrCat(o.status.message(), " (after a redirect to the bucket's region ",
                                                      RegionOf(r.url->bucket), ")"));
        }
        if (region.empty()) {
          return absl::Status(o.status.code(),
                              StrCat(o.status.message(), " (the bucket may be in another region than ", settings.region,
                                     ", and the store did not say which: give --region or AWS_REGION)"));
        }
      }
      if (o.verdict == Verdict::kFail) return o.status;
      // (every byte asked for is here: what failed after them needs no other attempt, and
      // the next would ask for nothing -- an inverted range)
      if (r.satisfied && r.satisfied()) return resp;
      if (attempt >= retry.max_retries) {
        return absl::Status(o.status.code(), StrCat(o.status.message(), " (", attempt + 1, " attempts)"));
      }
      // An endpoint that has never answered and drops connections, lets them time out or
      // never sends a byte gets kFirstContactRetries, not the budget of one that is known to
      // work: a wrong port, a firewall or a hung server fails in seconds, not minutes.
      if (resp.status == 0 && !answered && attempt >= kFirstContactRetries) {
        return absl::Status(o.status.code(), StrCat(o.status.message(), " (", attempt + 1,
                                                    " attempts; not retried further: the endpoint has not answered yet)"));
      }
      burst.Retrying({o.status, resp.status == 0 && !answered ? kFirstContactRetries : retry.max_retries});
      if (!Reached("request-retrying").ok() || !SleepUnlessStopped(RetryDelay(retry, attempt))) return StoppedError();
    }
  }
  static constexpr RetryPolicy kCleanUpRetry{2, std::chrono::microseconds(100'000), std::chrono::microseconds(1'000'000)};
  static constexpr int kFirstContactRetries = 2;

  // Whether `resp` says that `r` went to a region its bucket is not in (botocore's cases:
  // a redirect, PermanentRedirect, AuthorizationHeaderMalformed, a HEAD's bodiless 400/301).
  static bool WrongRegion(const Request& r, const Response& resp) {
    if (resp.status == 301 || resp.status == 302 || resp.status == 307) return true;
    if (resp.status == 400 && r.method == "HEAD") return true;
    const std::optional<S3Error> err = ParseError(resp.body);
    return err.has_value() && (err->code == "PermanentRedirect" || err->code == "AuthorizationHeaderMalformed" ||
                               err->code == "IllegalLocationConstraintException");
  }

  // The bucket's region as the answer tells it (x-amz-bucket-region, else the <Region> of
  // its error), else as a HEAD of the bucket tells it; "" when nothing says, or when what
  // it says is not a region name.
  std::string BucketRegion(const Request& r, const Response& resp) {
    std::string region = resp.Header("x-amz-bucket-region");
    if (region.empty()) {
      if (const std::optional<S3Error> err = ParseError(resp.body); err.has_value()) region = err->region;
    }
    if (region.empty() && !(r.method == "HEAD" && r.url->key.empty())) {
      const ObjectUrl bucket{r.url->scheme, r.url->bucket, ""};
      Request head;
      head.method = "HEAD";
      head.url = &bucket;
      region = Perform(head).Header("x-amz-bucket-region");
    }
    const bool valid = !region.empty() && region.size() <= 64 &&
                       region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
    return valid ? region : "";
  }

  absl::StatusOr<Response> Send(std::string method, const ObjectUrl& url, std::vector<QueryParam> query = {},
                                Headers headers = {}, std::string_view body = {}) {
    Request r;
    r.method = std::move(method);
    r.url = &url;
    r.query = std::move(query);
    r.headers = std::move(headers);
    r.body = body;
    if (!body.empty()) r.payload_hash = Sha256Hex(body);
    return Execute([&] { return r; });
  }

  absl::StatusOr<std::string> PutOnce(const ObjectUrl& url, std::string_view body, Headers headers) {
    TFCKPT_ASSIGN_OR_RETURN(Response resp, Send("PUT", url, {}, std::move(headers), body));
    return resp.Header("etag");
  }
};

std::string S3ErrorCode(const absl::Status& s) {
  const auto code = s.GetPayload(kS3CodePayload);
  return code.has_value() ? std::string(*code) : std::string();
}

namespace {

// `s` of a listing, saying which permission a refusal means (a role may read objects and
// still not list them: a listing is asked for only where nothing else will do).
absl::Status ListingError(absl::Status s, std::string_view s3_permission, std::string_view gcs_permission,
                          const ObjectUrl& url) {
  if (!absl::IsPermissionDenied(s) || S3ErrorCode(s) != "AccessDenied") return s;
  absl::Status out(s.code(), StrCat(s.message(), " (listing needs the ",
                                    url.scheme == "gs" ? gcs_permission : s3_permission, " permission)"));
  s.ForEachPayload([&](absl::string_view type, const absl::Cord& payload) { out.SetPayload(type, payload); });
  return out;
}

}  // namespace

std::chrono::microseconds RetryDelay(const RetryPolicy& policy, int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t cap = std::max<int64_t>(policy.initial_delay.count(), 0);
  for (int i = 0; i < attempt && cap < policy.max_delay.count(); ++i) cap *= 2;
  cap = std::min<int64_t>(cap, policy.max_delay.count());
  if (cap <= 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, cap)(rng));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(Settings settings, ClientOptions options) {
  CurlGlobalInit();
  auto impl = std::make_unique<Impl>();
  impl->endpoint = SplitEndpoint(settings.endpoint);
  impl->settings = std::move(settings);
  impl->options = options;
  if (impl->options.connections < 1) impl->options.connections = 1;
  if (!impl->settings.credentials) impl->settings.credentials = FixedCredentials({}, "none");
  impl->bursts = std::make_unique<RetryBursts>(impl->options.on_retry_burst);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const Settings& Client::settings() const { return impl_->settings; }
uint64_t Client::requests_sent() const { return impl_->requests; }
uint64_t Client::bytes_copied() const { return impl_->copied; }
uint64_t Client::bytes_uploaded() const { return impl_->uploaded; }
uint64_t Client::bytes_downloaded() const { return impl_->downloaded; }
int Client::retry_bursts() const { return impl_->bursts->bursts(); }

absl::Status Client::CreateBucket(const ObjectUrl& url) {
  const ObjectUrl bucket{url.scheme, url.bucket, ""};
  auto resp = impl_->Send("PUT", bucket);
  if (!resp.ok() && absl::StrContains(resp.status().message(), "BucketAlreadyOwnedByYou")) return absl::OkStatus();
  return resp.status();
}

absl::StatusOr<ObjectInfo> Client::Head(const ObjectUrl& url) {
  TFCKPT_ASSIGN_OR_RETURN(Response resp, impl_->Send("HEAD", url));
  ObjectInfo info;
  info.etag = resp.Header("etag");
  const std::string length = resp.Header("content-length");
  if (length.empty() || !absl::SimpleAtoi(AV(length), &info.size)) {
    return absl::DataLossError(StrCat("HEAD ", url.ToString(), ": no Content-Length in the response"));
  }
  return info;
}

absl::StatusOr<ObjectInfo> Client::HeadIfPresent(const ObjectUrl& url) {
  absl::StatusOr<ObjectInfo> info = Head(url);
  if (info.ok() || !absl::IsPermissionDenied(info.status())) return info;
  char byte;
  const absl::Status s = Read(url, 0, 1, "", &byte);
  if (S3ErrorCode(s) != "AccessDenied") return info;
  return absl::NotFoundError(StrCat("HEAD ", url.ToString(),
                                    ": no such object, or not allowed to read it (403 AccessDenied)"));
}

namespace {

// "bytes A-B/T" (T may be "*"): [A, B] and T, or nullopt.
struct ContentRange {
  uint64_t first = 0, last = 0;
  std::optional<uint64_t> total;
};
std::optional<ContentRange> ParseContentRange(std::string_view v) {
  if (!v.starts_with("bytes ")) return std::nullopt;
  v.remove_prefix(6);
  const size_t dash = v.find('-'), slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return std::nullopt;
  ContentRange r;
  if (!absl::SimpleAtoi(AV(v.substr(0, dash)), &r.first) ||
      !absl::SimpleAtoi(AV(v.substr(dash + 1, slash - dash - 1)), &r.last) || r.last < r.first) {
    return std::nullopt;
  }
  uint64_t total = 0;
  if (absl::SimpleAtoi(AV(v.substr(slash + 1)), &total)) r.total = total;
  return r;
}

}  // namespace

absl::Status Client::ReadTo(const ObjectUrl& url, uint64_t offset, uint64_t size, std::string_view etag,
                            const ByteSink& sink) {
  if (size == 0) return absl::OkStatus();
  uint64_t got = 0;
  std::string pinned(etag);  // else the ETag of the first response, for resumed attempts
  // This attempt's answer, from its headers (checked at its first bytes): where its body
  // ends in the object, and the object's size when the answer says it.
  bool checked = false;
  uint64_t answer_end = 0;
  std::optional<uint64_t> total;
  // The answer's headers must describe the bytes asked for: a body shorter or longer than
  // they say, or headers that disagree, is a fault of this answer (retried), never taken
  // as the object's end. Nothing of such an answer reaches the sink.
  const auto check = [&](const Response& resp) -> absl::Status {
    const uint64_t first = offset + got, end = offset + size;
    const std::string length_header = resp.Header("content-length");
    std::optional<uint64_t> length;
    if (uint64_t n = 0; !length_header.empty() && absl::SimpleAtoi(AV(length_header), &n)) length = n;
    if (resp.status == 206) {
      const std::string header = resp.Header("content-range");
      const std::optional<ContentRange> range = ParseContentRange(header);
      if (!range.has_value()) return BodyFault(StrCat("the answer's Content-Range \"", header, "\" is not a byte range"));
      if (range->first != first || range->last >= end) {
        return BodyFault(StrCat("the answer holds bytes ", range->first, "-", range->last, ", not the bytes ", first,
                                "-", end - 1, " asked for"));
      }
      if (length.has_value() && *length != range->last - range->first + 1) {
        return BodyFault(StrCat("the answer's Content-Length ", *length, " disagrees with its Content-Range ", header));
      }
      answer_end = range->last + 1;
      total = range->total;
      return absl::OkStatus();
    }
    // 200: the whole object, which a range request gets only from a server that ignores
    // ranges -- taken for a read from byte 0 of all there is.
    if (resp.status != 200 || first != 0) {
      return BodyFault(StrCat("the server answered ", resp.status, " to a request for bytes ", first, "-", end - 1));
    }
    if (length.has_value() && *length > end) {
      return BodyFault(StrCat("the server answered 200 with ", *length, " bytes to a request for bytes 0-", end - 1));
    }
    answer_end = length.value_or(end);
    total = length;
    return absl::OkStatus();
  };
  auto receive = [&](const Response& resp, std::string_view data) -> absl::Status {
    if (!checked) {
      TFCKPT_RETURN_IF_ERROR(check(resp));
      checked = true;
    }
    if (data.size() > answer_end - (offset + got)) {
      return BodyFault(StrCat("the answer is longer than the ", answer_end - offset - got, " bytes its headers say"));
    }
    if (pinned.empty()) pinned = resp.Header("etag");
    TFCKPT_RETURN_IF_ERROR(sink(data));
    got += data.size();
    return absl::OkStatus();
  };
  // A whole answer that ended before the bytes asked for: the object's end only where the
  // answer says the object ends there; else a short answer, tried again from where it ended.
  auto finish = [&](const Response& resp) -> absl::Status {
    if (got == size) return absl::OkStatus();
    if (!checked) {
      if (absl::Status s = check(resp); !s.ok()) return s;  // (an answer with no body at all)
    }
    if (total.has_value() && *total <= offset + got) {
      return absl::OutOfRangeError(StrCat("the object ends at byte ", offset + got, ", before the ", size,
                                          " bytes needed from offset ", offset));
    }
    return BodyFault(StrCat("the answer ended at byte ", offset + got, ", before the ", size,
                            " bytes asked for from offset ", offset, " (Content-Length ",
                            resp.Header("content-length"), ", Content-Range ", resp.Header("content-range"), ")"));
  };
  // Each attempt asks for what is still missing: an interrupted transfer resumes.
  TFCKPT_RETURN_IF_ERROR(impl_
                             ->Execute([&] {
                               checked = false;
                               answer_end = 0;
                               total.reset();
                               Request r;
                               r.method = "GET";
                               r.url = &url;
                               r.headers.emplace_back("Range", StrCat("bytes=", offset + got, "-", offset + size - 1));
                               if (!pinned.empty()) r.headers.emplace_back("If-Match", pinned);
                               r.sink = receive;
                               r.finish = finish;
                               r.satisfied = [&] { return got == size; };
                               return r;
                             })
                             .status());
  if (got < size) {
    return absl::OutOfRangeError(StrCat("GET ", url.ToString(), ": the object ends at byte ", offset + got,
                                        ", before the ", size, " bytes needed from offset ", offset));
  }
  return absl::OkStatus();
}

absl::Status Client::Read(const ObjectUrl& url, uint64_t offset, uint64_t size, std::string_view etag, char* out) {
  char* next = out;
  return ReadTo(url, offset, size, etag, [&](std::string_view data) {
    std::memcpy(next, data.data(), data.size());
    next += data.size();
    return absl::OkStatus();
  });
}

absl::Status Client::ReadRanges(const ObjectUrl& url, std::string_view etag, const std::vector<RangeRead>& reads) {
  return ParallelForStatus(reads.size(), impl_->options.connections, [&](size_t i, const std::atomic<bool>&) {
    return Read(url, reads[i].offset, reads[i].size, etag, reads[i].out);
  });
}

absl::StatusOr<std::optional<std::string>> Client::Holds(const ObjectUrl& url, std::string_view body) {
  absl::StatusOr<ObjectInfo> info = HeadIfPresent(url);
  if (absl::IsNotFound(info.status())) return std::nullopt;
  if (!info.ok()) return info.status();
  if (info->size != body.size()) return std::nullopt;
  if (absl::StripPrefix(absl::StripSuffix(info->etag, "\""), "\"") == Md5Hex(body)) return info->etag;
  // An ETag that is not the bytes' MD5 (a multipart object, encryption with a KMS key):
  // the bytes themselves, pinned to that ETag (sizes that a PUT takes: at most 64 MiB here).
  std::string there(body.size(), '\0');
  absl::Status read = Read(url, 0, there.size(), info->etag, there.data());
  if (!read.ok()) return read;
  if (there != body) return std::nullopt;
  return info->etag;
}

absl::StatusOr<std::string> Client::Put(const ObjectUrl& url, std::string_view body, bool if_absent) {
  // Cloud Storage's XML API takes If-None-Match: * for no create-only precondition: its own
  // is x-goog-if-generation-match: 0 (no live generation), 412 like S3's. Sent beside it on
  // gs:// (a server that knows neither answers If-None-Match with 501 as before, and the
  // HEAD below keeps what it can).
  Headers create_only;
  if (if_absent && url.scheme == "gs") create_only.emplace_back("x-goog-if-generation-match", "0");
  if (if_absent && impl_->if_none_match_supported) {
    Headers headers = create_only;
    headers.emplace_back("If-None-Match", "*");
    auto etag = impl_->PutOnce(url, body, std::move(headers));
    if (etag.ok() || etag.status().code() != absl::StatusCode::kUnimplemented) {
      if (etag.status().code() == absl::StatusCode::kFailedPrecondition) {
        // 412: an object is there. It may be this PUT's own, carried out by an attempt whose
        // answer was lost (a connection reset, a 5xx sent after the commit) and sent again
        // -- by our retries, or by curl's own on a kept-alive connection, which we do not
        // see. What is there decides: these very bytes are this PUT's object (or one equal
        // to it in every byte, which is as good); anything else is another writer's.
        absl::StatusOr<std::optional<std::string>> ours = Holds(url, body);
        if (!ours.ok()) {
          return absl::UnavailableError(StrCat("PUT ", url.ToString(), ": answered 412, and whether the object "
                                               "there is this upload's could not be found out (",
                                               ours.status().message(), ")"));
        }
        if (ours->has_value()) return **ours;
        return absl::AlreadyExistsError(StrCat("PUT ", url.ToString(), ": the object exists already"));
      }
      return etag;
    }
    impl_->if_none_match_supported = false;  // 501: check with HEAD from now on
  }
  if (if_absent) {
    auto head = HeadIfPresent(url);
    if (head.ok()) return absl::AlreadyExistsError(StrCat("PUT ", url.ToString(), ": the object exists already"));
    if (head.status().code() != absl::StatusCode::kNotFound) return head.status();
  }
  return impl_->PutOnce(url, body, std::move(create_only));
}

absl::StatusOr<std::string> Client::CreateMultipartUpload(const ObjectUrl& url) {
  TFCKPT_ASSIGN_OR_RETURN(Response resp, impl_->Send("POST", url, {{"uploads", ""}}));
  auto id = ParseUploadId(resp.body);
  if (!id.ok()) return Annotate(id.status(), StrCat("POST ", url.ToString(), "?uploads"));
  return id;
}

absl::StatusOr<std::string> Client::UploadPart(const ObjectUrl& url, const std::string& upload_id, int part_number,
                                               std::string_view body) {
  TFCKPT_ASSIGN_OR_RETURN(
      Response resp, impl_->Send("PUT", url, {{"partNumber", StrCat(part_number)}, {"uploadId", upload_id}}, {}, body));
  return resp.Header("etag");
}

absl::StatusOr<std::string> Client::UploadPartCopy(const ObjectUrl& url, const std::string& upload_id,
                                                   int part_number, const ObjectUrl& source,
                                                   std::string_view source_etag, uint64_t offset, uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError(StrCat("bug: an empty copy from ", source.ToString()));
  // The source as a path in the store ("/BUCKET/KEY"), URL-encoded but for its slashes.
  Headers headers = {{"x-amz-copy-source", UriEncode(StrCat("/", source.bucket, "/", source.key), false)},
                     {"x-amz-copy-source-range", StrCat("bytes=", offset, "-", offset + size - 1)}};
  if (!source_etag.empty()) headers.emplace_back("x-amz-copy-source-if-match", std::string(source_etag));
  absl::StatusOr<Response> resp =
      impl_->Send("PUT", url, {{"partNumber", StrCat(part_number)}, {"uploadId", upload_id}}, std::move(headers));
  const std::string what = StrCat(" (part ", part_number, " copied from ", source.ToString(), " bytes ", offset,
                                  " to ", offset + size, ")");
  if (!resp.ok()) {
    // (The store's code stays with the status: a caller tells a refusal from a failure.)
    absl::Status s(resp.status().code(), StrCat(resp.status().message(), what));
    resp.status().ForEachPayload([&](absl::string_view type, const absl::Cord& payload) { s.SetPayload(type, payload); });
    return s;
  }
  absl::StatusOr<std::string> etag = ParseCopyPartEtag(resp->body);
  if (!etag.ok()) return Annotate(etag.status(), StrCat("PUT ", url.ToString(), what));
  impl_->copied += size;
  return etag;
}

absl::Status Client::CompleteMultipartUpload(const ObjectUrl& url, const std::string& upload_id,
                                             const std::vector<CompletedPart>& parts) {
  const std::string xml = CompleteMultipartUploadXml(parts);
  return impl_->Send("POST", url, {{"uploadId", upload_id}}, {{"Content-Type", "application/xml"}}, xml).status();
}

absl::StatusOr<bool> Client::UploadInProgress(const ObjectUrl& url, const std::string& upload_id) {
  absl::StatusOr<Response> resp = impl_->Send("GET", url, {{"max-parts", "1"}, {"uploadId", upload_id}});
  if (resp.ok()) return true;
  if (absl::IsNotFound(resp.status())) return false;
  return resp.status();
}

absl::Status Client::AbortMultipartUpload(const ObjectUrl& url, const std::string& upload_id) {
  return impl_->Send("DELETE", url, {{"uploadId", upload_id}}).status();
}

absl::Status Client::UploadMultipart(const ObjectUrl& url, std::string_view body, uint64_t part_size) {
  if (part_size == 0) part_size = MultipartPartSize(body.size());
  auto writer = MultipartWriter::Create(this, url, part_size, impl_->options.connections);
  TFCKPT_RETURN_IF_ERROR(writer->Append(body));  // on error the writer aborts the upload
  return writer->Close();
}

absl::StatusOr<std::vector<ListedObject>> Client::List(const ObjectUrl& prefix, int page_size) {
  TFCKPT_ASSIGN_OR_RETURN(Listing all, ListLevel(prefix, "", page_size));
  return std::move(all.objects);
}

absl::StatusOr<Client::Listing> Client::ListLevel(const ObjectUrl& prefix, std::string_view delimiter,
                                                  int page_size, bool first_page_only) {
  const ObjectUrl bucket{prefix.scheme, prefix.bucket, ""};
  Listing out;
  std::string token;
  do {
    std::vector<QueryParam> q = {{"list-type", "2"}, {"prefix", prefix.key}, {"max-keys", StrCat(page_size)}};
    if (!delimiter.empty()) q.push_back({"delimiter", std::string(delimiter)});
    if (!token.empty()) q.push_back({"continuation-token", token});
    absl::StatusOr<Response> resp = impl_->Send("GET", bucket, std::move(q));
    if (!resp.ok()) return ListingError(resp.status(), "s3:ListBucket", "storage.objects.list", prefix);
    auto page = ParseListObjectsV2(resp->body);
    if (!page.ok()) return Annotate(page.status(), StrCat("GET ", prefix.ToString(), " (list)"));
    for (ListedObject& o : page->objects) out.objects.push_back(std::move(o));
    for (std::string& p : page->common_prefixes) out.common_prefixes.push_back(std::move(p));
    token = page->truncated && !first_page_only ? page->next_token : "";
  } while (!token.empty());
  return out;
}

absl::StatusOr<std::vector<MultipartUpload>> Client::ListMultipartUploads(const ObjectUrl& prefix, int page_size) {
  const ObjectUrl bucket{prefix.scheme, prefix.bucket, ""};
  std::vector<MultipartUpload> out;
  std::string key_marker, id_marker;
  for (;;) {
    std::vector<QueryParam> q = {{"uploads", ""}, {"prefix", prefix.key}, {"max-uploads", StrCat(page_size)}};
    if (!key_marker.empty()) q.push_back({"key-marker", key_marker});
    if (!id_marker.empty()) q.push_back({"upload-id-marker", id_marker});
    absl::StatusOr<Response> resp = impl_->Send("GET", bucket, std::move(q));
    if (!resp.ok()) {
      return ListingError(resp.status(), "s3:ListBucketMultipartUploads", "storage.multipartUploads.list", prefix);
    }
    auto page = ParseListMultipartUploads(resp->body);
    if (!page.ok()) return Annotate(page.status(), StrCat("GET ", prefix.ToString(), " (list uploads)"));
    for (MultipartUpload& u : page->uploads) out.push_back(std::move(u));
    if (!page->truncated || page->next_key_marker.empty()) break;
    key_marker = page->next_key_marker;
    id_marker = page->next_upload_id_marker;
  }
  return out;
}

absl::Status Client::Delete(const ObjectUrl& url) { return impl_->Send("DELETE", url).status(); }

}  // namespace tfckpt::s3
