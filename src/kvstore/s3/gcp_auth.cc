#include "kvstore/s3/gcp_auth.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/http_fetch.h"
#include "kvstore/s3/sigv4.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

using Provider = std::shared_ptr<CredentialProvider>;

constexpr uint64_t kMaxCredentialFileBytes = 1 << 20;
// A token answer without expires_in (or with one that is not a number) is kept this long.
constexpr int64_t kDefaultTokenSeconds = 300;

std::string_view Trim(std::string_view s) { return SV(absl::StripAsciiWhitespace(AV(s))); }

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;

// An RSA private key in PEM (PKCS#8 or PKCS#1); never prompts for a passphrase.
absl::StatusOr<Key> LoadRsaKey(std::string_view pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (!bio) return absl::ResourceExhaustedError("cannot read the private key");
  Key key(PEM_read_bio_PrivateKey(
      bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  if (!key) return absl::InvalidArgumentError("\"private_key\" is not a private key in PEM");
  if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) return absl::InvalidArgumentError("\"private_key\" is not an RSA key");
  return key;
}

absl::StatusOr<std::string> SignRs256(EVP_PKEY* key, std::string_view data) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t len = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return absl::InternalError("cannot sign with the private key");
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return absl::InternalError("cannot sign with the private key");
  }
  sig.resize(len);
  return sig;
}

int64_t UnixSeconds(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// POSTs a form to a token endpoint; the token and when it expires.
absl::StatusOr<Credentials> ExchangeForToken(const std::string& token_uri, const std::string& form,
                                             const std::string& what) {
  HttpRequest r;
  r.method = "POST";
  r.url = token_uri;
  r.body = form;
  r.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded");
  const SystemTime asked = std::chrono::system_clock::now();
  absl::StatusOr<HttpAnswer> answer = HttpFetch(r);
  if (!answer.ok()) return Annotate(answer.status(), what);
  absl::StatusOr<OAuthToken> token = ParseOAuthToken(answer->body);
  if (answer->status != 200 || !token.ok()) {
    const std::string why = token.ok() ? "" : StrCat(": ", token.status().message());
    const absl::StatusCode code = answer->status >= 500 ? absl::StatusCode::kUnavailable
                                  : answer->status == 200 ? absl::StatusCode::kDataLoss
                                                          : absl::StatusCode::kPermissionDenied;
    return absl::Status(code, StrCat(what, ": POST ", RedactedUrl(token_uri), ": HTTP ", answer->status, why));
  }
  Credentials c;
  c.bearer_token = token->access_token;
  c.expiration = asked + std::chrono::seconds(token->expires_in.value_or(kDefaultTokenSeconds));
  return c;
}

// A provider for a credentials file's account (service_account or authorized_user).
absl::StatusOr<Provider> FileAccount(const std::string& path, const std::string& via) {
  absl::StatusOr<std::string> text = Storage::Local().ReadSmallFile(path, kMaxCredentialFileBytes);
  if (!text.ok()) return absl::InvalidArgumentError(StrCat(via, ": ", text.status().message()));
  absl::StatusOr<GoogleCredentialsFile> file = ParseGoogleCredentialsFile(*text);
  if (!file.ok()) return absl::Status(file.status().code(), StrCat(path, ": ", file.status().message()));
  if (!SplitHttpUrl(file->token_uri).ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": \"token_uri\" is not an http(s) URL"));
  }
  const GoogleCredentialsFile account = *std::move(file);
  if (account.type == "service_account") {
    absl::StatusOr<Key> key = LoadRsaKey(account.private_key);
    if (!key.ok()) return absl::InvalidArgumentError(StrCat(path, ": ", key.status().message()));
    const std::string what = StrCat("service account ", account.client_email, " (", path, ")");
    auto fetch = [account, what]() -> absl::StatusOr<Credentials> {
      absl::StatusOr<std::string> jwt = ServiceAccountAssertion(account, kStorageScope, std::chrono::system_clock::now());
      if (!jwt.ok()) return Annotate(jwt.status(), what);
      return ExchangeForToken(account.token_uri,
                              StrCat("grant_type=", UriEncode("urn:ietf:params:oauth:grant-type:jwt-bearer", true),
                                     "&assertion=", *jwt),
                              what);
    };
    return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
  }
  const std::string what = StrCat("user credentials ", path);
  auto fetch = [account, what]() {
    return ExchangeForToken(account.token_uri,
                            StrCat("grant_type=refresh_token&client_id=", UriEncode(account.client_id, true),
                                   "&client_secret=", UriEncode(account.client_secret, true),
                                   "&refresh_token=", UriEncode(account.refresh_token, true)),
                            what);
  };
  return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
}

