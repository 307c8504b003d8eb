// Name filters, renames and the optimizer-state rule (see the header).
#include "model/name_rules.h"

#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {

namespace {

bool Search(const std::vector<Regex>& rs, const std::string& name) {
  for (const auto& r : rs) {
    if (r.Search(name)) return true;
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
    TFCKPT_ASSIGN_OR_RETURN(auto re, Regex::Compile(p, "--include"));
    r.include_.push_back(std::move(re));
  }
  for (const auto& p : exclude) {
    TFCKPT_ASSIGN_OR_RETURN(auto re, Regex::Compile(p, "--exclude"));
    r.exclude_.push_back(std::move(re));
  }
  for (const auto& rr : renames) {
    TFCKPT_ASSIGN_OR_RETURN(auto re, Regex::Compile(rr.pattern, "--rename"));
    TFCKPT_ASSIGN_OR_RETURN(std::string rewrite, re.CheckReplacement(rr.replacement, "--rename"));
    r.renames_.emplace_back(std::move(re), std::move(rewrite));
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
  for (const auto& [re, rewrite] : renames_) out = re.ReplaceAll(out, rewrite);
  return out;
}

bool IsOptimizerState(const std::string& name, const std::vector<std::string>& optimizer_paths) {
  static const Regex tf1_slot = Regex::Fixed(
      R"((^|/)(Adam|Momentum|Adagrad|AdagradDA|ProximalAdagrad|Ftrl|RMSProp|Adadelta|adam_m|adam_v)(_\d+)?$)");
  static const Regex power = Regex::Fixed(R"((^|/)beta[12]_power(_\d+)?$)");
  static const Regex keras_training =
      Regex::Fixed(R"(^training/(Adam|Adagrad|Ftrl|SGD|RMSprop|Nadam|Adamax|Adadelta)/)");
  if (name.find("/.OPTIMIZER_SLOT/") != std::string::npos) return true;
  if (name.rfind("optimizer/", 0) == 0) return true;
  for (const auto& p : optimizer_paths) {
    if (!p.empty() && name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '/') return true;
  }
  return tf1_slot.Search(name) || power.Search(name) || keras_training.Search(name);
}

}  // namespace tfckpt
