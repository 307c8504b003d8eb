#include "kvstore/s3/settings.h"

#include <cstdlib>
#include <map>

#include "absl/strings/ascii.h"
#include "tfckpt/storage.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::s3 {
namespace {

// Credential and config files are a few lines: one larger than this is not read.
constexpr uint64_t kMaxCredentialFileBytes = 16 << 20;

using Section = std::map<std::string, std::string>;
using IniFile = std::map<std::string, Section>;

std::string_view Trim(std::string_view s) { return SV(absl::StripAsciiWhitespace(AV(s))); }

// AWS CLI style INI: "[section]" lines, "name = value" lines, '#'/';' comments.
// Errors name the file and line, never a value.
absl::StatusOr<IniFile> ParseIni(std::string_view text, std::string_view path) {
  IniFile out;
  std::string section;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') return absl::InvalidArgumentError(StrCat(path, ":", line_no, ": unterminated section"));
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || section.empty()) {
      return absl::InvalidArgumentError(StrCat(path, ":", line_no, ": expected [section] or name = value"));
    }
    out[section][std::string(Trim(line.substr(0, eq)))] = std::string(Trim(line.substr(eq + 1)));
  }
  return out;
}

// The parsed file, or nullopt when it does not exist.
absl::StatusOr<std::optional<IniFile>> ReadIni(const std::string& path) {
  if (!Storage::Local().Exists(path)) return std::optional<IniFile>();
  TFCKPT_ASSIGN_OR_RETURN(const std::string text, Storage::Local().ReadSmallFile(path, kMaxCredentialFileBytes));
  TFCKPT_ASSIGN_OR_RETURN(IniFile ini, ParseIni(text, path));
  return std::optional<IniFile>(std::move(ini));
}

std::string Get(const EnvLookup& env, std::string_view name) { return env(name).value_or(""); }

std::string FirstSet(const EnvLookup& env, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (std::string v = Get(env, n); !v.empty()) return v;
  }
  return "";
}

std::string HomeFile(const EnvLookup& env, std::string_view override_var, std::string_view name) {
  if (std::string p = Get(env, override_var); !p.empty()) return p;
  return StrCat(Get(env, "HOME"), "/.aws/", name);
}

std::string ValueOf(const Section* s, const std::string& name) {
  if (s == nullptr) return "";
  auto it = s->find(name);
  return it == s->end() ? "" : it->second;
}

absl::Status KeyPair(const EnvLookup& env, std::string_view id_var, std::string_view secret_var, Credentials* c) {
  c->access_key_id = Get(env, id_var);
  c->secret_access_key = Get(env, secret_var);
  if (c->access_key_id.empty() != c->secret_access_key.empty()) {
    return absl::InvalidArgumentError(StrCat(id_var, " and ", secret_var, " must be set together"));
  }
  if (c->has_keys()) c->source = StrCat("environment (", id_var, ")");
  return absl::OkStatus();
}

absl::Status ProfileCredentials(const EnvLookup& env, const std::string& profile, bool profile_named, Credentials* c) {
  const std::string path = HomeFile(env, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  TFCKPT_ASSIGN_OR_RETURN(std::optional<IniFile> ini, ReadIni(path));
  const Section* s = nullptr;
  if (ini.has_value()) {
    auto it = ini->find(profile);
    if (it != ini->end()) s = &it->second;
  }
  if (s == nullptr) {
    if (profile_named) return absl::InvalidArgumentError(StrCat("AWS_PROFILE \"", profile, "\" is not in ", path));
    return absl::OkStatus();
  }
  c->access_key_id = ValueOf(s, "aws_access_key_id");
  c->secret_access_key = ValueOf(s, "aws_secret_access_key");
  c->session_token = ValueOf(s, "aws_session_token");
  if (c->access_key_id.empty() || c->secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": profile \"", profile, "\" needs both aws_access_key_id and aws_secret_access_key"));
  }
  c->source = StrCat("profile \"", profile, "\" in ", path);
  return absl::OkStatus();
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
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(from, ": endpoint \"", endpoint, "\" ", problem));
}

std::string WithoutTrailingSlash(std::string s) {
  while (s.ends_with('/')) s.pop_back();
  return s;
}

