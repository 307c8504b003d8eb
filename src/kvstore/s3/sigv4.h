// AWS Signature Version 4 (header form) on OpenSSL: canonical request, string to sign,
// signing key and the Authorization header. Our own code: libcurl's CURLOPT_AWS_SIGV4
// (7.88) neither sorts query parameters nor signs valueless ones ("?uploads") as
// "uploads=", and sends no x-amz-content-sha256.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tfckpt::s3 {

// SHA-256 of `data` as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view data);
// MD5 of `data`, in lowercase hex: the ETag S3 gives an object stored by one plain PUT.
std::string Md5Hex(std::string_view data);
// The SHA-256 of no bytes, the payload hash of bodiless requests.
inline constexpr std::string_view kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

// Percent-encodes every byte except A-Z a-z 0-9 - . _ ~ (and '/' unless `encode_slash`),
// with uppercase hex, as SigV4 requires.
std::string UriEncode(std::string_view s, bool encode_slash);

// A query parameter, not encoded. A valueless parameter ("?uploads") has value "".
struct QueryParam {
  std::string name, value;
};

// "a=1&b=2": names and values encoded, sorted by encoded name then value, valueless
// parameters as "name=". Also the query string the client sends, so what is signed is
// what goes on the wire.
std::string CanonicalQueryString(const std::vector<QueryParam>& params);

// "20150830T123600Z" for `t` in UTC.
std::string AmzDate(std::chrono::system_clock::time_point t);

struct SigningRequest {
  std::string method;  // "GET"
  std::string path;    // decoded path, "/bucket/key"; "" means "/"
  std::vector<QueryParam> query;
  // Every header to sign, e.g. host, x-amz-date (REQUIRED: the signing time, AmzDate
  // form), x-amz-content-sha256, range. Names in any case; values are trimmed and inner
  // runs of spaces collapsed.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // Sha256Hex(body), kEmptySha256 or kUnsignedPayload
};

struct SigningKeyParts {
  std::string access_key_id, secret_access_key, region, service;
};

// The canonical request; `signed_headers` receives "host;x-amz-date;…".
std::string CanonicalRequest(const SigningRequest& r, std::string* signed_headers);

// "AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=…, Signature=…". REQUIRES: r.headers has x-amz-date.
std::string AuthorizationHeader(const SigningRequest& r, const SigningKeyParts& key);

}  // namespace tfckpt::s3
