// npz: an .npz archive opened as `convert -o X.npz` opens its output to verify it (OpenNpz:
// libzip's directory, our own read of it for members read in place, each member's .npy
// header), then every tensor read each way a reader of it does: whole (Read, CRC-32
// checked), streamed for its CRC (VerifyCrc), a range and the CRC fed by the caller
// (ReadRange + StartPayloadCheck, as the comparison of a verification reads it), values and
// statistics; and the archive compared with itself as a verification compares it with its
// source. Input: the .npz file.
#include <cstddef>
#include <cstdint>

#include "format/npz/npz_reader.h"
#include "fuzz_util.h"
#include "model/values.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "validate/compare.h"
#include "validate/validate.h"
#include "model/piece_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tfckpt::fuzz::ScratchDir() + "/m.npz";
  tfckpt::fuzz::WriteFile(path, std::string_view(reinterpret_cast<const char*>(data), size));
  auto c = tfckpt::OpenNpz(path);
  if (!c.ok()) return 0;
  std::string buffer;
  int budget = 16;  // the first tensors only: enough to reach every path of the reader
  for (const tfckpt::TensorEntry& t : (*c)->tensors()) {
    if (--budget < 0) break;
    for (const tfckpt::StoredSlice& s : t.slices) {
      (void)(*c)->Read(t, s);
      (void)(*c)->VerifyCrc(t, s, &buffer);
      // (The calls below require a tensor without a defect, of a fixed-size dtype: a string
      // tensor's payload is re-encoded, its size not the member's.)
      const tfckpt::DTypeInfo* info = tfckpt::LookupDType(t.dtype);
      if (!t.defect.empty() || info == nullptr || info->element_size == 0) continue;
      const uint64_t n = s.data.size;
      tfckpt::TensorBytes owner;
      auto whole = (*c)->ReadRange(t, s, 0, n, &buffer, &owner);
      if (auto check = (*c)->StartPayloadCheck(t, s); check != nullptr && whole.ok()) {
        check->Feed(*whole);
        (void)check->Finish();
      }
      (void)(*c)->ReadRange(t, s, n / 3, n - n / 3, &buffer, &owner);
    }
    tfckpt::PrintOptions po;
    (void)tfckpt::FormatValues(**c, t, po);
    (void)tfckpt::ComputeStats(**c, t);
  }
  tfckpt::CompareOptions co;
  co.jobs = 1;
  co.by_checksum = true;
  co.strings_without_trailing_nul = true;
  tfckpt::ValidateReport report;
  (void)tfckpt::CompareCheckpoints(**c, **c, nullptr, co, &report);
  return 0;
}
