// The environment as the object store code reads it: a lookup function, so that tests
// pass their own variables instead of the process's.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace tfckpt::s3 {

// Looks up an environment variable; nullopt when unset. Tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
// The process's environment (getenv).
EnvLookup ProcessEnv();

}  // namespace tfckpt::s3
