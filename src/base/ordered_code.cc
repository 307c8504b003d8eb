// OrderedCode as TensorFlow uses it for slice keys (docs/FORMAT.md §d.2).
#include "tfckpt/strings.h"
#include "tfckpt/ordered_code.h"

#include <bit>

#include "absl/strings/str_cat.h"

namespace tfckpt::ordered_code {

void WriteNumIncreasing(std::string* dest, uint64_t v) {
  unsigned char buf[9];
  int n = 0;
  for (uint64_t x = v; x != 0; x >>= 8) ++n;
  buf[0] = static_cast<unsigned char>(n);
  for (int i = 0; i < n; ++i) buf[n - i] = static_cast<unsigned char>(v >> (8 * i));
  dest->append(reinterpret_cast<char*>(buf), n + 1);
}

void WriteString(std::string* dest, std::string_view s) {
  for (char c : s) {
    if (c == '\0') {
      dest->append("\x00\xff", 2);
    } else if (static_cast<unsigned char>(c) == 0xff) {
      dest->append("\xff\x00", 2);
    } else {
      dest->push_back(c);
    }
  }
  dest->append("\x00\x01", 2);
}

void WriteSignedNumIncreasing(std::string* dest, int64_t v) {
  const uint64_t x = v >= 0 ? static_cast<uint64_t>(v) : ~static_cast<uint64_t>(v);
  const int len = (64 - std::countl_zero(x)) / 7 + 1;  // 1..10 bytes
  // Two's complement of v over 80 bits, big-endian; keep the last `len` bytes.
  unsigned char buf[10];
  const unsigned char fill = v < 0 ? 0xff : 0x00;
  buf[0] = buf[1] = fill;
  for (int i = 0; i < 8; ++i) buf[9 - i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
  unsigned char* out = buf + (10 - len);
  // XOR the top `len` bits with ones.
  if (len <= 8) {
    out[0] ^= static_cast<unsigned char>(0xff00 >> len);
  } else {
    out[0] ^= 0xff;
    out[1] ^= static_cast<unsigned char>(0xff00 >> (len - 8));
  }
  dest->append(reinterpret_cast<char*>(out), len);
}

bool ReadNumIncreasing(std::string_view* src, uint64_t* v) {
  if (src->empty()) return false;
  const size_t n = static_cast<unsigned char>((*src)[0]);
  if (n > 8 || src->size() < n + 1) return false;
  uint64_t r = 0;
  for (size_t i = 1; i <= n; ++i) r = (r << 8) | static_cast<unsigned char>((*src)[i]);
  *v = r;
  src->remove_prefix(n + 1);
  return true;
}

bool ReadString(std::string_view* src, std::string* s) {
  s->clear();
  size_t i = 0;
  while (i < src->size()) {
    const unsigned char c = (*src)[i];
    if (c != 0x00 && c != 0xff) {
      s->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (i + 1 >= src->size()) return false;
    const unsigned char d = (*src)[i + 1];
    if (c == 0x00 && d == 0x01) {
      src->remove_prefix(i + 2);
      return true;
    }
    if (c == 0x00 && d == 0xff) {
      s->push_back('\0');
    } else if (c == 0xff && d == 0x00) {
      s->push_back(static_cast<char>(0xff));
    } else {
      return false;
    }
    i += 2;
  }
  return false;  // no terminator
}

bool ReadSignedNumIncreasing(std::string_view* src, int64_t* v) {
  if (src->empty()) return false;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>((*src)[i]); };
  const bool negative = (byte(0) & 0x80) == 0;
  const unsigned char inv = negative ? 0xff : 0x00;
  const unsigned char x0 = byte(0) ^ inv;
  int len;
  if (x0 != 0xff) {
    len = std::countl_one(x0);
  } else {
    if (src->size() < 2) return false;
    len = 8 + std::countl_one(static_cast<unsigned char>(byte(1) ^ inv));
    if (len > 10) return false;
  }
  if (src->size() < static_cast<size_t>(len)) return false;
  unsigned __int128 u = 0;
  for (int i = 0; i < len; ++i) u = (u << 8) | byte(i);
  const unsigned __int128 top = ((static_cast<unsigned __int128>(1) << len) - 1) << (8 * len - len);
  u ^= top;
  __int128 s = static_cast<__int128>(u);
  if (negative) s -= static_cast<__int128>(1) << (8 * len);
  if (s > INT64_MAX || s < INT64_MIN) return false;
  *v = static_cast<int64_t>(s);
  src->remove_prefix(len);
  return true;
}

}  // namespace tfckpt::ordered_code

namespace tfckpt {

SliceExtents ExtentsOf(const Region& region, const Shape& full, bool full_as_minus_one) {
  SliceExtents e;
  for (size_t d = 0; d < region.rank(); ++d) {
    const bool whole = region.start[d] == 0 && region.shape[d] == full[d];
    e.starts.push_back(whole && full_as_minus_one ? 0 : region.start[d]);
    e.lengths.push_back(whole && full_as_minus_one ? -1 : region.shape[d]);
  }
  return e;
}

std::string ExtentsString(const SliceExtents& e) {
  std::string out;
  for (size_t d = 0; d < e.starts.size(); ++d) {
    if (d > 0) out += ':';
    if (e.lengths[d] < 0) {
      out += '-';
    } else {
      StrAppend(&out, e.starts[d], ",", e.lengths[d]);
    }
  }
  return out;
}

absl::StatusOr<Region> RegionOf(const SliceExtents& e, const Shape& full) {
  if (e.starts.size() != full.size() || e.lengths.size() != full.size()) {
    return absl::InvalidArgumentError(StrCat("slice has rank ", e.starts.size(),
                                                   ", tensor has rank ", full.size()));
  }
  Region r;
  for (size_t d = 0; d < full.size(); ++d) {
    int64_t start = e.starts[d], len = e.lengths[d];
    if (len < 0) {
      start = 0;
      len = full[d];
    }
    if (start < 0 || start > full[d] || len > full[d] - start) {
      return absl::InvalidArgumentError(StrCat("slice extent ", start, ",", len,
                                                     " lies outside dimension ", d,
                                                     " of size ", full[d]));
    }
    r.start.push_back(start);
    r.shape.push_back(len);
  }
  return r;
}

std::string EncodeSliceKey(std::string_view name, const SliceExtents& extents) {
  std::string key;
  ordered_code::WriteNumIncreasing(&key, 0);
  ordered_code::WriteString(&key, name);
  ordered_code::WriteNumIncreasing(&key, extents.starts.size());
  for (size_t d = 0; d < extents.starts.size(); ++d) {
    ordered_code::WriteSignedNumIncreasing(&key, extents.starts[d]);
    ordered_code::WriteSignedNumIncreasing(&key, extents.lengths[d]);
  }
  return key;
}

absl::StatusOr<DecodedSliceKey> DecodeSliceKey(std::string_view key) {
  std::string_view src = key;
  DecodedSliceKey out;
  uint64_t zero = 1, rank = 0;
  if (!ordered_code::ReadNumIncreasing(&src, &zero) || zero != 0) {
    return absl::InvalidArgumentError("slice key does not start with 00");
  }
  if (!ordered_code::ReadString(&src, &out.name)) {
    return absl::InvalidArgumentError("slice key has a malformed tensor name");
  }
  if (!ordered_code::ReadNumIncreasing(&src, &rank) || rank > 254) {
    return absl::InvalidArgumentError("slice key has a malformed rank");
  }
  for (uint64_t d = 0; d < rank; ++d) {
    int64_t start, length;
    if (!ordered_code::ReadSignedNumIncreasing(&src, &start) ||
        !ordered_code::ReadSignedNumIncreasing(&src, &length)) {
      return absl::InvalidArgumentError(StrCat("slice key has a malformed extent ", d));
    }
    if (length < 0) {  // TF: a negative length means the whole dimension
      start = 0;
      length = -1;
    }
    out.extents.starts.push_back(start);
    out.extents.lengths.push_back(length);
  }
  if (!src.empty()) return absl::InvalidArgumentError("slice key has trailing bytes");
  return out;
}

}  // namespace tfckpt
