#include "kvstore/s3/credential_json.h"

#include <nlohmann/json.hpp>

#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseObject(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  return j;
}

// The string field `name` ("" when absent and not `required`).
absl::StatusOr<std::string> Field(const Json& j, const char* name, bool required) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(StrCat("no \"", name, "\""));
    return std::string();
  }
  if (!it->is_string()) return absl::InvalidArgumentError(StrCat("\"", name, "\" is not a string"));
  std::string v = it->get<std::string>();
  if (required && v.empty()) return absl::InvalidArgumentError(StrCat("\"", name, "\" is empty"));
  return v;
}

// A field that goes into a header (a key id, a token).
absl::StatusOr<std::string> HeaderField(const Json& j, const char* name, bool required) {
  TFCKPT_ASSIGN_OR_RETURN(std::string v, Field(j, name, required));
  TFCKPT_RETURN_IF_ERROR(CheckHeaderValue(v, StrCat("\"", name, "\"")));
  return v;
}

// An AWS key pair with its session token, from the fields so named.
absl::StatusOr<Credentials> Keys(const Json& j, const char* id, const char* secret, const char* token,
                                 bool token_required) {
  Credentials c;
  TFCKPT_ASSIGN_OR_RETURN(c.access_key_id, HeaderField(j, id, true));
  TFCKPT_ASSIGN_OR_RETURN(c.secret_access_key, Field(j, secret, true));
  TFCKPT_ASSIGN_OR_RETURN(c.session_token, HeaderField(j, token, token_required));
  return c;
}

absl::StatusOr<SystemTime> TimeField(const Json& j, const char* name) {
  TFCKPT_ASSIGN_OR_RETURN(const std::string v, Field(j, name, true));
  auto t = ParseIso8601(v);
  if (!t.ok()) return absl::InvalidArgumentError(StrCat("\"", name, "\" is not an ISO 8601 time"));
  return *t;
}

}  // namespace

absl::Status CheckHeaderValue(std::string_view value, std::string_view what) {
  for (unsigned char ch : value) {
    if (ch < 0x20 || ch == 0x7f) return absl::InvalidArgumentError(StrCat(what, " holds a control character"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Credentials> ParseMetadataCredentials(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  if (auto code = j.find("Code"); code != j.end() && code->is_string() && code->get<std::string>() != "Success") {
    std::string message = StrCat("the answer is an error: ", code->get<std::string>().substr(0, 100));
    if (auto m = j.find("Message"); m != j.end() && m->is_string()) StrAppend(&message, ": ", m->get<std::string>().substr(0, 300));
    return absl::PermissionDeniedError(message);
  }
  TFCKPT_ASSIGN_OR_RETURN(Credentials c, Keys(j, "AccessKeyId", "SecretAccessKey", "Token", true));
  TFCKPT_ASSIGN_OR_RETURN(c.expiration, TimeField(j, "Expiration"));
  return c;
}

absl::StatusOr<Credentials> ParseProcessCredentials(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  auto version = j.find("Version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return absl::InvalidArgumentError("\"Version\" is not 1 (the only version there is)");
  }
  TFCKPT_ASSIGN_OR_RETURN(Credentials c, Keys(j, "AccessKeyId", "SecretAccessKey", "SessionToken", false));
  if (auto e = j.find("Expiration"); e != j.end() && !e->is_null()) {
    TFCKPT_ASSIGN_OR_RETURN(c.expiration, TimeField(j, "Expiration"));
  }
  return c;
}

absl::StatusOr<SsoToken> ParseSsoToken(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  SsoToken t;
  TFCKPT_ASSIGN_OR_RETURN(t.access_token, HeaderField(j, "accessToken", true));
  TFCKPT_ASSIGN_OR_RETURN(t.expires_at, TimeField(j, "expiresAt"));
  return t;
}

absl::StatusOr<Credentials> ParseSsoRoleCredentials(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  auto rc = j.find("roleCredentials");
  if (rc == j.end() || !rc->is_object()) return absl::InvalidArgumentError("no \"roleCredentials\" object");
  TFCKPT_ASSIGN_OR_RETURN(Credentials c, Keys(*rc, "accessKeyId", "secretAccessKey", "sessionToken", true));
  auto e = rc->find("expiration");
  if (e == rc->end() || !e->is_number_integer()) {
    return absl::InvalidArgumentError("\"expiration\" is not a whole number of milliseconds");
  }
  const int64_t ms = e->get<int64_t>();
  if (ms < 0 || ms > int64_t{7258118400000}) return absl::InvalidArgumentError("\"expiration\" is out of range");  // 2200
  c.expiration = SystemTime(std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::milliseconds(ms)));
  return c;
}

absl::StatusOr<GoogleCredentialsFile> ParseGoogleCredentialsFile(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  GoogleCredentialsFile f;
  TFCKPT_ASSIGN_OR_RETURN(f.type, Field(j, "type", true));
  TFCKPT_ASSIGN_OR_RETURN(f.token_uri, Field(j, "token_uri", false));
  if (f.token_uri.empty()) f.token_uri = std::string(kGoogleTokenUri);
  if (f.type == "service_account") {
    TFCKPT_ASSIGN_OR_RETURN(f.client_email, Field(j, "client_email", true));
    TFCKPT_ASSIGN_OR_RETURN(f.private_key, Field(j, "private_key", true));
    TFCKPT_ASSIGN_OR_RETURN(f.private_key_id, Field(j, "private_key_id", false));
  } else if (f.type == "authorized_user") {
    TFCKPT_ASSIGN_OR_RETURN(f.client_id, Field(j, "client_id", true));
    TFCKPT_ASSIGN_OR_RETURN(f.client_secret, Field(j, "client_secret", true));
    TFCKPT_ASSIGN_OR_RETURN(f.refresh_token, Field(j, "refresh_token", true));
  } else {
    return absl::UnimplementedError(StrCat("credentials of type \"", f.type.substr(0, 64),
                                           "\" are not supported (service_account and authorized_user are)"));
  }
  return f;
}

absl::StatusOr<OAuthToken> ParseOAuthToken(std::string_view json) {
  TFCKPT_ASSIGN_OR_RETURN(const Json j, ParseObject(json));
  if (auto err = j.find("error"); err != j.end() && err->is_string()) {
    std::string message = StrCat("token request refused: ", err->get<std::string>().substr(0, 100));
    if (auto d = j.find("error_description"); d != j.end() && d->is_string()) {
      StrAppend(&message, ": ", d->get<std::string>().substr(0, 300));
    }
    return absl::PermissionDeniedError(message);
  }
  OAuthToken t;
  TFCKPT_ASSIGN_OR_RETURN(t.access_token, HeaderField(j, "access_token", true));
  if (auto e = j.find("expires_in"); e != j.end() && e->is_number_integer()) {
    const int64_t v = e->get<int64_t>();
    if (v >= 0 && v <= int64_t{10} * 365 * 86400) t.expires_in = v;
  }
  return t;
}

}  // namespace tfckpt::s3
