#include "tfckpt/path.h"

namespace tfckpt {

std::string Dirname(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return "";
  size_t end = slash;
  while (end > 0 && path[end - 1] == '/') --end;  // "a//b" -> "a"
  return end == 0 ? std::string("/") : std::string(path.substr(0, end));
}

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (!name.empty() && name[0] == '/') return std::string(name);
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out += '/';
  if (name == "." || name == "./") return out;
  return out.append(name);
}

}  // namespace tfckpt
