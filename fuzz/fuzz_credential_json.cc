// The JSON credential sources hand out (credential_json.h): container and instance
// metadata answers, credential_process output, the SSO token cache and portal answer,
// Google's credentials files (a service account's private key signs a JWT) and OAuth 2
// token answers; and the ISO 8601 times in them. Input: one document, given to every parser.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz_util.h"
#include "kvstore/s3/credential_json.h"
#include "kvstore/s3/gcp_auth.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfckpt::s3;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto headers_ok = [](const Credentials& c) {
    return CheckHeaderValue(c.access_key_id, "").ok() && CheckHeaderValue(c.session_token, "").ok();
  };
  if (auto c = ParseMetadataCredentials(text); c.ok() && (!headers_ok(*c) || !c->expiration)) std::abort();
  if (auto c = ParseProcessCredentials(text); c.ok() && !headers_ok(*c)) std::abort();
  if (auto c = ParseSsoRoleCredentials(text); c.ok() && !headers_ok(*c)) std::abort();
  if (auto t = ParseSsoToken(text); t.ok() && !CheckHeaderValue(t->access_token, "").ok()) std::abort();
  if (auto t = ParseOAuthToken(text); t.ok() && !CheckHeaderValue(t->access_token, "").ok()) std::abort();
  (void)ParseIso8601(text);
  if (auto f = ParseGoogleCredentialsFile(text); f.ok() && f->type == "service_account" && f->private_key.size() < 8192) {
    (void)ServiceAccountAssertion(*f, kStorageScope, SystemTime(std::chrono::seconds(1714564800)));
  }
  return 0;
}
