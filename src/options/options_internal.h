// What the generated FillRequest functions (options_table.cc) call: one Set per member
// type, each a no-op when the option was not given, else the value checked
// (CheckOptionValue) and converted into *out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/options.h"

namespace tfckpt::options_internal {

// "90s", "30m", "2h", "7d", "0", "3600" (seconds) -> seconds.
absl::StatusOr<int64_t> ParseDuration(std::string_view text);

absl::Status Set(const OptionValues& v, const OptionSpec& o, std::string* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, std::vector<std::string>* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, bool* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, int* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, int64_t* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, std::optional<int>* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, std::optional<double>* out);
absl::Status Set(const OptionValues& v, const OptionSpec& o, ServerSideCopy* out);

}  // namespace tfckpt::options_internal
