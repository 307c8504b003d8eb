// The checks and conversions of option values (tfckpt/options.h); the table and the
// FillRequest functions are generated from src/options/table.py (options_table.cc).
#include "tfckpt/options.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "options/options_internal.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace options_internal {

absl::StatusOr<int64_t> ParseDuration(std::string_view v) {
  const char unit = v.empty() ? 's' : v.back();
  const bool has_unit = unit == 's' || unit == 'm' || unit == 'h' || unit == 'd';
  const std::string_view digits = has_unit ? v.substr(0, v.size() - 1) : v;
  const int64_t scale = unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : 1;
  int64_t n = 0;
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(AV(digits), &n)) {
    return absl::InvalidArgumentError(StrCat(v, ": not a duration such as 90s, 30m, 2h, 7d or 0"));
  }
  return n * scale;
}

}  // namespace options_internal

absl::Status CheckOptionValue(const OptionSpec& o, std::string_view value) {
  switch (o.kind) {
    case OptionKind::kFlag:
      if (value == "true" || value == "false") return absl::OkStatus();
      return absl::InvalidArgumentError(StrCat(value, ": a flag takes no value"));
    case OptionKind::kInt: {
      int64_t v = 0;
      if (absl::SimpleAtoi(AV(value), &v) && v >= o.lo && v <= o.hi) return absl::OkStatus();
      return absl::InvalidArgumentError(StrCat(value, ": not a whole number ",
                                               o.hi == INT64_MAX ? StrCat(">= ", o.lo) : StrCat("from ", o.lo, " to ", o.hi)));
    }
    case OptionKind::kNumber: {
      double v = 0;
      if (absl::SimpleAtod(AV(value), &v) && std::isfinite(v)) return absl::OkStatus();
      return absl::InvalidArgumentError(StrCat(value, ": not a number"));
    }
    case OptionKind::kChoice:
    case OptionKind::kOptionalChoice:
      // (An optional choice given bare has the value "": its default.)
      if (o.kind == OptionKind::kOptionalChoice && value.empty()) return absl::OkStatus();
      return OneOf(value, o.words()).status();
    case OptionKind::kDuration:
      return options_internal::ParseDuration(value).status();
    case OptionKind::kText:
    case OptionKind::kPath:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::vector<const OptionSpec*> OptionsOf(std::string_view command, std::span<const OptionSpec> table) {
  std::vector<const OptionSpec*> out;
  for (const OptionSpec& o : table) {
    if (o.command == command) out.push_back(&o);
  }
  return out;
}

void OptionValues::Add(const OptionSpec& option, std::string value, std::string prefix) {
  std::vector<std::string>& v = values_[std::string(option.name)];
  if (!option.repeatable) v.clear();
  v.push_back(std::move(value));
  prefixes_[std::string(option.name)] = prefix.empty() ? StrCat(option.name, ": ") : std::move(prefix);
}

const std::vector<std::string>& OptionValues::Of(std::string_view name) const {
  static const std::vector<std::string> kNone;
  const auto it = values_.find(name);
  return it == values_.end() ? kNone : it->second;
}

std::string OptionValues::Last(std::string_view name) const {
  const std::vector<std::string>& v = Of(name);
  return v.empty() ? "" : v.back();
}

std::string OptionValues::ErrorPrefix(std::string_view name) const {
  const auto it = prefixes_.find(name);
  return it == prefixes_.end() ? StrCat(name, ": ") : it->second;
}

namespace options_internal {
namespace {

// The values of `o`, each checked; InvalidArgument "PREFIX MESSAGE" ("--jobs: -1: ...").
absl::Status Checked(const OptionValues& v, const OptionSpec& o) {
  for (const std::string& value : v.Of(o.name)) {
    if (absl::Status s = CheckOptionValue(o, value); !s.ok()) {
      return absl::InvalidArgumentError(StrCat(v.ErrorPrefix(o.name), s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Set(const OptionValues& v, const OptionSpec& o, std::string* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(Checked(v, o));
  *out = v.Last(o.name);
  if (o.kind == OptionKind::kOptionalChoice && out->empty()) *out = std::string(o.default_value);
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, std::vector<std::string>* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(Checked(v, o));
  *out = v.Of(o.name);
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, bool* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(Checked(v, o));
  *out = v.Last(o.name) == "true";
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, int64_t* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(Checked(v, o));
  if (o.kind == OptionKind::kDuration) {
    TFCKPT_ASSIGN_OR_RETURN(*out, ParseDuration(v.Last(o.name)));
    return absl::OkStatus();
  }
  if (!absl::SimpleAtoi(v.Last(o.name), out)) return absl::InvalidArgumentError(StrCat(v.ErrorPrefix(o.name), "not a whole number"));
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, int* out) {
  int64_t n = *out;
  TFCKPT_RETURN_IF_ERROR(Set(v, o, &n));
  *out = static_cast<int>(n);  // (the table's range fits an int)
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, std::optional<int>* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  int n = 0;
  TFCKPT_RETURN_IF_ERROR(Set(v, o, &n));
  *out = n;
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, std::optional<double>* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  TFCKPT_RETURN_IF_ERROR(Checked(v, o));
  double d = 0;
  (void)absl::SimpleAtod(v.Last(o.name), &d);  // (checked above)
  *out = d;
  return absl::OkStatus();
}

absl::Status Set(const OptionValues& v, const OptionSpec& o, ServerSideCopy* out) {
  if (!v.Has(o.name)) return absl::OkStatus();
  // The parser is the check: its words are the row's (ServerSideWords), and it refuses
  // others as CheckOptionValue would.
  absl::StatusOr<ServerSideCopy> mode = ParseServerSide(v.Last(o.name));
  if (!mode.ok()) return absl::InvalidArgumentError(StrCat(v.ErrorPrefix(o.name), mode.status().message()));
  *out = *mode;
  return absl::OkStatus();
}

}  // namespace options_internal
}  // namespace tfckpt
