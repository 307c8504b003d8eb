// Regular expressions for user patterns (--filter, --include, --exclude, --rename,
// --partition REGEX=) and for names read from files, on RE2: linear-time matching with
// bounded memory, so no pattern or tensor name can make a match hang, recurse the stack
// away, or allocate without limit (std::regex can do all three).
//
// Syntax: RE2's (Perl-like; no backreferences or lookaround). Replacements use $1..$9
// for groups, $& for the whole match and $$ for a dollar sign.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace re2 {
class RE2;
}

namespace tfckpt {

class Regex {
 public:
  // `what` names the option in errors, e.g. "--exclude".
  static absl::StatusOr<Regex> Compile(std::string_view pattern, std::string_view what);
  // For patterns written in our own code. REQUIRES: `pattern` compiles.
  static Regex Fixed(std::string_view pattern);

  const std::string& pattern() const;
  // Matches anywhere in `text`.
  bool Search(std::string_view text) const;
  // Matches the whole of `text`; `groups` (when given) receives groups 1..N.
  bool FullMatch(std::string_view text, std::vector<std::string>* groups = nullptr) const;
  // Every non-overlapping match replaced, as std::regex_replace does.
  // REQUIRES: `rewrite` came from CheckReplacement with this regex.
  std::string ReplaceAll(std::string_view text, const std::string& rewrite) const;
  // Translates a $-style replacement into this regex's rewrite string; error when it
  // names a group the pattern does not have.
  absl::StatusOr<std::string> CheckReplacement(std::string_view replacement, std::string_view what) const;

  // `text` with every regex metacharacter escaped.
  static std::string Quote(std::string_view text);

 private:
  std::shared_ptr<const re2::RE2> re_;
};

}  // namespace tfckpt
