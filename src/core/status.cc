#include "tfckpt/status.h"

#include <algorithm>
#include <cstdio>

namespace tfckpt {

std::string PrintableKey(std::string_view key) {
  const bool plain = std::all_of(key.begin(), key.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c != 0x7F && c != '\\' && c != '"';
  });
  if (plain) return std::string(key);
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c >= 0x80) {
      out += static_cast<char>(c);  // UTF-8 bytes print as they are
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

absl::Status DataLossAt(std::string_view file, std::string_view key, int64_t offset,
                        std::string_view what) {
  std::string msg(file);
  if (!key.empty()) StrAppend(&msg, ": key \"", PrintableKey(key), "\"");
  if (offset >= 0) StrAppend(&msg, ": offset ", offset);
  StrAppend(&msg, ": ", what);
  return absl::DataLossError(msg);
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

}  // namespace tfckpt