absl::StatusOr<Settings> ResolveS3(const EnvLookup& env) {
  Settings s;
  s.scheme = "s3";
  TFCKPT_RETURN_IF_ERROR(KeyPair(env, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", &s.credentials));
  const std::string named_profile = Get(env, "AWS_PROFILE");
  const std::string profile = named_profile.empty() ? "default" : named_profile;
  if (s.credentials.has_keys()) {
    s.credentials.session_token = Get(env, "AWS_SESSION_TOKEN");
  } else {
    TFCKPT_RETURN_IF_ERROR(ProfileCredentials(env, profile, !named_profile.empty(), &s.credentials));
  }
  if (s.credentials.anonymous()) s.credentials.source = "none (unsigned requests)";

  const std::string config_path = HomeFile(env, "AWS_CONFIG_FILE", "config");
  TFCKPT_ASSIGN_OR_RETURN(std::optional<IniFile> config, ReadIni(config_path));
  const Section* section = nullptr;
  if (config.has_value()) {
    auto it = config->find(profile == "default" ? profile : StrCat("profile ", profile));
    if (it != config->end()) section = &it->second;
  }
  s.region = FirstSet(env, {"AWS_REGION", "AWS_DEFAULT_REGION"});
  if (s.region.empty()) s.region = ValueOf(section, "region");
  if (s.region.empty()) s.region = "us-east-1";

  std::string endpoint = FirstSet(env, {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  std::string from = "AWS_ENDPOINT_URL";
  if (endpoint.empty()) {
    endpoint = ValueOf(section, "endpoint_url");
    from = config_path;
  }
  if (endpoint.empty()) {
    s.endpoint = StrCat("https://s3.", s.region, ".amazonaws.com");
    s.path_style = false;
  } else {
    TFCKPT_RETURN_IF_ERROR(CheckEndpoint(endpoint, from));
    s.endpoint = WithoutTrailingSlash(endpoint);
    s.path_style = true;
  }
  return s;
}

// A token goes into a header: no control characters (never printed: it is a secret).
absl::Status CheckToken(const std::string& token, std::string_view from) {
  for (unsigned char ch : token) {
    if (ch < 0x20 || ch == 0x7f)
      return absl::InvalidArgumentError(StrCat(from, ": the access token holds a control character"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Settings> ResolveGs(const EnvLookup& env) {
  Settings s;
  s.scheme = "gs";
  s.region = "auto";
  s.path_style = true;
  const std::string endpoint = Get(env, "TFCKPT_GS_ENDPOINT_URL");
  if (!endpoint.empty()) TFCKPT_RETURN_IF_ERROR(CheckEndpoint(endpoint, "TFCKPT_GS_ENDPOINT_URL"));
  s.endpoint = endpoint.empty() ? "https://storage.googleapis.com" : WithoutTrailingSlash(endpoint);

  Credentials& c = s.credentials;
  TFCKPT_RETURN_IF_ERROR(KeyPair(env, "GS_ACCESS_KEY_ID", "GS_SECRET_ACCESS_KEY", &c));
  if (c.has_keys()) return s;
  c.bearer_token = std::string(Trim(Get(env, "GOOGLE_OAUTH_ACCESS_TOKEN")));
  if (!c.bearer_token.empty()) {
    TFCKPT_RETURN_IF_ERROR(CheckToken(c.bearer_token, "GOOGLE_OAUTH_ACCESS_TOKEN"));
    c.source = "environment (GOOGLE_OAUTH_ACCESS_TOKEN)";
    return s;
  }
  if (const std::string path = Get(env, "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE"); !path.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(const std::string text, Storage::Local().ReadSmallFile(path, kMaxCredentialFileBytes));
    c.bearer_token = std::string(Trim(text));
    if (c.bearer_token.empty()) return absl::InvalidArgumentError(StrCat(path, ": no access token in the file"));
    TFCKPT_RETURN_IF_ERROR(CheckToken(c.bearer_token, path));
    c.source = StrCat("access token file ", path);
    return s;
  }
  c.metadata_host = Get(env, "GCE_METADATA_HOST");
  if (c.metadata_host.empty()) c.metadata_host = "metadata.google.internal";
  c.source = StrCat("GCE metadata server ", c.metadata_host);
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

absl::StatusOr<Settings> ResolveSettings(std::string_view scheme, const EnvLookup& env) {
  if (scheme == "s3") return ResolveS3(env);
  if (scheme == "gs") return ResolveGs(env);
  return absl::InvalidArgumentError(StrCat("unknown object store scheme \"", scheme, "\""));
}

std::string Settings::DebugString() const {
  const Credentials& c = credentials;
  std::string who = "anonymous";
  if (c.has_keys()) {
    const std::string& id = c.access_key_id;
    who = StrCat("access key ****", id.size() > 4 ? id.substr(id.size() - 4) : std::string(),
                 c.session_token.empty() ? "" : " with session token");
  } else if (!c.bearer_token.empty()) {
    who = "bearer token";
  } else if (!c.metadata_host.empty()) {
    who = "token from the metadata server";
  }
  return StrCat(scheme, ": endpoint ", endpoint, ", region ", region, ", ",
                path_style ? "path-style" : "virtual-hosted", ", credentials: ", who, " from ", c.source);
}

}  // namespace tfckpt::s3
