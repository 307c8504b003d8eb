// Which tensors a command keeps and what it calls them: --include / --exclude regexes and
// --rename REGEX=REPLACEMENT rules over logical tensor names (merge, convert).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/regex.h"

namespace tfckpt {

struct RenameRule {
  std::string pattern;      // regex (RE2 syntax, see regex.h), searched anywhere in the name
  std::string replacement;  // $1, $2, ... refer to groups; every match is replaced
};

// Parses "REGEX=REPLACEMENT" (split at the first '=' that is not escaped with '\').
absl::StatusOr<RenameRule> ParseRenameRule(const std::string& text);

class NameRules {
 public:
  // Errors name the regex that does not compile.
  static absl::StatusOr<NameRules> Create(const std::vector<std::string>& include,
                                          const std::vector<std::string>& exclude,
                                          const std::vector<RenameRule>& renames);

  // True when some --include matches (or none was given) and no --exclude matches.
  bool Selected(const std::string& name) const;
  bool Excluded(const std::string& name) const;  // some --exclude matches
  bool has_include() const { return !include_.empty(); }
  // The renames applied in order.
  std::string Rename(const std::string& name) const;

 private:
  std::vector<Regex> include_, exclude_;
  std::vector<std::pair<Regex, std::string>> renames_;  // regex, RE2 rewrite string
};

// Optimizer state (merge --drop-optimizer): TF2 slot variables (`/.OPTIMIZER_SLOT/`), the
// optimizer's own objects (under `optimizer/`, or under any of `optimizer_paths`, the
// object paths of optimizer nodes found in the object graph; not Keras 3's
// `_trainable_variables/N` there, which are the model's weights), the newer Keras
// optimizers' `…/optimizer/_variables/N/…`, `…/optimizer/_iterations/…` and
// `…/optimizer/_learning_rate/…` anywhere, TF1 slots named after
// their optimizer (`…/Adam`, `…/Adam_1`, `…/Momentum`, `…/Adagrad`, `…/Ftrl`, `…/Ftrl_1`,
// `…/RMSProp`, `…/RMSProp_1`, `…/Adadelta`, BERT's `…/adam_m`, `…/adam_v`, with any
// `_N` suffix), `beta1_power`, `beta2_power` (and `_N`), and Keras-in-Estimator
// `training/<Optimizer>/…`.
bool IsOptimizerState(const std::string& name, const std::vector<std::string>& optimizer_paths = {});

}  // namespace tfckpt