// The metadata server's token; when it never answered, "no credentials found" (kept: the
// server is not asked again on every request).
Provider MetadataServer(const std::string& host, const std::string& looked) {
  struct State {
    std::mutex mu;
    bool succeeded = false;
    std::optional<absl::Status> none;
  };
  auto state = std::make_shared<State>();
  const std::string url = StrCat("http://", host, "/computeMetadata/v1/instance/service-accounts/default/token");
  auto fetch = [state, url, looked]() -> absl::StatusOr<Credentials> {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->none.has_value()) return *state->none;
    HttpRequest r;
    r.url = url;
    r.headers.emplace_back("Metadata-Flavor", "Google");
    const SystemTime asked = std::chrono::system_clock::now();
    absl::StatusOr<HttpAnswer> answer = HttpFetch(r);
    absl::Status failure;
    if (!answer.ok()) {
      failure = absl::UnavailableError(StrCat("unreachable: ", answer.status().message()));
    } else if (answer->status != 200) {
      failure = absl::UnavailableError(StrCat("HTTP ", answer->status));
    } else {
      absl::StatusOr<OAuthToken> token = ParseOAuthToken(answer->body);
      if (token.ok()) {
        state->succeeded = true;
        Credentials c;
        c.bearer_token = token->access_token;
        c.expiration = asked + std::chrono::seconds(token->expires_in.value_or(kDefaultTokenSeconds));
        return c;
      }
      failure = absl::DataLossError(std::string(token.status().message()));
    }
    if (state->succeeded) return Annotate(failure, StrCat("GCE metadata server ", RedactedUrl(url)));
    state->none = absl::UnauthenticatedError(
        StrCat("no Google Cloud credentials found; looked in ", looked, "the GCE metadata server ", RedactedUrl(url), " (",
               failure.message(), ") (for a public bucket: --no-sign-request)"));
    return *state->none;
  };
  return std::make_shared<RefreshingCredentials>(fetch, StrCat("GCE metadata server ", host));
}

}  // namespace

std::string Base64Url(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& ch : out) {
    if (ch == '+') ch = '-';
    if (ch == '/') ch = '_';
  }
  return out;
}

absl::StatusOr<std::string> ServiceAccountAssertion(const GoogleCredentialsFile& account, std::string_view scope,
                                                    SystemTime now) {
  TFCKPT_ASSIGN_OR_RETURN(Key key, LoadRsaKey(account.private_key));
  nlohmann::ordered_json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (!account.private_key_id.empty()) header["kid"] = account.private_key_id;
  const int64_t iat = UnixSeconds(now);
  const nlohmann::ordered_json claims = {{"iss", account.client_email},
                                         {"scope", std::string(scope)},
                                         {"aud", account.token_uri},
                                         {"iat", iat},
                                         {"exp", iat + 3600}};
  const std::string signing_input = StrCat(Base64Url(header.dump()), ".", Base64Url(claims.dump()));
  TFCKPT_ASSIGN_OR_RETURN(const std::string signature, SignRs256(key.get(), signing_input));
  return StrCat(signing_input, ".", Base64Url(signature));
}

absl::StatusOr<std::shared_ptr<CredentialProvider>> ResolveGoogleCredentials(const EnvLookup& env) {
  auto get = [&](std::string_view name) { return env(name).value_or(""); };
  // 1. HMAC keys.
  const std::string id = get("GS_ACCESS_KEY_ID"), secret = get("GS_SECRET_ACCESS_KEY");
  if (id.empty() != secret.empty()) {
    return absl::InvalidArgumentError("GS_ACCESS_KEY_ID and GS_SECRET_ACCESS_KEY must be set together");
  }
  if (!id.empty()) {
    TFCKPT_RETURN_IF_ERROR(CheckHeaderValue(id, "GS_ACCESS_KEY_ID"));
    return FixedCredentials(Credentials{id, secret, "", "", std::nullopt}, "environment (GS_ACCESS_KEY_ID)");
  }
  // 2. An access token.
  if (const std::string token(Trim(get("GOOGLE_OAUTH_ACCESS_TOKEN"))); !token.empty()) {
    TFCKPT_RETURN_IF_ERROR(CheckHeaderValue(token, "GOOGLE_OAUTH_ACCESS_TOKEN: the access token"));
    return FixedCredentials(Credentials{"", "", "", token, std::nullopt}, "environment (GOOGLE_OAUTH_ACCESS_TOKEN)");
  }
  // 3. A file holding one.
  if (const std::string path = get("CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"); !path.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(const std::string text, Storage::Local().ReadSmallFile(path, kMaxCredentialFileBytes));
    const std::string token(Trim(text));
    if (token.empty()) return absl::InvalidArgumentError(StrCat(path, ": no access token in the file"));
    TFCKPT_RETURN_IF_ERROR(CheckHeaderValue(token, StrCat(path, ": the access token")));
    return FixedCredentials(Credentials{"", "", "", token, std::nullopt}, StrCat("access token file ", path));
  }
  // 4. GOOGLE_APPLICATION_CREDENTIALS.
  if (const std::string path = get("GOOGLE_APPLICATION_CREDENTIALS"); !path.empty()) {
    return FileAccount(path, "GOOGLE_APPLICATION_CREDENTIALS");
  }
  // 5. gcloud's application default credentials.
  std::string config_dir = get("CLOUDSDK_CONFIG");
  if (config_dir.empty()) config_dir = ExpandPath("~/.config/gcloud", env);
  const std::string adc = StrCat(config_dir, "/application_default_credentials.json");
  if (Storage::Local().IsFile(adc)) return FileAccount(adc, adc);
  // 6. The metadata server.
  std::string host = get("GCE_METADATA_HOST");
  if (host.empty()) host = "metadata.google.internal";
  if (!CheckHeaderValue(host, "").ok() || host.find_first_of("/ ") != std::string::npos) {
    return absl::InvalidArgumentError("GCE_METADATA_HOST is not HOST[:PORT]");
  }
  return MetadataServer(host, StrCat("GS_ACCESS_KEY_ID, GOOGLE_OAUTH_ACCESS_TOKEN, CLOUDSDK_AUTH_ACCESS_TOKEN_FILE, "
                                     "GOOGLE_APPLICATION_CREDENTIALS, ",
                                     adc, " (no such file), "));
}

}  // namespace tfckpt::s3
