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
  // The newer Keras optimizers (tf-keras 2.11+, Keras 3) keep their slots in `_variables/N`
  // beside `_iterations` and `_learning_rate`, under the model where the model tracks its
  // optimizer (`model/optimizer/…`, a model's save_weights: `optimizer/…`).
  static const Regex keras_optimizer = Regex::Fixed(R"((^|/)optimizer/(_variables/\d+|_iterations|_learning_rate)/)");
  // Keras 3's optimizer tracks the model's own weights as `_trainable_variables/N`, and
  // they are saved there (the first path that reaches them): model state, kept.
  const auto under = [&name](std::string_view p) {
    if (p.empty() || name.size() <= p.size() || name.compare(0, p.size(), p) != 0 || name[p.size()] != '/') {
      return false;
    }
    return name.compare(p.size() + 1, 21, "_trainable_variables/") != 0;
  };
  if (name.find("/.OPTIMIZER_SLOT/") != std::string::npos) return true;
  if (under("optimizer")) return true;
  for (const auto& p : optimizer_paths) {
    if (under(p)) return true;
  }
  return tf1_slot.Search(name) || power.Search(name) || keras_training.Search(name) || keras_optimizer.Search(name);
}

}  // namespace tfckpt
