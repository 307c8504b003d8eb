#include "kvstore/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>

#include "absl/strings/ascii.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

// Trimmed, inner runs of spaces collapsed to one.
std::string CanonicalValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : SV(absl::StripAsciiWhitespace(AV(v)))) {
    if (c == ' ' || c == '\t') {
      space = true;
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string Scope(std::string_view amz_date, const SigningKeyParts& key) {
  return StrCat(amz_date.substr(0, 8), "/", key.region, "/", key.service, "/aws4_request");
}

std::string AmzDateOf(const SigningRequest& r) {
  for (const auto& [name, value] : r.headers) {
    if (absl::AsciiStrToLower(AV(name)) == "x-amz-date") return value;
  }
  return "";
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  return Hex(digest, len);
}

std::string Md5Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_md5(), nullptr);
  return Hex(digest, len);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (Unreserved(c) || (c == '/' && !encode_slash)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  return out;
}

std::string CanonicalQueryString(const std::vector<QueryParam>& params) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(params.size());
  for (const QueryParam& p : params) encoded.emplace_back(UriEncode(p.name, true), UriEncode(p.value, true));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) StrAppend(&out, out.empty() ? "" : "&", name, "=", value);
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalRequest(const SigningRequest& r, std::string* signed_headers) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [name, value] : r.headers) {
    headers.emplace_back(absl::AsciiStrToLower(AV(name)), CanonicalValue(value));
  }
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string header_lines;
  signed_headers->clear();
  for (size_t i = 0; i < headers.size(); ++i) {
    // Repeated names become one line, values joined by ',' in the order given.
    if (i > 0 && headers[i].first == headers[i - 1].first) {
      header_lines.back() = ',';
      StrAppend(&header_lines, headers[i].second, "\n");
      continue;
    }
    StrAppend(&header_lines, headers[i].first, ":", headers[i].second, "\n");
    StrAppend(signed_headers, signed_headers->empty() ? "" : ";", headers[i].first);
  }
  const std::string path = r.path.empty() ? "/" : UriEncode(r.path, false);
  return StrCat(r.method, "\n", path, "\n", CanonicalQueryString(r.query), "\n", header_lines, "\n", *signed_headers,
                "\n", r.payload_hash);
}

std::string AuthorizationHeader(const SigningRequest& r, const SigningKeyParts& key) {
  std::string signed_headers;
  const std::string canonical = CanonicalRequest(r, &signed_headers);
  const std::string amz_date = AmzDateOf(r);
  const std::string scope = Scope(amz_date, key);
  const std::string to_sign = StrCat("AWS4-HMAC-SHA256\n", amz_date, "\n", scope, "\n", Sha256Hex(canonical));
  std::string k = Hmac(StrCat("AWS4", key.secret_access_key), amz_date.substr(0, 8));
  k = Hmac(k, key.region);
  k = Hmac(k, key.service);
  k = Hmac(k, "aws4_request");
  const std::string mac = Hmac(k, to_sign);
  const std::string signature = Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  return StrCat("AWS4-HMAC-SHA256 Credential=", key.access_key_id, "/", scope, ", SignedHeaders=", signed_headers,
                ", Signature=", signature);
}

}  // namespace tfckpt::s3
