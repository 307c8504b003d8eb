#include "kvstore/s3/aws_credentials.h"

#include <openssl/sha.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "kvstore/s3/command.h"
#include "kvstore/s3/credential_json.h"
#include "kvstore/s3/http_fetch.h"
#include "kvstore/s3/sigv4.h"
#include "kvstore/s3/xml.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

using Provider = std::shared_ptr<CredentialProvider>;
// A source's answer: nullptr when it does not apply (the next one is asked).
using SourceResult = absl::StatusOr<Provider>;

constexpr uint64_t kMaxTokenFileBytes = 1 << 20;
constexpr std::string_view kContainerHost = "http://169.254.170.2";
constexpr std::string_view kStsVersion = "2011-06-15";

std::string_view Trim(std::string_view s) { return SV(absl::StripAsciiWhitespace(AV(s))); }

std::optional<std::string> Var(const AwsContext& ctx, std::string_view name) { return ctx.env(name); }
std::string VarOr(const AwsContext& ctx, std::string_view name) { return ctx.env(name).value_or(""); }

const ConfigSection* FindIn(const std::map<std::string, ConfigSection>& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

// A setting of the environment variable `var`, else of the profile's `option`.
std::optional<std::string> Setting(const AwsContext& ctx, std::string_view var, const std::string& option) {
  if (std::optional<std::string> v = Var(ctx, var); v.has_value()) return v;
  return Option(ctx.config.Profile(ctx.profile), option);
}

std::string Sha1Hex(std::string_view s) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.data()), s.size(), digest);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string UnixSeconds() {
  return StrCat(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// Keys: id and token go into headers.
absl::Status CheckKeys(const Credentials& c, std::string_view from) {
  TFCKPT_RETURN_IF_ERROR(CheckHeaderValue(c.access_key_id, StrCat(from, ": the access key id")));
  return CheckHeaderValue(c.session_token, StrCat(from, ": the session token"));
}

// ---------------------------------------------------------------------------------------
// STS

std::string FormBody(const std::vector<QueryParam>& params) {
  std::string body;
  for (const QueryParam& p : params) StrAppend(&body, body.empty() ? "" : "&", UriEncode(p.name, true), "=", UriEncode(p.value, true));
  return body;
}

struct StsCall {
  std::string endpoint;  // "https://sts.us-east-1.amazonaws.com"
  std::string region;    // signing region
  std::string ca_bundle;
};

absl::StatusOr<StsCall> StsFor(const AwsContext& ctx) {
  StsCall call;
  call.region = ctx.region.empty() ? "us-east-1" : ctx.region;
  call.ca_bundle = ctx.ca_bundle;
  TFCKPT_ASSIGN_OR_RETURN(ConfiguredUrl configured, ConfiguredEndpoint(ctx, "sts"));
  call.endpoint = !configured.url.empty()  ? configured.url
                  : ctx.region.empty()     ? std::string("https://sts.amazonaws.com")
                                           : StrCat("https://sts.", ctx.region, ".amazonaws.com");
  return call;
}

// Sends an STS action (signed with `signer` unless null) and returns the credentials of
// its answer. Retried twice on no answer or a 5xx, as the SDKs retry.
absl::StatusOr<Credentials> CallSts(const StsCall& sts, std::vector<QueryParam> params, const Credentials* signer,
                                    const std::string& what) {
  params.insert(params.begin(), {{"Version", std::string(kStsVersion)}});
  const std::string action = params.size() > 1 ? params[1].value : "";
  const std::string body = FormBody(params);
  TFCKPT_ASSIGN_OR_RETURN(const UrlParts url, SplitHttpUrl(sts.endpoint));
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
    HttpRequest r;
    r.method = "POST";
    r.url = sts.endpoint;
    r.ca_bundle = sts.ca_bundle;
    r.body = body;
    r.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded; charset=utf-8");
    r.headers.emplace_back("Host", url.authority);  // as signed (curl would drop a default port)
    if (signer != nullptr) {
      SigningRequest s{"POST", "/", {}, {}, Sha256Hex(body)};
      s.headers.emplace_back("host", url.authority);
      s.headers.emplace_back("x-amz-date", AmzDate(std::chrono::system_clock::now()));
      if (!signer->session_token.empty()) s.headers.emplace_back("x-amz-security-token", signer->session_token);
      r.headers.emplace_back("Authorization",
                             AuthorizationHeader(s, {signer->access_key_id, signer->secret_access_key, sts.region, "sts"}));
      for (size_t i = 1; i < s.headers.size(); ++i) r.headers.push_back(s.headers[i]);
    }
    absl::StatusOr<HttpAnswer> answer = HttpFetch(r);
    if (!answer.ok()) {
      last = answer.status();
      continue;
    }
    absl::StatusOr<StsCredentials> parsed = ParseStsCredentials(answer->body);
    if (answer->status == 200 && parsed.ok()) {
      Credentials c{parsed->access_key_id, parsed->secret_access_key, parsed->session_token, "", std::nullopt};
      auto expiration = ParseIso8601(parsed->expiration);
      if (!expiration.ok()) return absl::DataLossError(StrCat(what, ": STS ", action, " at ", RedactedUrl(sts.endpoint), ": the Expiration is not an ISO 8601 time"));
      c.expiration = *expiration;
      TFCKPT_RETURN_IF_ERROR(CheckKeys(c, StrCat(what, ": STS ", action)));
      return c;
    }
    const std::string why = parsed.ok() ? "" : StrCat(": ", parsed.status().message());
    last = absl::Status(answer->status >= 500 ? absl::StatusCode::kUnavailable
                        : answer->status == 200 ? absl::StatusCode::kDataLoss
                                                : absl::StatusCode::kPermissionDenied,
                        StrCat("STS ", action, " at ", RedactedUrl(sts.endpoint), ": HTTP ", answer->status, why));
    if (answer->status < 500) break;
  }
  return Annotate(last, what);
}

// ---------------------------------------------------------------------------------------
// The sources, each: nullptr when it does not apply.

SourceResult EnvSource(const AwsContext& ctx) {
  const std::string id = VarOr(ctx, "AWS_ACCESS_KEY_ID");
  if (id.empty()) return Provider();
  if (VarOr(ctx, "AWS_SECRET_ACCESS_KEY").empty()) {
    return absl::InvalidArgumentError("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  }
  const EnvLookup env = ctx.env;
  auto read = [env]() -> absl::StatusOr<Credentials> {
    Credentials c;
    c.access_key_id = env("AWS_ACCESS_KEY_ID").value_or("");
    c.secret_access_key = env("AWS_SECRET_ACCESS_KEY").value_or("");
    c.session_token = env("AWS_SECURITY_TOKEN").value_or("");
    if (c.session_token.empty()) c.session_token = env("AWS_SESSION_TOKEN").value_or("");
    TFCKPT_RETURN_IF_ERROR(CheckKeys(c, "environment"));
    if (const std::string e = env("AWS_CREDENTIAL_EXPIRATION").value_or(""); !e.empty()) {
      auto t = ParseIso8601(e);
      if (!t.ok()) return absl::InvalidArgumentError("AWS_CREDENTIAL_EXPIRATION is not an ISO 8601 time");
      c.expiration = *t;
    }
    return c;
  };
  TFCKPT_ASSIGN_OR_RETURN(Credentials now, read());
  const std::string source = "environment (AWS_ACCESS_KEY_ID)";
  if (!now.expiration.has_value()) return FixedCredentials(std::move(now), source);
  return Provider(std::make_shared<RefreshingCredentials>(read, source));
}

// Static keys of a profile section (the credentials file's or the config file's).
SourceResult StaticKeys(const ConfigSection* section, const std::string& profile, const std::string& path) {
  std::optional<std::string> id = Option(section, "aws_access_key_id");
  if (!id.has_value()) return Provider();
  std::optional<std::string> secret = Option(section, "aws_secret_access_key");
  if (!secret.has_value()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": profile \"", profile, "\" has aws_access_key_id but no aws_secret_access_key"));
  }
  Credentials c;
  c.access_key_id = *id;
  c.secret_access_key = *secret;
  std::optional<std::string> token = Option(section, "aws_security_token");
  if (!token.has_value()) token = Option(section, "aws_session_token");
  c.session_token = token.value_or("");
  const std::string source = StrCat("profile \"", profile, "\" in ", path);
  TFCKPT_RETURN_IF_ERROR(CheckKeys(c, source));
  return FixedCredentials(std::move(c), source);
}

SourceResult SharedCredentialsSource(const AwsContext& ctx, const std::string& profile) {
  return StaticKeys(FindIn(ctx.config.credentials_file, profile), profile, ctx.config.credentials_path);
}

SourceResult ConfigFileSource(const AwsContext& ctx, const std::string& profile) {
  return StaticKeys(FindIn(ctx.config.config_profiles, profile), profile, ctx.config.config_path);
}

SourceResult ProcessSource(const AwsContext& ctx, const std::string& profile) {
  std::optional<std::string> command = Option(ctx.config.Profile(profile), "credential_process");
  if (!command.has_value()) return Provider();
  const std::string what = StrCat("credential_process of profile \"", profile, "\"");
  auto argv = ShellSplit(*command);
  if (!argv.ok()) return absl::InvalidArgumentError(StrCat(what, ": ", argv.status().message()));
  if (argv->empty()) return absl::InvalidArgumentError(StrCat(what, " is empty"));
  auto run = [argv = *argv, what]() -> absl::StatusOr<Credentials> {
    absl::StatusOr<CommandResult> r = RunCommand(argv);
    if (!r.ok()) return Annotate(r.status(), what);
    if (r->exit_code != 0) {
      // Its standard error is never shown: a helper may print a secret there (a token it
      // was refused, its own configuration). How much it wrote says where to look.
      const size_t lines = r->err.empty() ? 0 : std::count(r->err.begin(), r->err.end(), '\n') + (r->err.ends_with('\n') ? 0 : 1);
      return absl::UnauthenticatedError(StrCat(what, " (", argv[0], ") failed with exit status ", r->exit_code,
                                               lines == 0 ? " and wrote nothing on its standard error"
                                                          : StrCat(" (its standard error, ", lines, lines == 1 ? " line" : " lines",
                                                                   ", is not shown: it may hold secrets; run the command yourself to see it)")));
    }
    absl::StatusOr<Credentials> c = ParseProcessCredentials(r->out);
    if (!c.ok()) return absl::InvalidArgumentError(StrCat(what, " (", argv[0], "): its output: ", c.status().message()));
    return c;
  };
  return Provider(std::make_shared<RefreshingCredentials>(run, StrCat(what, " (", (*argv)[0], ")")));
}

SourceResult WebIdentitySource(const AwsContext& ctx, const std::string& profile, bool disable_env) {
  auto get = [&](std::string_view var, const std::string& option) -> std::optional<std::string> {
    if (!disable_env) {
      if (std::optional<std::string> v = Var(ctx, var); v.has_value()) return v;
    }
    return Option(ctx.config.Profile(profile), option);
  };
  const std::string token_file = get("AWS_WEB_IDENTITY_TOKEN_FILE", "web_identity_token_file").value_or("");
  if (token_file.empty()) return Provider();
  const std::string role_arn = get("AWS_ROLE_ARN", "role_arn").value_or("");
  if (role_arn.empty()) {
    return absl::InvalidArgumentError(
        StrCat("web identity token file ", token_file, " is configured but no role ARN (AWS_ROLE_ARN or role_arn)"));
  }
  std::string session = get("AWS_ROLE_SESSION_NAME", "role_session_name").value_or("");
  if (session.empty()) session = StrCat("tfckpt-session-", UnixSeconds());
  TFCKPT_ASSIGN_OR_RETURN(const StsCall sts, StsFor(ctx));
  const std::string what = StrCat("web identity (", role_arn, ", token file ", token_file, ")");
  auto fetch = [=]() -> absl::StatusOr<Credentials> {
    absl::StatusOr<std::string> token = Storage::Local().ReadSmallFile(token_file, kMaxTokenFileBytes);
    if (!token.ok()) return Annotate(token.status(), what);
    return CallSts(sts,
                   {{"Action", "AssumeRoleWithWebIdentity"},
                    {"RoleArn", role_arn},
                    {"RoleSessionName", session},
                    {"WebIdentityToken", *token}},
                   nullptr, what);
  };
  return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
}

SourceResult SsoSource(const AwsContext& ctx, const std::string& profile) {
  const ConfigSection* p = ctx.config.Profile(profile);
  if (!Option(p, "sso_role_name").has_value() && !Option(p, "sso_account_id").has_value()) return Provider();
  std::map<std::string, std::string> settings;
  for (const auto& [k, v] : *p) settings[k] = v.text;
  std::vector<std::string> required = {"sso_role_name", "sso_account_id", "sso_start_url", "sso_region"};
  const std::string where = StrCat("profile \"", profile, "\" in ", ctx.config.config_path);
  std::string session;
  if (auto it = settings.find("sso_session"); it != settings.end()) {
    session = it->second;
    const ConfigSection* s = FindIn(ctx.config.sso_sessions, session);
    if (s == nullptr) {
      return absl::InvalidArgumentError(StrCat(where, ": its sso_session \"", session, "\" has no [sso-session] section"));
    }
    for (const auto& [k, v] : *s) {
      auto [at, fresh] = settings.emplace(k, v.text);
      if (!fresh && at->second != v.text) {
        return absl::InvalidArgumentError(
            StrCat(where, ": ", k, " differs between the profile and its sso-session \"", session, "\""));
      }
    }
  }
  std::string missing;
  for (const std::string& k : required) {
    if (!settings.count(k)) StrAppend(&missing, missing.empty() ? "" : ", ", k);
  }
  if (!missing.empty()) return absl::InvalidArgumentError(StrCat(where, " is set up for SSO but lacks ", missing));
  const std::string account = settings["sso_account_id"], role = settings["sso_role_name"];
  const std::string region = settings["sso_region"], start_url = settings["sso_start_url"];
  const std::string cache = StrCat(ExpandPath("~/.aws/sso/cache/", ctx.env), Sha1Hex(session.empty() ? start_url : session), ".json");
  TFCKPT_ASSIGN_OR_RETURN(ConfiguredUrl configured, ConfiguredEndpoint(ctx, "sso"));
  const std::string portal =
      configured.url.empty() ? StrCat("https://portal.sso.", region, ".amazonaws.com") : configured.url;
  const std::string login = session.empty() ? StrCat("aws sso login --profile ", profile) : StrCat("aws sso login --sso-session ", session);
  const std::string what = StrCat("SSO (", where, ")");
  const std::string ca_bundle = ctx.ca_bundle;
  auto fetch = [=]() -> absl::StatusOr<Credentials> {
    absl::StatusOr<std::string> text = Storage::Local().ReadSmallFile(cache, kMaxTokenFileBytes);
    if (!text.ok()) return absl::UnauthenticatedError(StrCat(what, ": no cached SSO token (", cache, "): run ", login));
    absl::StatusOr<SsoToken> token = ParseSsoToken(*text);
    if (!token.ok()) return absl::InvalidArgumentError(StrCat(cache, ": ", token.status().message()));
    if (token->expires_at <= std::chrono::system_clock::now()) {
      return absl::UnauthenticatedError(StrCat(what, ": the cached SSO token (", cache, ") has expired: run ", login));
    }
    HttpRequest r;
    r.url = StrCat(portal, absl::EndsWith(portal, "/") ? "" : "/", "federation/credentials?account_id=", UriEncode(account, true),
                   "&role_name=", UriEncode(role, true));
    r.headers.emplace_back("x-amz-sso_bearer_token", token->access_token);
    r.ca_bundle = ca_bundle;
    absl::StatusOr<HttpAnswer> answer = HttpFetch(r);
    if (!answer.ok()) return Annotate(answer.status(), what);
    if (answer->status == 401 || answer->status == 403) {
      return absl::UnauthenticatedError(StrCat(what, ": the SSO portal refused the cached token (HTTP ", answer->status, "): run ", login));
    }
    if (answer->status != 200) return absl::UnavailableError(StrCat(what, ": GET ", RedactedUrl(r.url), ": HTTP ", answer->status));
    absl::StatusOr<Credentials> c = ParseSsoRoleCredentials(answer->body);
    if (!c.ok()) return absl::DataLossError(StrCat(what, ": GET ", RedactedUrl(r.url), ": ", c.status().message()));
    return c;
  };
  return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
}

// --- container credentials

SourceResult ContainerSource(const AwsContext& ctx) {
  const std::optional<std::string> relative = Var(ctx, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::optional<std::string> full = Var(ctx, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (!relative.has_value() && !full.has_value()) return Provider();
  std::string url;
  if (relative.has_value()) {
    url = StrCat(kContainerHost, *relative);
  } else {
    url = *full;
    absl::StatusOr<UrlParts> parts = SplitHttpUrl(url);
    if (!parts.ok()) return absl::InvalidArgumentError(StrCat("AWS_CONTAINER_CREDENTIALS_FULL_URI: ", parts.status().message()));
    const std::string& h = parts->host;
    if (parts->scheme != "https" && !IsLoopbackAddress(h) && h != "169.254.170.2" && h != "169.254.170.23" &&
        h != "fd00:ec2::23" && h != "localhost") {
      return absl::InvalidArgumentError(
          StrCat("AWS_CONTAINER_CREDENTIALS_FULL_URI: host \"", h,
                 "\" is not allowed over http (https, a loopback address, 169.254.170.2, 169.254.170.23, "
                 "fd00:ec2::23 or localhost)"));
    }
  }
  const std::optional<std::string> token_file = Var(ctx, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  const std::optional<std::string> token = Var(ctx, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  const std::string what = StrCat("container credentials ", RedactedUrl(url));
  auto fetch = [=]() -> absl::StatusOr<Credentials> {
    HttpRequest r;
    r.url = url;
    r.timeout_ms = 2000;
    r.headers.emplace_back("Accept", "application/json");
    std::optional<std::string> auth = token;
    if (token_file.has_value()) {
      absl::StatusOr<std::string> text = Storage::Local().ReadSmallFile(*token_file, kMaxTokenFileBytes);
      if (!text.ok()) return Annotate(text.status(), StrCat(what, ": AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"));
      auth = std::string(SV(absl::StripTrailingAsciiWhitespace(*text)));
    }
    if (auth.has_value()) {
      if (!CheckHeaderValue(*auth, "").ok()) {
        return absl::InvalidArgumentError(StrCat(what, ": the authorization token holds a control character"));
      }
      r.headers.emplace_back("Authorization", *auth);
    }
    absl::Status last;
    for (int attempt = 0; attempt < 3; ++attempt) {  // botocore: 3 tries, 1 s apart
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
      absl::StatusOr<HttpAnswer> answer = HttpFetch(r);
      if (!answer.ok()) {
        last = Annotate(answer.status(), what);
        continue;
      }
      if (answer->status != 200) {
        last = absl::UnavailableError(StrCat(what, ": HTTP ", answer->status));
        continue;
      }
      absl::StatusOr<Credentials> c = ParseMetadataCredentials(answer->body);
      if (!c.ok()) return absl::DataLossError(StrCat(what, ": ", c.status().message()));
      return c;
    }
    return last;
  };
  return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
}

// --- EC2 instance metadata

struct Imds {
  std::string base;  // ends in '/'
  bool v1_disabled = false;
  long timeout_ms = 1000;
  int attempts = 1;
};

absl::StatusOr<Imds> ImdsFor(const AwsContext& ctx) {
  Imds m;
  std::string base = Setting(ctx, "AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint").value_or("");
  if (base.empty()) {
    std::string mode = Setting(ctx, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode").value_or("");
    if (mode.empty() && AwsTrue(Setting(ctx, "AWS_IMDS_USE_IPV6", "imds_use_ipv6").value_or(""))) mode = "ipv6";
    base = absl::AsciiStrToLower(mode) == "ipv6" ? "http://[fd00:ec2::254]/" : "http://169.254.169.254/";
  }
  if (!SplitHttpUrl(base).ok()) {
    return absl::InvalidArgumentError(StrCat("instance metadata endpoint \"", RedactedUrl(base), "\" is not an http(s) URL"));
  }
  if (!absl::EndsWith(base, "/")) base += "/";
  m.base = base;
  m.v1_disabled = AwsTrue(Setting(ctx, "AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled").value_or(""));
  int seconds = 1, attempts = 1;
  if (auto t = Setting(ctx, "AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout"); t && !t->empty()) {
    if (!absl::SimpleAtoi(*t, &seconds) || seconds < 1 || seconds > 3600) {
      return absl::InvalidArgumentError("AWS_METADATA_SERVICE_TIMEOUT / metadata_service_timeout is not a whole number of seconds");
    }
  }
  if (auto a = Setting(ctx, "AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts"); a && !a->empty()) {
    if (!absl::SimpleAtoi(*a, &attempts) || attempts < 1 || attempts > 100) {
      return absl::InvalidArgumentError("AWS_METADATA_SERVICE_NUM_ATTEMPTS / metadata_service_num_attempts is not a whole number");
    }
  }
  m.timeout_ms = seconds * 1000L;
  m.attempts = attempts;
  return m;
}

// The instance's role credentials; NotFound when there are none to be had (no answer,
// no role, a malformed answer), which the chain reports as "no credentials".
absl::StatusOr<Credentials> FetchImds(const Imds& m) {
  auto request = [&](std::string method, std::string path) {
    HttpRequest r;
    r.method = std::move(method);
    r.url = m.base + path;
    r.connect_timeout_ms = m.timeout_ms;
    r.timeout_ms = m.timeout_ms;
    return r;
  };
  // IMDSv2: a session token for the requests that follow.
  std::string token;
  bool token_refused = false;
  absl::Status last;
  for (int i = 0; i < m.attempts && token.empty() && !token_refused; ++i) {
    HttpRequest r = request("PUT", "latest/api/token");
    r.headers.emplace_back("x-aws-ec2-metadata-token-ttl-seconds", "21600");
    absl::StatusOr<HttpAnswer> a = HttpFetch(r);
    if (!a.ok()) {
      last = a.status();
      continue;
    }
    if (a->status == 200) {
      token = a->body;
    } else if (a->status == 403 || a->status == 404 || a->status == 405) {
      token_refused = true;
    } else if (a->status == 400) {
      return absl::NotFoundError(StrCat("PUT ", RedactedUrl(r.url), ": HTTP 400"));
    } else {
      last = absl::UnavailableError(StrCat("PUT ", RedactedUrl(r.url), ": HTTP ", a->status));
    }
  }
  if (!token.empty() && !CheckHeaderValue(token, "").ok()) return absl::NotFoundError("the IMDSv2 token is not a header value");
  if (token.empty()) {
    if (!token_refused && !last.ok()) return absl::NotFoundError(last.message());
    if (m.v1_disabled) {
      return absl::UnauthenticatedError(
          StrCat("instance metadata ", RedactedUrl(m.base), ": no IMDSv2 token and IMDSv1 is disabled (AWS_EC2_METADATA_V1_DISABLED)"));
    }
  }
  auto get = [&](const std::string& path) -> absl::StatusOr<std::string> {
    absl::Status failure = absl::NotFoundError(StrCat("GET ", RedactedUrl(m.base), path, ": no answer"));
    for (int i = 0; i < m.attempts; ++i) {
      HttpRequest r = request("GET", path);
      if (!token.empty()) r.headers.emplace_back("x-aws-ec2-metadata-token", token);
      absl::StatusOr<HttpAnswer> a = HttpFetch(r);
      if (!a.ok()) {
        failure = absl::NotFoundError(a.status().message());
        continue;
      }
      if (a->status != 200 || a->body.empty()) {
        failure = absl::NotFoundError(StrCat("GET ", RedactedUrl(r.url), ": HTTP ", a->status, a->body.empty() ? " (empty)" : ""));
        continue;
      }
      return a->body;
    }
    return failure;
  };
  TFCKPT_ASSIGN_OR_RETURN(std::string role, get("latest/meta-data/iam/security-credentials/"));
  role = std::string(Trim(role));
  if (role.find_first_of("/\r\n") != std::string::npos || !CheckHeaderValue(role, "").ok()) {
    return absl::NotFoundError(StrCat("instance metadata ", RedactedUrl(m.base), ": the role name is not a single name"));
  }
  TFCKPT_ASSIGN_OR_RETURN(const std::string body, get(StrCat("latest/meta-data/iam/security-credentials/", role)));
  absl::StatusOr<Credentials> c = ParseMetadataCredentials(body);
  if (!c.ok()) return absl::NotFoundError(StrCat("instance metadata ", RedactedUrl(m.base), " role ", role, ": ", c.status().message()));
  return c;
}

// The IMDS provider: `none_message` is the error when the instance has no credentials
// (an error that stays: the metadata service is not asked again on every request).
Provider ImdsProvider(const Imds& m, std::string none_message, std::string hint = "") {
  struct State {
    std::mutex mu;
    bool succeeded = false;
    std::optional<absl::Status> none;
  };
  auto state = std::make_shared<State>();
  auto fetch = [m, state, none_message, hint]() -> absl::StatusOr<Credentials> {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->none.has_value()) return *state->none;
    absl::StatusOr<Credentials> c = FetchImds(m);
    if (c.ok()) {
      state->succeeded = true;
      return c;
    }
    const std::string what = StrCat("EC2 instance metadata ", RedactedUrl(m.base));
    if (!state->succeeded && absl::IsNotFound(c.status())) {
      state->none = absl::UnauthenticatedError(StrCat(none_message, what, " (", c.status().message(), ")", hint));
      return *state->none;
    }
    return Annotate(c.status(), what);
  };
  return std::make_shared<RefreshingCredentials>(fetch, StrCat("EC2 instance metadata ", RedactedUrl(m.base)));
}

// ---------------------------------------------------------------------------------------
// The chain.

class Chain {
 public:
  explicit Chain(const AwsContext& ctx) : ctx_(ctx) { visited_.push_back(ctx.profile); }

  // Sources 2-7 for `profile` (botocore's profile providers, with the assume-role
  // provider in front of them for the top-level profile).
  SourceResult ProfileSources(const std::string& profile, bool disable_env, bool with_assume_role) {
    if (with_assume_role) {
      TFCKPT_ASSIGN_OR_RETURN(Provider p, AssumeRoleSource(profile));
      if (p) return p;
    }
    for (auto source : {&Chain::WebIdentity, &Chain::Sso, &Chain::SharedCredentials, &Chain::Process, &Chain::ConfigFile}) {
      TFCKPT_ASSIGN_OR_RETURN(Provider p, (this->*source)(profile, disable_env));
      if (p) return p;
    }
    return Provider();
  }

  SourceResult WebIdentity(const std::string& p, bool disable_env) { return WebIdentitySource(ctx_, p, disable_env); }
  SourceResult Sso(const std::string& p, bool) { return SsoSource(ctx_, p); }
  SourceResult SharedCredentials(const std::string& p, bool) { return SharedCredentialsSource(ctx_, p); }
  SourceResult Process(const std::string& p, bool) { return ProcessSource(ctx_, p); }
  SourceResult ConfigFile(const std::string& p, bool) { return ConfigFileSource(ctx_, p); }

  static bool HasStatic(const ConfigSection* p) {
    return Option(p, "aws_access_key_id").has_value() || Option(p, "aws_secret_access_key").has_value();
  }
  static bool HasAssumeRole(const ConfigSection* p) {
    return Option(p, "role_arn").has_value() && !Option(p, "web_identity_token_file").has_value();
  }

  SourceResult AssumeRoleSource(const std::string& profile) {
    const ConfigSection* p = ctx_.config.Profile(profile);
    if (!HasAssumeRole(p)) return Provider();
    const std::string where = StrCat("profile \"", profile, "\"");
    const std::string role_arn = *Option(p, "role_arn");
    const std::optional<std::string> source_profile = Option(p, "source_profile");
    const std::optional<std::string> credential_source = Option(p, "credential_source");
    if (source_profile.has_value() && credential_source.has_value()) {
      return absl::InvalidArgumentError(StrCat(where, " has both source_profile and credential_source"));
    }
    if (!source_profile.has_value() && !credential_source.has_value()) {
      return absl::InvalidArgumentError(StrCat(where, " has role_arn but neither source_profile nor credential_source"));
    }
    if (Option(p, "mfa_serial").has_value()) {
      return absl::UnimplementedError(StrCat(where, " needs an MFA code (mfa_serial), which tfckpt cannot ask for: "
                                                    "use credentials that need none (e.g. a credential_process)"));
    }
    Provider source;
    if (credential_source.has_value()) {
      const std::string name = absl::AsciiStrToLower(*credential_source);
      if (name == "environment") {
        TFCKPT_ASSIGN_OR_RETURN(source, EnvSource(ctx_));
      } else if (name == "ecscontainer") {
        TFCKPT_ASSIGN_OR_RETURN(source, ContainerSource(ctx_));
      } else if (name == "ec2instancemetadata") {
        TFCKPT_ASSIGN_OR_RETURN(const Imds m, ImdsFor(ctx_));
        if (!AwsTrue(VarOr(ctx_, "AWS_EC2_METADATA_DISABLED"))) {
          source = ImdsProvider(m, StrCat("no credentials in the credential_source of ", where, ": "));
        }
      } else {
        return absl::InvalidArgumentError(StrCat(where, ": credential_source \"", *credential_source,
                                                 "\" is not Environment, Ec2InstanceMetadata or EcsContainer"));
      }
      if (!source) {
        return absl::InvalidArgumentError(StrCat(where, ": no credentials in its credential_source ", *credential_source));
      }
    } else {
      const std::string& sp = *source_profile;
      const ConfigSection* src = ctx_.config.Profile(sp);
      if (src == nullptr) {
        return absl::InvalidArgumentError(StrCat(where, ": its source_profile \"", sp, "\" does not exist"));
      }
      if (std::find(visited_.begin(), visited_.end(), sp) != visited_.end() && (sp != profile || !HasStatic(src))) {
        return absl::InvalidArgumentError(StrCat(where, ": its source_profile \"", sp, "\" leads back to a profile already used (a loop)"));
      }
      visited_.push_back(sp);
      if (HasStatic(src) || !HasAssumeRole(src)) {
        TFCKPT_ASSIGN_OR_RETURN(source, ProfileSources(sp, /*disable_env=*/true, /*with_assume_role=*/false));
        if (!source) return absl::InvalidArgumentError(StrCat(where, ": its source_profile \"", sp, "\" has no credentials"));
      } else {
        TFCKPT_ASSIGN_OR_RETURN(source, AssumeRoleSource(sp));
      }
    }
    std::vector<QueryParam> params = {{"Action", "AssumeRole"}, {"RoleArn", role_arn}};
    std::string session = Option(p, "role_session_name").value_or("");
    if (session.empty()) session = StrCat("tfckpt-session-", UnixSeconds());
    params.push_back({"RoleSessionName", session});
    if (auto id = Option(p, "external_id")) params.push_back({"ExternalId", *id});
    int duration = 0;
    if (auto d = Option(p, "duration_seconds"); d && absl::SimpleAtoi(*d, &duration)) {
      params.push_back({"DurationSeconds", StrCat(duration)});
    }
    TFCKPT_ASSIGN_OR_RETURN(const StsCall sts, StsFor(ctx_));
    const std::string what = StrCat("role ", role_arn, " of ", where, " (via ", source->Describe(), ")");
    auto fetch = [sts, params, source, what]() -> absl::StatusOr<Credentials> {
      TFCKPT_ASSIGN_OR_RETURN(const Credentials src, source->Get());
      return CallSts(sts, params, &src, what);
    };
    return Provider(std::make_shared<RefreshingCredentials>(fetch, what));
  }

  absl::StatusOr<Provider> Resolve() {
    std::vector<std::string> looked;
    if (!ctx_.profile_from_flag) {
      TFCKPT_ASSIGN_OR_RETURN(Provider p, EnvSource(ctx_));
      if (p) return p;
      looked.push_back("the environment (AWS_ACCESS_KEY_ID)");
    }
    TFCKPT_ASSIGN_OR_RETURN(Provider p, ProfileSources(ctx_.profile, ctx_.profile_from_flag, true));
    if (p) return p;
    looked.push_back(StrCat("profile \"", ctx_.profile, "\" in ", ctx_.config.credentials_path,
                            ctx_.config.credentials_found ? "" : " (no such file)", " and ", ctx_.config.config_path,
                            ctx_.config.config_found ? "" : " (no such file)"));
    looked.push_back("web identity (AWS_WEB_IDENTITY_TOKEN_FILE)");
    TFCKPT_ASSIGN_OR_RETURN(p, ContainerSource(ctx_));
    if (p) return p;
    looked.push_back("container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, _FULL_URI)");
    std::string message = "no AWS credentials found; looked in ";
    for (const std::string& l : looked) StrAppend(&message, l, ", ");
    const std::string hint = " (for a public bucket: --no-sign-request or AWS_NO_SIGN_REQUEST=true)";
    if (AwsTrue(VarOr(ctx_, "AWS_EC2_METADATA_DISABLED"))) {
      return NoCredentials(StrCat(message, "EC2 instance metadata (disabled by AWS_EC2_METADATA_DISABLED)", hint),
                           "none found");
    }
    TFCKPT_ASSIGN_OR_RETURN(const Imds m, ImdsFor(ctx_));
    return ImdsProvider(m, message, hint);
  }

 private:
  const AwsContext& ctx_;
  std::vector<std::string> visited_;
};

}  // namespace

bool AwsTrue(std::string_view value) { return absl::AsciiStrToLower(AV(value)) == "true"; }

absl::StatusOr<ConfiguredUrl> ConfiguredEndpoint(const AwsContext& ctx, std::string_view service) {
  const ConfigSection* profile = ctx.config.Profile(ctx.profile);
  if (AwsTrue(Setting(ctx, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "ignore_configured_endpoint_urls").value_or(""))) {
    return ConfiguredUrl{};
  }
  const std::string service_var = StrCat("AWS_ENDPOINT_URL_", absl::AsciiStrToUpper(AV(service)));
  for (const std::string& var : {service_var, std::string("AWS_ENDPOINT_URL")}) {
    if (std::string v = VarOr(ctx, var); !v.empty()) return ConfiguredUrl{v, var};
  }
  if (std::optional<std::string> name = Option(profile, "services"); name.has_value()) {
    const ConfigSection* services = FindIn(ctx.config.services, *name);
    if (services == nullptr) {
      return absl::InvalidArgumentError(StrCat(ctx.config.config_path, ": profile \"", ctx.profile,
                                               "\" names the services section \"", *name, "\", which does not exist"));
    }
    auto it = services->find(std::string(service));
    if (it != services->end() && it->second.is_nested) {
      auto url = it->second.nested.find("endpoint_url");
      if (url != it->second.nested.end() && !url->second.empty()) {
        return ConfiguredUrl{url->second, StrCat("[services ", *name, "] in ", ctx.config.config_path)};
      }
    }
  }
  if (std::optional<std::string> url = Option(profile, "endpoint_url"); url.has_value() && !url->empty()) {
    return ConfiguredUrl{*url, StrCat("profile \"", ctx.profile, "\" in ", ctx.config.config_path)};
  }
  return ConfiguredUrl{};
}

absl::StatusOr<std::shared_ptr<CredentialProvider>> ResolveAwsCredentials(const AwsContext& ctx) {
  Chain chain(ctx);
  return chain.Resolve();
}

}  // namespace tfckpt::s3
