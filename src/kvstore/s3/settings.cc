#include "kvstore/s3/settings.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/aws_credentials.h"
#include "kvstore/s3/gcp_auth.h"
#include "kvstore/s3/http_fetch.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

std::string Get(const EnvLookup& env, std::string_view name) { return env(name).value_or(""); }

std::string FirstSet(const EnvLookup& env, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (std::string v = Get(env, n); !v.empty()) return v;
  }
  return "";
}

// An endpoint is "http(s)://HOST[:PORT]" (a trailing '/' allowed): requests put the
// bucket and key in the path themselves.
absl::Status CheckEndpoint(const std::string& endpoint, std::string_view from) {
  const size_t sep = endpoint.find("://");
  const std::string scheme = endpoint.substr(0, sep);
  const std::string rest = sep == std::string::npos ? "" : endpoint.substr(sep + 3);
  const size_t slash = rest.find('/');
  std::string problem;
  if (scheme != "http" && scheme != "https") {
    problem = "is not an http:// or https:// URL";
  } else if (slash == 0 || rest.empty()) {
    problem = "has no host";
  } else if (slash != std::string::npos && rest.find_first_not_of('/', slash) != std::string::npos) {
    problem = "has a path (give only http(s)://HOST[:PORT])";
  } else if (rest.find_first_of(" \t\r\n?#") != std::string::npos) {
    problem = "holds a space or a query";
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(from, ": endpoint \"", RedactedUrl(endpoint), "\" ", problem));
}

std::string WithoutTrailingSlash(std::string s) {
  while (s.ends_with('/')) s.pop_back();
  return s;
}

// AWS_NO_SIGN_REQUEST: true/false (1/0), any case; empty is false.
absl::StatusOr<bool> NoSignRequest(const EnvLookup& env) {
  const std::string v = absl::AsciiStrToLower(Get(env, "AWS_NO_SIGN_REQUEST"));
  if (v.empty() || v == "false" || v == "0") return false;
  if (v == "true" || v == "1") return true;
  return absl::InvalidArgumentError(StrCat("AWS_NO_SIGN_REQUEST=", Get(env, "AWS_NO_SIGN_REQUEST"), ": not true or false"));
}

std::shared_ptr<CredentialProvider> Unsigned(std::string_view why) {
  return FixedCredentials(Credentials{}, StrCat("none: unsigned requests (", why, ")"));
}

