// Test helper: what the library resolves for an object store, from this process's
// environment and files, printed as one JSON line (for tests/credentials_oracle_test.py,
// which compares it with botocore's resolution). Never a secret: the secret key and the
// session token only by their SHA-256.
//
//   s3_resolve SCHEME [--profile P] [--region R] [--endpoint-url U] [--no-sign-request]
//       {"access_key_id", "secret_sha256", "token_sha256", "bearer_sha256", "region",
//        "endpoint", "path_style", "source", "expires_in"} or {"error": MESSAGE}
//   s3_resolve ini CONFIG CREDENTIALS
//       the two files combined as botocore's Session.full_config: {"profiles",
//       "sso_sessions", "services"} (nested blocks as objects) or {"error": MESSAGE}
// Exit 0 (the error, if any, is in the JSON).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/sigv4.h"
#include "tfckpt/storage.h"

namespace {

using nlohmann::json;
using namespace tfckpt::s3;

json Sections(const std::map<std::string, ConfigSection>& sections) {
  json out = json::object();
  for (const auto& [name, section] : sections) {
    json s = json::object();
    for (const auto& [option, value] : section) {
      if (value.is_nested) {
        s[option] = value.nested;
      } else {
        s[option] = value.text;
      }
    }
    out[name] = s;
  }
  return out;
}

json Ini(const std::string& config, const std::string& credentials) {
  EnvLookup env = [&](std::string_view name) -> std::optional<std::string> {
    if (name == "AWS_CONFIG_FILE") return config;
    if (name == "AWS_SHARED_CREDENTIALS_FILE") return credentials;
    return std::nullopt;
  };
  absl::StatusOr<AwsConfig> c = LoadAwsConfig(env);
  if (!c.ok()) return {{"error", std::string(c.status().message())}};
  return {{"profiles", Sections(c->profiles)}, {"sso_sessions", Sections(c->sso_sessions)},
          {"services", Sections(c->services)}};
}

json Resolve(const std::string& scheme, const tfckpt::ObjectStoreOptions& flags) {
  absl::StatusOr<Settings> s = ResolveSettings(scheme, ProcessEnv(), flags);
  if (!s.ok()) return {{"error", std::string(s.status().message())}};
  json out = {{"region", s->region}, {"endpoint", s->endpoint}, {"path_style", s->path_style},
              {"source", s->credentials->Describe()}};
  absl::StatusOr<Credentials> c = s->credentials->Get();
  if (!c.ok()) {
    out["error"] = std::string(c.status().message());
    return out;
  }
  out["access_key_id"] = c->access_key_id;
  out["secret_sha256"] = c->secret_access_key.empty() ? "" : Sha256Hex(c->secret_access_key);
  out["token_sha256"] = c->session_token.empty() ? "" : Sha256Hex(c->session_token);
  out["bearer_sha256"] = c->bearer_token.empty() ? "" : Sha256Hex(c->bearer_token);
  if (c->expiration.has_value()) {
    out["expires_in"] =
        std::chrono::duration_cast<std::chrono::seconds>(*c->expiration - std::chrono::system_clock::now()).count();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 3 && args[0] == "ini") {
    std::printf("%s\n", Ini(args[1], args[2]).dump().c_str());
    return 0;
  }
  if (args.empty()) {
    std::fprintf(stderr, "usage: s3_resolve SCHEME [--profile P] [--region R] [--endpoint-url U] [--no-sign-request]\n"
                         "       s3_resolve ini CONFIG CREDENTIALS\n");
    return 2;
  }
  tfckpt::ObjectStoreOptions flags;
  for (size_t i = 1; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if (args[i] == "--profile" && has_value) {
      flags.profile = args[++i];
    } else if (args[i] == "--region" && has_value) {
      flags.region = args[++i];
    } else if (args[i] == "--endpoint-url" && has_value) {
      flags.endpoint_url = args[++i];
    } else if (args[i] == "--no-sign-request") {
      flags.no_sign_request = true;
    } else {
      std::fprintf(stderr, "s3_resolve: unknown argument %s\n", args[i].c_str());
      return 2;
    }
  }
  std::printf("%s\n", Resolve(args[0], flags).dump().c_str());
  return 0;
}
