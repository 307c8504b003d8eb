// What the object store unit tests share (s3_tests.cc, s3_credentials_tests.cc): an
// environment of their own and the credentials a resolved Settings hands out.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "kvstore/s3/settings.h"

namespace tfckpt::s3::testing {

// An environment made of a map, with HOME a fresh temporary directory; the EC2 metadata
// service is never asked (AWS_EC2_METADATA_DISABLED: never 169.254.169.254 from a test).
struct FakeEnv {
  std::map<std::string, std::string> vars;
  std::string home;
  FakeEnv() {
    char tmpl[] = "/tmp/tfckpt-s3-home-XXXXXX";
    home = mkdtemp(tmpl);
    vars["HOME"] = home;
    vars["AWS_EC2_METADATA_DISABLED"] = "true";
  }
  ~FakeEnv() { std::system(("rm -rf '" + home + "'").c_str()); }
  FakeEnv(const FakeEnv&) = delete;
  FakeEnv& operator=(const FakeEnv&) = delete;
  EnvLookup Lookup() const {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = vars.find(std::string(name));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
  // Writes HOME/rel (directories made as needed); its path.
  std::string Write(const std::string& rel, const std::string& text) const {
    const std::string path = home + "/" + rel;
    std::system(("mkdir -p \"$(dirname '" + path + "')\"").c_str());
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
  }
};

// The credentials the settings' provider hands out. REQUIRES: an offline source.
inline Credentials Creds(const Settings& s) {
  auto c = s.credentials->Get();
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

}  // namespace tfckpt::s3::testing
