// Little-endian fixed-width integers and LEB128 varints, bounds-checked on decode.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tfckpt {

inline uint32_t DecodeFixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // hosts we build for are little-endian (checked in coding.cc)
}
inline uint64_t DecodeFixed64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void PutFixed32(std::string* dst, uint32_t v) { dst->append(reinterpret_cast<const char*>(&v), 4); }
inline void PutFixed64(std::string* dst, uint64_t v) { dst->append(reinterpret_cast<const char*>(&v), 8); }

void PutVarint64(std::string* dst, uint64_t v);
int VarintLength(uint64_t v);

// Consumes a varint from the front of `*src`. False when it is truncated or longer than
// `max_bytes` (5 for varint32, 10 for varint64) or its value does not fit.
bool GetVarint64(std::string_view* src, uint64_t* v);
bool GetVarint32(std::string_view* src, uint32_t* v);

}  // namespace tfckpt
