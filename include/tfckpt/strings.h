// absl::StrCat / StrAppend that also take std::string_view. Debian's Abseil is built
// with its own absl::string_view, which std::string_view does not convert to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tfckpt {

inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view SV(absl::string_view s) { return std::string_view(s.data(), s.size()); }

template <typename T>
decltype(auto) ToAlphaNum(const T& x) {
  return x;
}
inline absl::string_view ToAlphaNum(std::string_view s) { return AV(s); }

template <typename... A>
std::string StrCat(const A&... a) {
  return absl::StrCat(ToAlphaNum(a)...);
}
template <typename... A>
void StrAppend(std::string* out, const A&... a) {
  absl::StrAppend(out, ToAlphaNum(a)...);
}

// "123", "64K", "1.5G", "512MiB", "2GB": bytes, with K/M/G/T meaning powers of 1024. The
// one parser of every byte count (options and specs such as max-shard-size:BYTES).
// nullopt when the text is not a size.
std::optional<uint64_t> ParseByteSize(std::string_view text);

// The index of `value` among `words`, the words a parser takes (ServerSideWords(), ...);
// else InvalidArgument "\"VALUE\": not a, b or c". The one check of a choice, so that the
// option table and the parser refuse a value in the same words.
absl::StatusOr<size_t> OneOf(std::string_view value, const std::vector<std::string>& words);

// True when `s` is valid UTF-8.
bool IsValidUtf8(std::string_view s);

// "1 tensor", "2 tensors": `n` and its noun, plural (noun + "s", or `plural`) unless n is 1.
inline std::string Count(int64_t n, std::string_view noun, std::string_view plural = {}) {
  if (n == 1) return StrCat(n, " ", noun);
  return plural.empty() ? StrCat(n, " ", noun, "s") : StrCat(n, " ", plural);
}

}  // namespace tfckpt
