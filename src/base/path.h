// Path strings: pure text helpers, no file system call. A path is "/"-separated: a local
// path, or an object URL ("s3://BUCKET/KEY", "gs://BUCKET/KEY") whose "SCHEME://BUCKET"
// is its root (Dirname never cuts into it, JoinPath never drops a slash of it); the results
// match std::filesystem's lexical rules for the local cases the library meets.
#pragma once

#include <string>
#include <string_view>

#include "tfckpt/storage.h"

namespace tfckpt {

// (IsUrl, whether a path is an object store's URL: tfckpt/storage.h.)

// The directory part: "a/b/c" -> "a/b", "/c" -> "/", "c" -> "" (no directory);
// "s3://b/k" -> "s3://b", "s3://b" -> "s3://b" (a URL's root is its own directory).
std::string Dirname(std::string_view path);
// The last component: "a/b/c" -> "c", "a/b/" -> "" (like std::filesystem's filename()).
std::string Basename(std::string_view path);
// `dir` / `name`; an absolute `name` (or a URL) is returned as it is, "." or "./" names `dir` itself
// (with its trailing "/"), an empty `dir` gives `name`.
std::string JoinPath(std::string_view dir, std::string_view name);
// Dirname, or "." when the path has no directory: the directory to list for `path`.
inline std::string DirectoryOf(std::string_view path) {
  std::string d = Dirname(path);
  return d.empty() ? std::string(".") : d;
}

}  // namespace tfckpt
