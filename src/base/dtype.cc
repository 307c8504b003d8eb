#include "tfckpt/strings.h"
#include "tfckpt/dtype.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace tfckpt {
namespace {

using K = ValueKind;

// Indexed by DataType value; entries with an empty name cannot be stored in a bundle.
constexpr std::array<DTypeInfo, 34> kTable = {{
    {DType::kInvalid, "", 0, K::kNone, 0},
    {DType::kFloat, "float32", 4, K::kFloat, 4},
    {DType::kDouble, "float64", 8, K::kFloat, 8},
    {DType::kInt32, "int32", 4, K::kSigned, 4},
    {DType::kUInt8, "uint8", 1, K::kUnsigned, 1},
    {DType::kInt16, "int16", 2, K::kSigned, 2},
    {DType::kInt8, "int8", 1, K::kSigned, 1},
    {DType::kString, "string", 0, K::kString, 0},
    {DType::kComplex64, "complex64", 8, K::kComplex, 4},
    {DType::kInt64, "int64", 8, K::kSigned, 8},
    {DType::kBool, "bool", 1, K::kBool, 1},
    {DType::kQInt8, "qint8", 1, K::kSigned, 1},
    {DType::kQUInt8, "quint8", 1, K::kUnsigned, 1},
    {DType::kQInt32, "qint32", 4, K::kSigned, 4},
    {DType::kBFloat16, "bfloat16", 2, K::kFloat, 2},
    {DType::kQInt16, "qint16", 2, K::kSigned, 2},
    {DType::kQUInt16, "quint16", 2, K::kUnsigned, 2},
    {DType::kUInt16, "uint16", 2, K::kUnsigned, 2},
    {DType::kComplex128, "complex128", 16, K::kComplex, 8},
    {DType::kHalf, "float16", 2, K::kFloat, 2},
    {DType::kResource, "", 0, K::kNone, 0},
    {DType::kVariant, "variant", 0, K::kVariant, 0},
    {DType::kUInt32, "uint32", 4, K::kUnsigned, 4},
    {DType::kUInt64, "uint64", 8, K::kUnsigned, 8},
    {DType::kFloat8E5M2, "float8_e5m2", 1, K::kFloat, 1},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", 1, K::kFloat, 1},
    {DType::kFloat8E4M3FNUZ, "float8_e4m3fnuz", 1, K::kFloat, 1},
    {DType::kFloat8E4M3B11FNUZ, "float8_e4m3b11fnuz", 1, K::kFloat, 1},
    {DType::kFloat8E5M2FNUZ, "float8_e5m2fnuz", 1, K::kFloat, 1},
    {DType::kInt4, "int4", 1, K::kSigned, 1},
    {DType::kUInt4, "uint4", 1, K::kUnsigned, 1},
    {DType::kInt2, "int2", 1, K::kSigned, 1},
    {DType::kUInt2, "uint2", 1, K::kUnsigned, 1},
    {DType::kFloat4E2M1FN, "float4_e2m1fn", 1, K::kFloat, 1},
}};

}  // namespace

const DTypeInfo* LookupDType(int32_t value) {
  if (value < 0 || value >= static_cast<int32_t>(kTable.size())) return nullptr;
  const DTypeInfo& info = kTable[value];
  return info.name.empty() ? nullptr : &info;
}

std::string DTypeName(int32_t value) {
  if (const DTypeInfo* info = LookupDType(value)) return std::string(info->name);
  if (value == static_cast<int32_t>(DType::kResource)) return "resource";
  return StrCat("unknown(", value, ")");
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const DTypeInfo& info : kTable) {
    if (!info.name.empty() && info.name == name) return info.dtype;
  }
  if (name == "float") return DType::kFloat;
  if (name == "double") return DType::kDouble;
  if (name == "half") return DType::kHalf;
  return std::nullopt;
}

}  // namespace tfckpt
