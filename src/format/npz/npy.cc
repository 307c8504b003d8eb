// The .npy preamble (npy.h).
#include "npy.h"

#include <cstring>

#include "absl/strings/numbers.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {

std::optional<std::string> NpyDescr(int32_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kFloat: return "<f4";
    case DType::kDouble: return "<f8";
    case DType::kHalf: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kInt16: return "<i2";
    case DType::kUInt16: return "<u2";
    case DType::kInt32: return "<i4";
    case DType::kUInt32: return "<u4";
    case DType::kInt64: return "<i8";
    case DType::kUInt64: return "<u8";
    case DType::kBool: return "|b1";
    case DType::kComplex64: return "<c8";
    case DType::kComplex128: return "<c16";
    default: return std::nullopt;
  }
}

std::optional<int32_t> DTypeOfNpyDescr(std::string_view descr) {
  if (descr.size() > 2 && descr.substr(0, 2) == "|S") return static_cast<int32_t>(DType::kString);
  for (DType d : {DType::kFloat, DType::kDouble, DType::kHalf, DType::kInt8, DType::kUInt8, DType::kInt16,
                  DType::kUInt16, DType::kInt32, DType::kUInt32, DType::kInt64, DType::kUInt64, DType::kBool,
                  DType::kComplex64, DType::kComplex128}) {
    if (NpyDescr(static_cast<int32_t>(d)) == descr) return static_cast<int32_t>(d);
  }
  return std::nullopt;
}

namespace {

// The value after 'KEY': in the dict (up to the next ',' outside parentheses, or '}').
std::optional<std::string_view> DictValue(std::string_view dict, std::string_view key) {
  const std::string quoted = StrCat("'", key, "':");
  size_t at = dict.find(quoted);
  if (at == std::string_view::npos) return std::nullopt;
  at += quoted.size();
  while (at < dict.size() && dict[at] == ' ') ++at;
  size_t end = at;
  int depth = 0;
  for (; end < dict.size(); ++end) {
    if (dict[end] == '(') ++depth;
    if (dict[end] == ')') --depth;
    if (depth == 0 && (dict[end] == ',' || dict[end] == '}')) break;
  }
  return dict.substr(at, end - at);
}

}  // namespace

absl::StatusOr<NpyPreamble> ParseNpyHeader(std::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6)) {
    return absl::InvalidArgumentError("not a .npy member (no \\x93NUMPY magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) return absl::InvalidArgumentError(StrCat(".npy version ", major, " is not 1, 2 or 3"));
  const size_t prefix = major == 1 ? 10 : 12;
  if (bytes.size() < prefix) return absl::InvalidArgumentError("truncated .npy header");
  uint64_t len = 0;
  for (size_t i = 0; i < prefix - 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  if (bytes.size() < prefix + len) return absl::InvalidArgumentError("truncated .npy header");
  const std::string_view dict = bytes.substr(prefix, len);
  NpyPreamble h;
  h.size = prefix + len;
  auto descr = DictValue(dict, "descr");
  auto fortran = DictValue(dict, "fortran_order");
  auto shape = DictValue(dict, "shape");
  if (!descr || !fortran || !shape || descr->size() < 2 || shape->size() < 2 || (*shape)[0] != '(') {
    return absl::InvalidArgumentError(StrCat(".npy header ", dict, ": no descr, fortran_order and shape"));
  }
  h.descr = std::string(descr->substr(1, descr->size() - 2));
  h.fortran_order = *fortran == "True";
  std::string_view dims = shape->substr(1, shape->size() - 2);
  while (!dims.empty()) {
    const size_t comma = dims.find(',');
    std::string_view d = dims.substr(0, comma);
    while (!d.empty() && d.front() == ' ') d.remove_prefix(1);
    while (!d.empty() && d.back() == ' ') d.remove_suffix(1);
    if (!d.empty()) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(absl::string_view(d.data(), d.size()), &v) || v < 0) return absl::InvalidArgumentError(StrCat(".npy shape (", dims, ")"));
      h.shape.push_back(v);
    }
    if (comma == std::string_view::npos) break;
    dims.remove_prefix(comma + 1);
  }
  return h;
}

}  // namespace tfckpt
