#include "tfckpt/strings.h"
#include "model/tensor_encoding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {
namespace {

// Extends `crc` with a string length the way TF's writer does: 4 bytes when it fits in
// uint32, else 8, in the writer's byte order.
uint32_t ExtendLength(uint32_t crc, uint64_t len, bool big_endian) {
  unsigned char buf[8];
  const int width = len <= 0xFFFFFFFFull ? 4 : 8;
  for (int i = 0; i < width; ++i) {
    const int shift = 8 * (big_endian ? width - 1 - i : i);
    buf[i] = static_cast<unsigned char>(len >> shift);
  }
  return crc32c::Extend(crc, buf, width);
}

}  // namespace

absl::StatusOr<DecodedElements> DecodeStrings(std::string_view payload, int64_t n, bool big_endian) {
  if (n < 0 || payload.size() < 4 || static_cast<uint64_t>(n) > payload.size() - 4) {
    return DataLossCheck("data.string-layout", StrCat("string tensor of ", n, " elements cannot fit in ", payload.size(),
                                            " bytes"));
  }
  DecodedElements out;
  std::vector<uint64_t> lengths(static_cast<size_t>(n));
  std::string_view rest = payload;
  uint32_t crc = 0;
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!GetVarint64(&rest, &lengths[i])) {
      return DataLossCheck("data.string-layout", StrCat("string tensor: malformed length of element ", i));
    }
    crc = ExtendLength(crc, lengths[i], big_endian);
    total += std::min<uint64_t>(lengths[i], payload.size());  // cannot overflow: n <= size
  }
  if (rest.size() < 4) return DataLossCheck("data.string-layout", "string tensor: lengths run into the length checksum");
  uint32_t stored = DecodeFixed32(rest.data());
  if (big_endian) stored = __builtin_bswap32(stored);
  if (crc32c::Unmask(stored) != crc) {
    return DataLossCheck("data.string-lengths", StrCat("string tensor: length checksum mismatch (stored ",
                                            absl::Hex(crc32c::Unmask(stored), absl::kZeroPad8), ", computed ",
                                            absl::Hex(crc, absl::kZeroPad8), ")"));
  }
  crc = crc32c::Extend(crc, rest.data(), 4);
  rest.remove_prefix(4);
  if (total != rest.size()) {
    return DataLossCheck("data.string-layout", StrCat("string tensor: lengths add up to ", total, " bytes but ",
                                            rest.size(), " follow the length checksum"));
  }
  crc = crc32c::Extend(crc, rest.data(), rest.size());
  out.elements.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out.elements.push_back(rest.substr(0, lengths[i]));
    rest.remove_prefix(lengths[i]);
  }
  out.crc = crc;
  return out;
}

absl::StatusOr<DecodedElements> DecodeVariants(std::string_view payload, int64_t n) {
  // Each element takes at least 1 (length) + 4 (checksum) bytes.
  if (n < 0 || static_cast<uint64_t>(n) > payload.size() / 5) {
    return DataLossCheck("data.variant", StrCat("variant tensor of ", n, " elements cannot fit in ", payload.size(),
                                            " bytes"));
  }
  DecodedElements out;
  std::string_view rest = payload;
  uint32_t crc = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t len;
    if (!GetVarint64(&rest, &len) || len > rest.size() || rest.size() - len < 4) {
      return DataLossCheck("data.variant", StrCat("variant tensor: element ", i, " runs past the payload"));
    }
    unsigned char lenbuf[8];
    for (int b = 0; b < 8; ++b) lenbuf[b] = static_cast<unsigned char>(len >> (8 * b));
    crc = crc32c::Extend(crc, lenbuf, 8);
    out.elements.push_back(rest.substr(0, len));
    crc = crc32c::Extend(crc, rest.data(), len);
    rest.remove_prefix(len);
    const uint32_t stored = DecodeFixed32(rest.data());
    if (stored != crc32c::Mask(crc)) {
      return DataLossCheck("data.variant", StrCat("variant tensor: checksum of element ", i, " does not match"));
    }
    crc = crc32c::Extend(crc, rest.data(), 4);
    rest.remove_prefix(4);
  }
  if (!rest.empty()) {
    return DataLossCheck("data.variant", StrCat("variant tensor: ", rest.size(), " bytes left after ", n, " elements"));
  }
  out.crc = crc;
  return out;
}

uint32_t EncodeStrings(const std::vector<std::string_view>& elements, std::string* out) {
  uint32_t crc = 0;
  for (std::string_view e : elements) {
    PutVarint64(out, e.size());
    crc = ExtendLength(crc, e.size(), false);
  }
  const size_t at = out->size();
  PutFixed32(out, crc32c::Mask(crc));
  crc = crc32c::Extend(crc, out->data() + at, 4);
  for (std::string_view e : elements) {
    out->append(e);
    crc = crc32c::Extend(crc, e.data(), e.size());
  }
  return crc;
}

absl::StatusOr<uint32_t> PayloadCrc(int32_t dtype, std::string_view payload, int64_t n, bool big_endian) {
  if (dtype == static_cast<int32_t>(DType::kString)) {
    auto d = DecodeStrings(payload, n, big_endian);
    if (!d.ok()) return d.status();
    return d->crc;
  }
  if (dtype == static_cast<int32_t>(DType::kVariant)) {
    auto d = DecodeVariants(payload, n);
    if (!d.ok()) return d.status();
    return d->crc;
  }
  return crc32c::Value(payload.data(), payload.size());
}

void SwapToLittleEndian(int32_t dtype, char* data, size_t size) {
  const DTypeInfo* info = LookupDType(dtype);
  if (info == nullptr) return;
  const int w = info->component_size;
  for (size_t i = 0; w > 1 && i + w <= size; i += w) std::reverse(data + i, data + i + w);
}

}  // namespace tfckpt
