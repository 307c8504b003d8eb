// Name filters, renames and the optimizer-state rule (see the header).
#include "tfckpt/name_rules.h"

#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

namespace {

absl::StatusOr<std::regex> Compile(const std::string& pattern, const char* what) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(StrCat(what, " \"", pattern, "\": not a valid regex (", e.what(), ")"));
  }
}

bool Search(const std::vector<std::regex>& rs, const std::string& name) {
  for (const auto& r : rs) {
    if (std::regex_search(name, r)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<RenameRule> ParseRenameRule(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
      continue;
    }
    if (text[i] == '=') {
      if (i == 0) break;
      return RenameRule{text.substr(0, i), text.substr(i + 1)};
    }
  }
  return absl::InvalidArgumentError(StrCat("--rename \"", text, "\": expected REGEX=REPLACEMENT"));
}

absl::StatusOr<NameRules> NameRules::Create(const std::vector<std::string>& include,
                                            const std::vector<std::string>& exclude,
                                            const std::vector<RenameRule>& renames) {
  NameRules r;
  for (const auto& p : include) {
    TFCKPT_ASSIGN_OR_RETURN(auto re, Compile(p, "--include"));
    r.include_.push_back(std::move(re));
  }
  for (const auto& p : exclude) {
    TFCKPT_ASSIGN_OR_RETURN(auto re, Compile(p, "--exclude"));
    r.exclude_.push_back(std::move(re));
  }
  for (const auto& rr : renames) {
    TFCKPT_ASSIGN_OR_RETURN(auto re, Compile(rr.pattern, "--rename"));
    r.renames_.emplace_back(std::move(re), rr.replacement);
  }
  return r;
}

bool NameRules::Excluded(const std::string& name) const { return Search(exclude_, name); }

bool NameRules::Selected(const std::string& name) const {
  if (!include_.empty() && !Search(include_, name)) return false;
  return !Excluded(name);
}

std::string NameRules::Rename(const std::string& name) const {
  std::string out = name;
  for (const auto& [re, replacement] : renames_) out = std::regex_replace(out, re, replacement);
  return out;
}

bool IsOptimizerState(const std::string& name, const std::vector<std::string>& optimizer_paths) {
  static const std::regex tf1_slot(
      R"((^|/)(Adam|Momentum|Adagrad|AdagradDA|ProximalAdagrad|Ftrl|RMSProp|Adadelta|adam_m|adam_v)(_\d+)?$)");
  static const std::regex power(R"((^|/)beta[12]_power(_\d+)?$)");
  static const std::regex keras_training(R"(^training/(Adam|Adagrad|Ftrl|SGD|RMSprop|Nadam|Adamax|Adadelta)/)");
  if (name.find("/.OPTIMIZER_SLOT/") != std::string::npos) return true;
  if (name.rfind("optimizer/", 0) == 0) return true;
  for (const auto& p : optimizer_paths) {
    if (!p.empty() && name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '/') return true;
  }
  return std::regex_search(name, tf1_slot) || std::regex_search(name, power) || std::regex_search(name, keras_training);
}

}  // namespace tfckpt
