#include "kvstore/s3/http_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>

#include <mutex>

#include "kvstore/s3/curl_method.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

constexpr size_t kMaxAnswerBytes = 1 << 20;

struct Exchange {
  UploadBody body;
  HttpAnswer answer;
  bool too_large = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* arg) {
  auto* x = static_cast<Exchange*>(arg);
  if (x->answer.body.size() + size * n > kMaxAnswerBytes) {
    x->too_large = true;
    return 0;
  }
  x->answer.body.append(data, size * n);
  return size * n;
}

}  // namespace

void CurlGlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

absl::StatusOr<HttpAnswer> HttpFetch(const HttpRequest& r) {
  CurlGlobalInit();
  CURL* h = curl_easy_init();
  if (h == nullptr) return absl::ResourceExhaustedError("cannot create a curl handle");
  Exchange x{{r.body, 0}, {}, false};
  curl_slist* headers = curl_slist_append(nullptr, "Expect:");
  for (const auto& [name, value] : r.headers) headers = curl_slist_append(headers, StrCat(name, ": ", value).c_str());
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, r.timeout_ms);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (!r.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, r.ca_bundle.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
  SetRequestMethod(h, r.method.c_str(), &x.body);
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x.answer.status);
  const std::string why = error[0] != 0 ? error : curl_easy_strerror(rc);
  curl_slist_free_all(headers);
  curl_easy_cleanup(h);
  if (x.too_large) return absl::DataLossError(StrCat(r.method, " ", RedactedUrl(r.url), ": the answer is over 1 MiB"));
  if (rc != CURLE_OK) return absl::UnavailableError(StrCat(r.method, " ", RedactedUrl(r.url), ": no answer: ", why));
  return std::move(x.answer);
}

absl::StatusOr<UrlParts> SplitHttpUrl(std::string_view url) {
  UrlParts p;
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return absl::InvalidArgumentError(StrCat("\"", RedactedUrl(url), "\" is not a URL"));
  p.scheme = std::string(url.substr(0, sep));
  if (p.scheme != "http" && p.scheme != "https") {
    return absl::InvalidArgumentError(StrCat("\"", RedactedUrl(url), "\" is not an http:// or https:// URL"));
  }
  std::string_view rest = url.substr(sep + 3);
  const size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  p.path = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (!p.path.empty() && p.path[0] != '/') p.path = "/" + p.path;
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) authority = authority.substr(at + 1);
  p.authority = std::string(authority);
  std::string_view host = authority;
  if (!host.empty() && host[0] == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError(StrCat("\"", RedactedUrl(url), "\" has a malformed host"));
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (host.empty()) return absl::InvalidArgumentError(StrCat("\"", RedactedUrl(url), "\" has no host"));
  p.host = std::string(host);
  return p;
}

std::string RedactedUrl(std::string_view url) {
  const size_t sep = url.find("://");
  const size_t start = sep == std::string_view::npos ? 0 : sep + 3;
  const size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  return StrCat(url.substr(0, start), url.substr(at + 1));
}

bool IsLoopbackAddress(std::string_view host) {
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace tfckpt::s3
