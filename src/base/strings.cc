#include "tfckpt/strings.h"

#include <cctype>

#include "absl/strings/numbers.h"

namespace tfckpt {

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  double value = 0;
  if (i == 0 || !absl::SimpleAtod(std::string(text.substr(0, i)), &value) || value < 0) return std::nullopt;
  std::string unit(text.substr(i));
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const std::string units = "KMGT";
    const size_t k = units.find(unit[0]);
    if (k == std::string::npos) return std::nullopt;
    const std::string rest = unit.substr(1);
    if (!rest.empty() && rest != "B" && rest != "IB") return std::nullopt;
    for (size_t n = 0; n <= k; ++n) scale *= 1024;
  }
  const double bytes = value * scale;
  if (bytes >= 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c >> 5) == 6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 14) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 30) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

absl::StatusOr<size_t> OneOf(std::string_view value, const std::vector<std::string>& words) {
  std::string alternatives;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == value) return i;
    if (i > 0) alternatives += i + 1 == words.size() ? " or " : ", ";
    alternatives += words[i];
  }
  return absl::InvalidArgumentError(StrCat("\"", value, "\": not ", alternatives));
}

}  // namespace tfckpt
