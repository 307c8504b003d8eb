// The AWS shared config and credentials files (aws_config.h, as botocore reads them), and the
// credential chain's decisions on them (aws_credentials.h): profiles, role chains, SSO,
// services sections, credential_process command lines split into words. Input:
// "CONFIG\0CREDENTIALS". Only resolution runs: no credentials are fetched, no process is
// started and no request is sent (the providers are never asked).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "fuzz_util.h"
#include "kvstore/s3/aws_config.h"
#include "kvstore/s3/settings.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfckpt::s3;
  auto [config, credentials] = tfckpt::fuzz::SplitOnce({reinterpret_cast<const char*>(data), size}, '\0');
  auto c = ParseAwsIni(config, "config");
  auto k = ParseAwsIni(credentials, "credentials");
  (void)ShellSplit(config);
  if (!c.ok() || !k.ok()) return 0;
  const AwsConfig combined = CombineAwsConfig(*c, *k);
  const std::string& dir = tfckpt::fuzz::ScratchDir();
  tfckpt::fuzz::WriteFile(dir + "/config", config);
  tfckpt::fuzz::WriteFile(dir + "/credentials", credentials);
  std::map<std::string, std::string> vars = {{"HOME", dir},
                                             {"AWS_CONFIG_FILE", dir + "/config"},
                                             {"AWS_SHARED_CREDENTIALS_FILE", dir + "/credentials"},
                                             {"AWS_EC2_METADATA_DISABLED", "true"}};
  const EnvLookup env = [&](std::string_view n) -> std::optional<std::string> {
    auto it = vars.find(std::string(n));
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  int profiles = 0;
  for (const auto& [name, section] : combined.profiles) {
    if (++profiles > 8) break;
    tfckpt::ObjectStoreOptions flags;
    flags.profile = name;
    if (auto s = ResolveSettings("s3", env, flags); s.ok()) (void)s->DebugString();
  }
  (void)ResolveSettings("s3", env);
  return 0;
}
