#include "base/path.h"

#include "absl/strings/ascii.h"

namespace tfckpt {
namespace {

// The length of a URL's root "SCHEME://HOST" (up to the "/" after it); 0 for other paths.
size_t UrlRootLength(std::string_view path) {
  if (!IsUrl(path)) return 0;
  const size_t host = path.find("://") + 3;
  const size_t slash = path.find('/', host);
  return slash == std::string_view::npos ? path.size() : slash;
}

}  // namespace

bool IsUrl(std::string_view path) {
  const size_t sep = path.find("://");
  if (sep == std::string_view::npos || sep == 0 || !absl::ascii_isalpha(path[0])) return false;
  for (char c : path.substr(0, sep)) {
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

std::string Dirname(std::string_view path) {
  const size_t root = UrlRootLength(path);
  const size_t slash = path.rfind('/');
  if (root > 0 && (slash == std::string_view::npos || slash < root)) return std::string(path.substr(0, root));
  if (slash == std::string_view::npos) return "";
  size_t end = slash;
  while (end > root && end > 0 && path[end - 1] == '/') --end;  // "a//b" -> "a"
  return end == 0 ? std::string("/") : std::string(path.substr(0, end));
}

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if ((!name.empty() && name[0] == '/') || IsUrl(name)) return std::string(name);
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out += '/';
  if (name == "." || name == "./") return out;
  return out.append(name);
}

}  // namespace tfckpt
