// Payload layouts of tensors in data files (docs/FORMAT.md §c.3–§c.6) and their checksums.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt {

struct DecodedElements {
  std::vector<std::string_view> elements;  // views into the payload
  uint32_t crc = 0;                        // unmasked entry CRC recomputed from the payload
};

// Decodes a DT_STRING payload of `n` elements: n varint64 lengths, the masked CRC of the
// lengths (checked), then the bytes. The parts must use exactly the whole payload.
// `big_endian`: the writer's byte order for the length words (docs/FORMAT.md §c.4).
absl::StatusOr<DecodedElements> DecodeStrings(std::string_view payload, int64_t n, bool big_endian = false);

// Decodes a DT_VARIANT payload of `n` elements (varint64 length, bytes, masked running CRC
// per element; each per-element CRC is checked).
absl::StatusOr<DecodedElements> DecodeVariants(std::string_view payload, int64_t n);

// Appends the DT_STRING payload of `elements` to `out` and returns its unmasked CRC.
uint32_t EncodeStrings(const std::vector<std::string_view>& elements, std::string* out);

// The unmasked entry CRC of a payload: CRC-32C of the bytes for fixed-size dtypes, the
// structured CRC for strings and variants (which also checks their inner checksums).
// REQUIRES: dtype is known (LookupDType != nullptr).
absl::StatusOr<uint32_t> PayloadCrc(int32_t dtype, std::string_view payload, int64_t n, bool big_endian = false);

// Swaps each element of a fixed-size payload from big- to little-endian in place.
void SwapToLittleEndian(int32_t dtype, char* data, size_t size);

}  // namespace tfckpt
