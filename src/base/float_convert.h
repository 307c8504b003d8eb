// Conversions between float32 and the 16-bit float formats, array at a time (loops the
// compiler can vectorise; no per-element call through a pointer).
//
// float32 -> bfloat16 / float16: round to nearest, ties to even. NaN stays NaN (sign and
// the leading payload bits kept, quiet bit set); +-Inf stay Inf; float16 overflow gives
// Inf; float16 subnormals are rounded correctly. The widening conversions are exact.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tfckpt {

uint16_t FloatToBFloat16(float f);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
float HalfToFloat(uint16_t h);

// REQUIRES: `out` holds n elements; `in` and `out` may be unaligned byte buffers
// (little-endian element layout).
void FloatsToBFloat16(const char* in, size_t n, char* out);
void FloatsToHalf(const char* in, size_t n, char* out);
void BFloat16sToFloat(const char* in, size_t n, char* out);
void HalvesToFloat(const char* in, size_t n, char* out);
void DoublesToFloat(const char* in, size_t n, char* out);
void FloatsToDouble(const char* in, size_t n, char* out);

// The casts `convert --cast` offers: float32 -> bfloat16 / float16 / float64, bfloat16 /
// float16 / float64 -> float32 (dtype values as in dtype.h).
bool CastSupported(int32_t from, int32_t to);
// REQUIRES: CastSupported(from, to); `out` holds n elements of `to`.
void CastElements(int32_t from, int32_t to, const char* in, size_t n, char* out);

}  // namespace tfckpt
