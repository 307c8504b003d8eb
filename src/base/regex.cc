// RE2-backed regular expressions (see the header).
#include "base/regex.h"

#include <re2/re2.h>

#include <cstdlib>

#include "tfckpt/strings.h"

namespace tfckpt {

namespace {

RE2::Options SafeOptions() {
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(64 << 20);  // bounded DFA/NFA memory for any pattern
  return o;
}

}  // namespace

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern, std::string_view what) {
  auto re = std::make_shared<const RE2>(re2::StringPiece(pattern.data(), pattern.size()), SafeOptions());
  if (!re->ok()) {
    return absl::InvalidArgumentError(
        StrCat(what, " \"", pattern, "\": not a valid regular expression (", re->error(), ")"));
  }
  Regex r;
  r.re_ = std::move(re);
  return r;
}

Regex Regex::Fixed(std::string_view pattern) {
  auto r = Compile(pattern, "internal pattern");
  if (!r.ok()) std::abort();
  return *std::move(r);
}

const std::string& Regex::pattern() const { return re_->pattern(); }

bool Regex::Search(std::string_view text) const {
  return RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), *re_);
}

bool Regex::FullMatch(std::string_view text, std::vector<std::string>* groups) const {
  const int n = re_->NumberOfCapturingGroups();
  std::vector<re2::StringPiece> all(static_cast<size_t>(n) + 1);
  if (!re_->Match(re2::StringPiece(text.data(), text.size()), 0, text.size(), RE2::ANCHOR_BOTH, all.data(),
                  static_cast<int>(all.size()))) {
    return false;
  }
  if (groups != nullptr) {
    groups->clear();
    for (int i = 1; i <= n; ++i) groups->emplace_back(all[static_cast<size_t>(i)].data(), all[static_cast<size_t>(i)].size());
  }
  return true;
}

absl::StatusOr<std::string> Regex::CheckReplacement(std::string_view replacement, std::string_view what) const {
  // $N -> \N, $& -> \0, $$ -> $, a backslash -> \\ (RE2's rewrite syntax).
  std::string rewrite;
  for (size_t i = 0; i < replacement.size(); ++i) {
    const char c = replacement[i];
    if (c == '\\') {
      rewrite += "\\\\";
    } else if (c == '$' && i + 1 < replacement.size() && replacement[i + 1] >= '0' && replacement[i + 1] <= '9') {
      rewrite += '\\';
      rewrite += replacement[++i];
    } else if (c == '$' && i + 1 < replacement.size() && replacement[i + 1] == '&') {
      rewrite += "\\0";
      ++i;
    } else if (c == '$' && i + 1 < replacement.size() && replacement[i + 1] == '$') {
      rewrite += '$';
      ++i;
    } else {
      rewrite += c;
    }
  }
  std::string error;
  if (!re_->CheckRewriteString(rewrite, &error)) {
    return absl::InvalidArgumentError(StrCat(what, " \"", pattern(), "=", replacement, "\": ", error));
  }
  return rewrite;
}

std::string Regex::ReplaceAll(std::string_view text, const std::string& rewrite) const {
  std::string out(text);
  RE2::GlobalReplace(&out, *re_, rewrite);
  return out;
}

std::string Regex::Quote(std::string_view text) { return RE2::QuoteMeta(re2::StringPiece(text.data(), text.size())); }

}  // namespace tfckpt
