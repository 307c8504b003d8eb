#include "tfckpt/status.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <string>

#include "absl/strings/cord.h"

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

namespace {

constexpr char kCheck[] = "tfckpt.check";
constexpr char kFile[] = "tfckpt.file";
constexpr char kKey[] = "tfckpt.key";
constexpr char kOffset[] = "tfckpt.offset";
constexpr char kWhat[] = "tfckpt.what";

std::string Payload(const absl::Status& s, const char* url) {
  auto p = s.GetPayload(url);
  return p ? std::string(*p) : std::string();
}

absl::Status Located(absl::StatusCode code, std::string_view check, std::string_view file, std::string_view key,
                     int64_t offset, std::string_view what) {
  std::string msg(file);
  if (!key.empty()) StrAppend(&msg, ": key \"", PrintableKey(key), "\"");
  if (offset >= 0) StrAppend(&msg, ": offset ", offset);
  StrAppend(&msg, msg.empty() ? "" : ": ", what);
  absl::Status st(code, msg);
  if (!check.empty()) st.SetPayload(kCheck, absl::Cord(AV(check)));
  st.SetPayload(kFile, absl::Cord(AV(file)));
  st.SetPayload(kKey, absl::Cord(AV(key)));
  st.SetPayload(kOffset, absl::Cord(StrCat(offset)));
  st.SetPayload(kWhat, absl::Cord(AV(what)));
  return st;
}

}  // namespace

absl::Status DataLossAt(std::string_view check, std::string_view file, std::string_view key, int64_t offset,
                        std::string_view what) {
  return Located(absl::StatusCode::kDataLoss, check, file, key, offset, what);
}

absl::Status DataLossCheck(std::string_view check, std::string_view what) {
  absl::Status st = absl::DataLossError(AV(what));
  st.SetPayload(kCheck, absl::Cord(AV(check)));
  return st;
}

absl::Status Locate(const absl::Status& inner, std::string_view fallback_check, std::string_view file,
                    std::string_view key, int64_t offset, std::string_view what_prefix) {
  std::string check = Payload(inner, kCheck);
  const bool medium = absl::IsUnavailable(inner) || absl::IsDeadlineExceeded(inner) ||
                      absl::IsPermissionDenied(inner) || absl::IsUnauthenticated(inner) || absl::IsCancelled(inner);
  if (check.empty() && !medium) check = std::string(fallback_check);
  return Located(inner.code(), check, file, key, offset, StrCat(what_prefix, SV(inner.message())));
}

absl::Status ErrnoError(std::string_view path, std::string_view what, int err) {
  std::string why = StrCat(what, ": ", std::strerror(err));
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  switch (err) {
    case ENOENT:
      code = absl::StatusCode::kNotFound;
      break;
    case ENOSPC:
    case EDQUOT:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case EFBIG:
      code = absl::StatusCode::kResourceExhausted;
      StrAppend(&why, " (no space: the file size limit is reached)");
      break;
    case EACCES:
    case EPERM:
      code = absl::StatusCode::kPermissionDenied;
      break;
  }
  return AtFile(absl::Status(code, StrCat(path, ": ", why)), path, why);
}

absl::Status AtFile(absl::Status s, std::string_view file, std::string_view what) {
  s.SetPayload(kFile, absl::Cord(AV(file)));
  s.SetPayload(kWhat, absl::Cord(AV(what)));
  return s;
}

ErrorInfo ErrorInfoOf(const absl::Status& s) {
  ErrorInfo e;
  e.check = Payload(s, kCheck);
  e.file = Payload(s, kFile);
  e.key = Payload(s, kKey);
  const std::string off = Payload(s, kOffset);
  if (!off.empty()) e.offset = std::stoll(off);
  e.what = s.GetPayload(kWhat) ? Payload(s, kWhat) : std::string(SV(s.message()));
  return e;
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", status.message()));
}

Finding FindingOf(const absl::Status& s, Severity severity) {
  ErrorInfo e = ErrorInfoOf(s);
  return Finding{e.check.empty() ? "input" : e.check, severity, e.file, e.key, e.offset, e.what};
}

}  // namespace tfckpt