// The CA bundle in botocore's order: AWS_CA_BUNDLE, the profile's ca_bundle (the
// `ca_bundle` config variable), REQUESTS_CA_BUNDLE (botocore's endpoint falls back to it).
// The file must be readable: a typo fails here, naming where it came from.
absl::Status ResolveCaBundle(const EnvLookup& env, const AwsContext& ctx, Settings* s) {
  if (std::string v = Get(env, "AWS_CA_BUNDLE"); !v.empty()) {
    s->ca_bundle = v;
    s->ca_bundle_from = "AWS_CA_BUNDLE";
  } else if (std::optional<std::string> c = Option(ctx.config.Profile(ctx.profile), "ca_bundle"); c && !c->empty()) {
    s->ca_bundle = *c;
    s->ca_bundle_from = StrCat("ca_bundle of profile \"", ctx.profile, "\" in ", ctx.config.config_path);
  } else if (std::string r = Get(env, "REQUESTS_CA_BUNDLE"); !r.empty()) {
    s->ca_bundle = r;
    s->ca_bundle_from = "REQUESTS_CA_BUNDLE";
  } else {
    return absl::OkStatus();
  }
  if (!Storage::Local().Exists(s->ca_bundle) || Storage::Local().IsDirectory(s->ca_bundle)) {
    return absl::InvalidArgumentError(
        StrCat(s->ca_bundle_from, ": the CA bundle \"", s->ca_bundle, "\" is not a readable file"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Settings> ResolveS3(const EnvLookup& env, const ObjectStoreOptions& flags) {
  Settings s;
  s.scheme = "s3";
  TFCKPT_ASSIGN_OR_RETURN(const bool env_no_sign, NoSignRequest(env));
  TFCKPT_ASSIGN_OR_RETURN(AwsConfig config, LoadAwsConfig(env));
  AwsContext ctx;
  ctx.env = env;
  std::string named_by;
  if (!flags.profile.empty()) {
    ctx.profile = flags.profile;
    ctx.profile_from_flag = true;
    named_by = "--profile";
  } else {
    for (const char* var : {"AWS_DEFAULT_PROFILE", "AWS_PROFILE"}) {
      if (std::string v = Get(env, var); !v.empty()) {
        ctx.profile = v;
        named_by = var;
        break;
      }
    }
  }
  if (!named_by.empty() && config.Profile(ctx.profile) == nullptr) {
    return absl::InvalidArgumentError(StrCat("profile \"", ctx.profile, "\" (", named_by, ") is in neither ",
                                             config.credentials_path, " nor ", config.config_path));
  }
  ctx.config = std::move(config);
  ctx.region = flags.region;
  if (ctx.region.empty()) ctx.region = FirstSet(env, {"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (ctx.region.empty()) ctx.region = Option(ctx.config.Profile(ctx.profile), "region").value_or("");
  s.region = ctx.region.empty() ? "us-east-1" : ctx.region;
  TFCKPT_RETURN_IF_ERROR(ResolveCaBundle(env, ctx, &s));
  ctx.ca_bundle = s.ca_bundle;

  if (flags.no_sign_request) {
    s.credentials = Unsigned("--no-sign-request");
  } else if (env_no_sign) {
    s.credentials = Unsigned("AWS_NO_SIGN_REQUEST");
  } else {
    TFCKPT_ASSIGN_OR_RETURN(s.credentials, ResolveAwsCredentials(ctx));
  }

  ConfiguredUrl endpoint{flags.endpoint_url, "--endpoint-url"};
  if (endpoint.url.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(endpoint, ConfiguredEndpoint(ctx, "s3"));
  }
  if (endpoint.url.empty()) {
    s.endpoint = StrCat("https://s3.", s.region, ".amazonaws.com");
    s.path_style = false;
    s.endpoint_follows_region = true;
  } else {
    TFCKPT_RETURN_IF_ERROR(CheckEndpoint(endpoint.url, endpoint.from));
    // (requests never send the user information a URL may carry: it is not kept, so no
    // message can show it)
    s.endpoint = WithoutTrailingSlash(RedactedUrl(endpoint.url));
    s.path_style = true;
  }
  return s;
}

absl::StatusOr<Settings> ResolveGs(const EnvLookup& env, const ObjectStoreOptions& flags) {
  Settings s;
  s.scheme = "gs";
  s.region = "auto";
  s.path_style = true;
  const std::string endpoint = Get(env, "TFCKPT_GS_ENDPOINT_URL");
  if (!endpoint.empty()) TFCKPT_RETURN_IF_ERROR(CheckEndpoint(endpoint, "TFCKPT_GS_ENDPOINT_URL"));
  s.endpoint = endpoint.empty() ? "https://storage.googleapis.com" : WithoutTrailingSlash(RedactedUrl(endpoint));
  if (flags.no_sign_request) {
    s.credentials = Unsigned("--no-sign-request");
  } else {
    TFCKPT_ASSIGN_OR_RETURN(s.credentials, ResolveGoogleCredentials(env));
  }
  return s;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

absl::StatusOr<Settings> ResolveSettings(std::string_view scheme, const EnvLookup& env, const ObjectStoreOptions& flags) {
  if (scheme == "s3") return ResolveS3(env, flags);
  if (scheme == "gs") return ResolveGs(env, flags);
  return absl::InvalidArgumentError(StrCat("unknown object store scheme \"", scheme, "\""));
}

std::string Settings::DebugString() const {
  return StrCat(scheme, ": endpoint ", endpoint, ", region ", region, ", ", path_style ? "path-style" : "virtual-hosted",
                ca_bundle.empty() ? "" : StrCat(", CA bundle ", ca_bundle, " (", ca_bundle_from, ")"),
                ", credentials from ", credentials ? credentials->Describe() : "nowhere");
}

}  // namespace tfckpt::s3
