// After a call into a library that may use AVX or AVX-512 (ISA-L's CRC kernels pick them
// where the CPU has them) and return with the upper halves of the vector registers in use:
// until a vzeroupper, code compiled for the x86-64 baseline (SSE, as GCC vectorises our
// loops) runs about 3x slower on this project's machines (AMD EPYC VM; measured 2026-11-26:
// an averaging loop 1.91 ns an element after ISA-L's crc32_iscsi, 0.64 ns with a
// vzeroupper between; merge --average spent 3 s instead of 0.7 s on 4 GiB).
#pragma once

namespace tfckpt {

inline void ClearUpperVectorState() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx = __builtin_cpu_supports("avx");
  // (Only the upper halves are cleared: the SSE registers the caller may hold keep their
  // values.)
  if (avx) asm volatile("vzeroupper" ::: "memory");
#endif
}

}  // namespace tfckpt
