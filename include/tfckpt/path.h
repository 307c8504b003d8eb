// Path strings: pure text helpers, no file system call. A path is "/"-separated (a local
// path now, an object key or URL later); the results match std::filesystem's lexical rules
// for the cases the library meets.
#pragma once

#include <string>
#include <string_view>

namespace tfckpt {

// The directory part: "a/b/c" -> "a/b", "/c" -> "/", "c" -> "" (no directory).
std::string Dirname(std::string_view path);
// The last component: "a/b/c" -> "c", "a/b/" -> "" (like std::filesystem's filename()).
std::string Basename(std::string_view path);
// `dir` / `name`; an absolute `name` is returned as it is, "." or "./" names `dir` itself
// (with its trailing "/"), an empty `dir` gives `name`.
std::string JoinPath(std::string_view dir, std::string_view name);
// Dirname, or "." when the path has no directory: the directory to list for `path`.
inline std::string DirectoryOf(std::string_view path) {
  std::string d = Dirname(path);
  return d.empty() ? std::string(".") : d;
}

}  // namespace tfckpt
