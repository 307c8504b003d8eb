// URLs users and configurations give: object URLs (url.h) and endpoint URLs (the settings'
// checks, SplitHttpUrl, the loopback test of container credentials). Input: "OBJECT_URL\n
// ENDPOINT". An object URL that parses prints back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "fuzz_util.h"
#include "kvstore/s3/http_fetch.h"
#include "kvstore/s3/settings.h"
#include "kvstore/s3/url.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tfckpt::s3;
  auto [url, endpoint] = tfckpt::fuzz::SplitOnce({reinterpret_cast<const char*>(data), size}, '\n');
  if (auto u = ParseObjectUrl(url); u.ok()) {
    auto again = ParseObjectUrl(u->ToString());
    if (!again.ok() || again->scheme != u->scheme || again->bucket != u->bucket || again->key != u->key) std::abort();
  }
  (void)IsObjectUrl(url);
  (void)SplitHttpUrl(endpoint);
  (void)IsLoopbackAddress(endpoint);
  if (endpoint.find('\0') == std::string_view::npos) {
    // As AWS_ENDPOINT_URL / TFCKPT_GS_ENDPOINT_URL / AWS_CONTAINER_CREDENTIALS_FULL_URI:
    // files and the environment only (no credentials fetched, no request sent).
    const std::map<std::string, std::string> vars = {
        {"HOME", "/nonexistent"}, {"AWS_EC2_METADATA_DISABLED", "true"}, {"AWS_ACCESS_KEY_ID", "AKID"},
        {"AWS_SECRET_ACCESS_KEY", "s"}, {"AWS_ENDPOINT_URL", std::string(endpoint)},
        {"TFCKPT_GS_ENDPOINT_URL", std::string(endpoint)}, {"GS_ACCESS_KEY_ID", "G"}, {"GS_SECRET_ACCESS_KEY", "s"}};
    const EnvLookup env = [&](std::string_view n) -> std::optional<std::string> {
      auto it = vars.find(std::string(n));
      return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    (void)ResolveSettings("s3", env);
    (void)ResolveSettings("gs", env);
    std::map<std::string, std::string> container = vars;
    container.erase("AWS_ACCESS_KEY_ID");
    container["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = std::string(endpoint);
    const EnvLookup env2 = [&](std::string_view n) -> std::optional<std::string> {
      auto it = container.find(std::string(n));
      return it == container.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    (void)ResolveSettings("s3", env2);
  }
  return 0;
}
