// One small HTTP exchange with a credential service (STS, the container and instance
// metadata endpoints, the SSO portal, Google's token endpoint and metadata server), over
// libcurl: no retries of its own (each source retries as its SDK does), no redirects,
// answers of at most 1 MiB. Separate from the object store client's requests (client.h),
// whose retries and connection pool are for the store.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt::s3 {

// curl_global_init, once per process, before the first curl handle of either client (this
// one and client.cc's): its one once_flag.
void CurlGlobalInit();

struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // sent when not empty (or when the method is PUT or POST)
  long connect_timeout_ms = 2000;
  long timeout_ms = 10000;
  std::string ca_bundle;  // PEM file of the CAs to trust for https ("": the system's)
};

struct HttpAnswer {
  long status = 0;
  std::string body;
};

// Sends `r` once. The answer whatever its HTTP status; Unavailable naming the URL when no
// answer came (refused, unreachable, timed out, unresolvable host); DataLoss when the
// body is over 1 MiB. Thread-safe. Never puts a header value (a token) in an error.
absl::StatusOr<HttpAnswer> HttpFetch(const HttpRequest& r);

// The parts of an http(s) URL: "http://user@[::1]:8080/a?b" is scheme "http", authority
// "[::1]:8080" (what a Host header holds), host "::1", path "/a?b" ("/" when empty).
// InvalidArgument for anything but http:// or https:// with a host.
struct UrlParts {
  std::string scheme, authority, host, path;
};
absl::StatusOr<UrlParts> SplitHttpUrl(std::string_view url);

// `url` as messages may show it: without the user information ("user:password@") a URL
// may carry before its host, which can be a secret. Conservative: where an '@' follows
// the "://" anywhere (a password may hold '/', '?' or '#' unencoded), everything up to the
// last '@' is left out. "http://u:p@host:9000" is "http://host:9000".
std::string RedactedUrl(std::string_view url);

// True for a literal loopback address: 127.0.0.0/8 or ::1.
bool IsLoopbackAddress(std::string_view host);

}  // namespace tfckpt::s3
