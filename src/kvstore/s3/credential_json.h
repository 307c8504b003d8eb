// The JSON documents credential sources hand out (nlohmann-json): the container and EC2
// instance metadata answers, credential_process output, the SSO token cache and portal
// answer, Google's credential files and OAuth 2 token answers. Each parser checks the
// fields it uses (present, of the right type, usable in a header) and fails with a
// message that names the field, never its value: callers prefix the source (a URL, a
// file, a command). InvalidArgument for a document that is not what it should be.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kvstore/s3/credentials.h"

namespace tfckpt::s3 {

// The container credentials endpoint's and EC2 instance metadata's answer:
// {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"} (all required, as botocore
// requires them; IMDS also sends "Code": "Success", anything else is its error).
absl::StatusOr<Credentials> ParseMetadataCredentials(std::string_view json);

// credential_process output: {"Version": 1, "AccessKeyId", "SecretAccessKey",
// "SessionToken" (optional), "Expiration" (optional: without it they do not expire)}.
absl::StatusOr<Credentials> ParseProcessCredentials(std::string_view json);

// An SSO token cache file (~/.aws/sso/cache/SHA1.json): {"accessToken", "expiresAt"}.
struct SsoToken {
  std::string access_token;
  SystemTime expires_at;
};
absl::StatusOr<SsoToken> ParseSsoToken(std::string_view json);

// The SSO portal's GetRoleCredentials answer: {"roleCredentials": {"accessKeyId",
// "secretAccessKey", "sessionToken", "expiration" (milliseconds since 1970)}}.
absl::StatusOr<Credentials> ParseSsoRoleCredentials(std::string_view json);

// A Google credentials file (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
// application_default_credentials.json): "type" is "service_account" (client_email,
// private_key in PEM, private_key_id, token_uri) or "authorized_user" (client_id,
// client_secret, refresh_token, token_uri). token_uri defaults to Google's. Other types
// (external_account, impersonated_service_account, …) are Unimplemented.
inline constexpr std::string_view kGoogleTokenUri = "https://oauth2.googleapis.com/token";
struct GoogleCredentialsFile {
  std::string type;
  std::string client_email, private_key, private_key_id;  // service_account
  std::string client_id, client_secret, refresh_token;    // authorized_user
  std::string token_uri;
};
absl::StatusOr<GoogleCredentialsFile> ParseGoogleCredentialsFile(std::string_view json);

// An OAuth 2 token answer (Google's token endpoint, the GCE metadata server):
// {"access_token", "expires_in" (seconds; absent or not a number: unknown),
// "token_type"}. An {"error", "error_description"} answer is PermissionDenied with them.
struct OAuthToken {
  std::string access_token;
  std::optional<int64_t> expires_in;
};
absl::StatusOr<OAuthToken> ParseOAuthToken(std::string_view json);

// InvalidArgument when `value` cannot go into an HTTP header (a control character: a
// line break would add a header of its own). `what` names it; the value is never shown.
absl::Status CheckHeaderValue(std::string_view value, std::string_view what);

}  // namespace tfckpt::s3
