#include "model/values.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "model/tensor_encoding.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {
namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

// Small floats (float8 variants, float4): sign, `e` exponent bits, `m` mantissa bits.
struct MiniFloat {
  int e, m, bias;
  bool ieee_inf;   // all-ones exponent means Inf/NaN (e5m2)
  bool nan_80;     // the only NaN is 0x80 (the *fnuz types)
  bool nan_all;    // S.1111.111 is NaN (e4m3fn)
};

double DecodeMini(uint8_t x, const MiniFloat& f) {
  const int bits = 1 + f.e + f.m;
  x &= static_cast<uint8_t>((1u << bits) - 1);
  const int sign = (x >> (f.e + f.m)) & 1;
  const int exp = (x >> f.m) & ((1 << f.e) - 1);
  const int man = x & ((1 << f.m) - 1);
  if (f.nan_80 && x == 0x80) return std::numeric_limits<double>::quiet_NaN();
  if (f.nan_all && exp == (1 << f.e) - 1 && man == (1 << f.m) - 1) return std::numeric_limits<double>::quiet_NaN();
  if (f.ieee_inf && exp == (1 << f.e) - 1) {
    return man == 0 ? (sign ? -1.0 : 1.0) * std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
  }
  double v = exp == 0 ? std::ldexp(man, 1 - f.bias - f.m) : std::ldexp(man + (1 << f.m), exp - f.bias - f.m);
  return sign ? -v : v;
}

const MiniFloat* MiniFor(DType t) {
  static const MiniFloat e5m2{5, 2, 15, true, false, false}, e4m3fn{4, 3, 7, false, false, true},
      e4m3fnuz{4, 3, 8, false, true, false}, e4m3b11{4, 3, 11, false, true, false},
      e5m2fnuz{5, 2, 16, false, true, false}, e2m1{2, 1, 1, false, false, false};
  switch (t) {
    case DType::kFloat8E5M2: return &e5m2;
    case DType::kFloat8E4M3FN: return &e4m3fn;
    case DType::kFloat8E4M3FNUZ: return &e4m3fnuz;
    case DType::kFloat8E4M3B11FNUZ: return &e4m3b11;
    case DType::kFloat8E5M2FNUZ: return &e5m2fnuz;
    case DType::kFloat4E2M1FN: return &e2m1;
    default: return nullptr;
  }
}

// `v` with `digits` significant digits: positional for 1e-4 <= |v| < 1e16 (as numpy
// prints), scientific otherwise; integral values keep a ".0".
std::string RenderFloat(double v, int digits) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[400];
  const double a = std::fabs(v);
  std::to_chars_result r;
  if (a == 0 || (a >= 1e-4 && a < 1e16)) {
    const int exp10 = a == 0 ? 0 : static_cast<int>(std::floor(std::log10(a)));
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, std::max(0, digits - 1 - exp10));
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, std::max(0, digits - 1));
  }
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Significant digits of the shortest decimal that reads back as `v` exactly.
int ShortestDigits(double v, bool single) {
  char buf[64];
  auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific)
                  : std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  int digits = 0;
  for (char* p = buf; p < r.ptr && *p != 'e'; ++p) digits += (*p >= '0' && *p <= '9');
  return std::max(1, digits);
}

// For narrow floats (16 and 8 bits): the fewest digits whose decimal lies closer to `v`
// than to either neighbouring value of the type (`lo`, `hi`; NaN when there is none).
int NarrowDigits(double v, double lo, double hi) {
  char buf[64];
  for (int digits = 1; digits < 17; ++digits) {
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, digits - 1);
    const double b = std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
    const bool above_lo = std::isnan(lo) || b > (lo + v) / 2;
    const bool below_hi = std::isnan(hi) || b < (v + hi) / 2;
    if (above_lo && below_hi) return digits;
  }
  return 17;
}

// For narrow floats (16 and 8 bits), finite `v` decoded from `p`: the significant digits
// that identify it among its neighbours, the bit patterns one above and below.
int NarrowFloatDigits(int32_t dtype, const char* p, double v) {
  const DTypeInfo* info = LookupDType(dtype);
  const int width = info != nullptr ? info->element_size : 1;
  const uint16_t bits = width == 2 ? Load<uint16_t>(p) : Load<uint8_t>(p);
  auto neighbour = [&](int delta) {
    const uint16_t nb = static_cast<uint16_t>(bits + delta);
    char tmp[2];
    std::memcpy(tmp, &nb, 2);
    const double n = ElementToDouble(dtype, tmp);
    return std::isfinite(n) ? n : std::numeric_limits<double>::quiet_NaN();
  };
  double a = neighbour(-1), b = neighbour(+1);
  // Past the largest finite value the spacing continues (65504 is "6.55e+04" in float16).
  if (std::isnan(a)) a = 2 * v - b;
  if (std::isnan(b)) b = 2 * v - a;
  return NarrowDigits(v, std::min(a, b), std::max(a, b));
}

std::string Quote(std::string_view s) {
  std::string out = "b'";
  for (unsigned char c : s) {
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out + "'";
}

}  // namespace

double ElementToDouble(int32_t dtype, const char* p) {
  const DType t = static_cast<DType>(dtype);
  switch (t) {
    case DType::kFloat: return Load<float>(p);
    case DType::kDouble: return Load<double>(p);
    case DType::kBFloat16: return FromBits(static_cast<uint32_t>(Load<uint16_t>(p)) << 16);
    case DType::kHalf: return HalfToFloat(Load<uint16_t>(p));
    case DType::kInt8: case DType::kQInt8: return Load<int8_t>(p);
    case DType::kUInt8: case DType::kQUInt8: return Load<uint8_t>(p);
    case DType::kInt16: case DType::kQInt16: return Load<int16_t>(p);
    case DType::kUInt16: case DType::kQUInt16: return Load<uint16_t>(p);
    case DType::kInt32: case DType::kQInt32: return Load<int32_t>(p);
    case DType::kUInt32: return Load<uint32_t>(p);
    case DType::kInt64: return static_cast<double>(Load<int64_t>(p));
    case DType::kUInt64: return static_cast<double>(Load<uint64_t>(p));
    case DType::kBool: return Load<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case DType::kInt4: return static_cast<int8_t>(static_cast<uint8_t>(Load<uint8_t>(p) << 4)) >> 4;
    case DType::kUInt4: return Load<uint8_t>(p) & 0x0f;
    case DType::kInt2: return static_cast<int8_t>(static_cast<uint8_t>(Load<uint8_t>(p) << 6)) >> 6;
    case DType::kUInt2: return Load<uint8_t>(p) & 0x03;
    default:
      if (const MiniFloat* f = MiniFor(t)) return DecodeMini(Load<uint8_t>(p), *f);
      return std::numeric_limits<double>::quiet_NaN();
  }
}

std::string FormatElement(int32_t dtype, const char* p) {
  const DType t = static_cast<DType>(dtype);
  switch (t) {
    case DType::kFloat: {
      const float f = Load<float>(p);
      return RenderFloat(f, ShortestDigits(f, true));
    }
    case DType::kDouble: {
      const double d = Load<double>(p);
      return RenderFloat(d, ShortestDigits(d, false));
    }
    case DType::kInt64: return StrCat(Load<int64_t>(p));
    case DType::kUInt64: return StrCat(Load<uint64_t>(p));
    case DType::kBool: return Load<uint8_t>(p) ? "True" : "False";
    case DType::kComplex64:
      return StrCat("(", FormatElement(1, p), "+", FormatElement(1, p + 4), "j)");
    case DType::kComplex128:
      return StrCat("(", FormatElement(2, p), "+", FormatElement(2, p + 8), "j)");
    default: {
      const DTypeInfo* info = LookupDType(dtype);
      const double v = ElementToDouble(dtype, p);
      if (info != nullptr && info->kind != ValueKind::kFloat) return StrCat(static_cast<int64_t>(v));
      if (!std::isfinite(v)) return RenderFloat(v, 1);
      return RenderFloat(v, NarrowFloatDigits(dtype, p, v));
    }
  }
}

namespace {

// One fixed-size element as JSON text (see FormatValues).
std::string JsonElement(int32_t dtype, const char* p) {
  switch (static_cast<DType>(dtype)) {
    case DType::kBool: return Load<uint8_t>(p) ? "true" : "false";
    case DType::kComplex64: return StrCat("[", JsonElement(1, p), ", ", JsonElement(1, p + 4), "]");
    case DType::kComplex128: return StrCat("[", JsonElement(2, p), ", ", JsonElement(2, p + 8), "]");
    default: {
      std::string text = FormatElement(dtype, p);
      if (text == "nan" || text == "inf" || text == "-inf") return StrCat("\"", text, "\"");
      return text;
    }
  }
}

std::string JsonString(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

constexpr int kPrintPrecision = 8;  // numpy's default print precision
constexpr size_t kLineWidth = 75;   // numpy's default line width

// A finite float as its shortest decimal: digits[0].digits[1...] x 10^exp10, without
// trailing zeros (at least one digit).
struct Decimal {
  bool negative = false;
  std::string digits;
  int exp10 = 0;
};

// Parses to_chars' scientific text ("-1.25e+03").
Decimal ParseScientific(std::string_view s) {
  Decimal d;
  size_t i = 0;
  if (!s.empty() && s[0] == '-') {
    d.negative = true;
    i = 1;
  }
  for (; i < s.size() && s[i] != 'e'; ++i) {
    if (s[i] >= '0' && s[i] <= '9') d.digits += s[i];
  }
  if (i + 1 < s.size()) {
    const char* p = s.data() + i + 1;
    if (*p == '+') ++p;
    std::from_chars(p, s.data() + s.size(), d.exp10);
  }
  while (d.digits.size() > 1 && d.digits.back() == '0') d.digits.pop_back();
  return d;
}

// The shortest decimal that reads back as the element (a finite float of `dtype`).
Decimal ShortestDecimal(int32_t dtype, const char* p, double v) {
  char buf[64];
  std::to_chars_result r;
  if (dtype == static_cast<int32_t>(DType::kFloat) || dtype == static_cast<int32_t>(DType::kBFloat16)) {
    // bfloat16 prints as numpy prints it as float32 (numpy has no bfloat16).
    r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v), std::chars_format::scientific);
  } else if (dtype == static_cast<int32_t>(DType::kDouble)) {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, NarrowFloatDigits(dtype, p, v) - 1);
  }
  return ParseScientific(std::string_view(buf, r.ptr - buf));
}

// The parts numpy pads separately: sign and integer digits, fraction digits, exponent.
struct FloatParts {
  std::string integer, fraction, exponent;
};

void TrimZeros(std::string* s) {
  while (!s->empty() && s->back() == '0') s->pop_back();
}

// numpy's dragon4_positional(unique=True, precision=8, trim='.'): the shortest digits,
// rounded to 8 fraction digits when they need more.
FloatParts Positional(const Decimal& d, double v) {
  FloatParts f;
  const int fraction_digits = static_cast<int>(d.digits.size()) - 1 - d.exp10;
  // Digits that stop short of the units are extended with the exact value's (numpy's
  // min_digits=0: float16 65504 is "65504.", not "65500.").
  if (fraction_digits > kPrintPrecision || fraction_digits < 0) {
    char buf[400];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, std::max(0, std::min(fraction_digits, kPrintPrecision)));
    const std::string_view text(buf, r.ptr - buf);
    const size_t dot = std::min(text.find('.'), text.size());
    f.integer = std::string(text.substr(0, dot));
    if (dot < text.size()) f.fraction = std::string(text.substr(dot + 1));
    TrimZeros(&f.fraction);
    return f;
  }
  if (d.exp10 >= 0) {
    const size_t int_digits = static_cast<size_t>(d.exp10) + 1;
    f.integer = d.digits.substr(0, int_digits);
    f.integer.resize(int_digits, '0');
    if (d.digits.size() > int_digits) f.fraction = d.digits.substr(int_digits);
  } else {
    f.integer = "0";
    f.fraction = std::string(static_cast<size_t>(-d.exp10 - 1), '0') + d.digits;
  }
  if (d.negative) f.integer.insert(0, "-");
  return f;
}

// numpy's dragon4_scientific(unique=True, precision=8, trim='.').
FloatParts Scientific(Decimal d, double v) {
  if (d.digits.size() - 1 > static_cast<size_t>(kPrintPrecision)) {
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, kPrintPrecision);
    d = ParseScientific(std::string_view(buf, r.ptr - buf));
  }
  FloatParts f;
  f.integer = StrCat(d.negative ? "-" : "", d.digits.substr(0, 1));
  f.fraction = d.digits.substr(1);
  f.exponent = StrCat(d.exp10 < 0 ? "-" : "+", std::abs(d.exp10));
  return f;
}

std::string PadLeft(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

// numpy's FloatingFormat (floatmode 'maxprec', precision 8, no suppression) over the
// printed elements of one array: a common notation and common column widths.
std::vector<std::string> FormatFloats(int32_t dtype, const std::vector<std::string>& raw) {
  std::vector<double> v(raw.size());
  double max_abs = 0, min_abs = std::numeric_limits<double>::infinity();
  bool any_finite = false, neg_inf = false, non_finite = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    v[i] = ElementToDouble(dtype, raw[i].data());
    if (!std::isfinite(v[i])) {
      non_finite = true;
      neg_inf |= std::isinf(v[i]) && v[i] < 0;
      continue;
    }
    any_finite = true;
    if (v[i] != 0) {
      max_abs = std::max(max_abs, std::fabs(v[i]));
      min_abs = std::min(min_abs, std::fabs(v[i]));
    }
  }
  const bool exp_format = max_abs != 0 && (max_abs >= 1e8 || min_abs < 1e-4 || max_abs / min_abs > 1000.0);
  std::vector<FloatParts> parts(raw.size());
  size_t pad_left = 0, pad_right = 0, exp_digits = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (!std::isfinite(v[i])) continue;
    const Decimal d = ShortestDecimal(dtype, raw[i].data(), v[i]);
    parts[i] = exp_format ? Scientific(d, v[i]) : Positional(d, v[i]);
    pad_left = std::max(pad_left, parts[i].integer.size());
    pad_right = std::max(pad_right, parts[i].fraction.size());
    if (exp_format) exp_digits = std::max({exp_digits, size_t{2}, parts[i].exponent.size() - 1});
  }
  const size_t precision = pad_right;  // scientific: every fraction zero-padded to this
  if (exp_format) pad_right = exp_digits + 2 + precision;
  if (!any_finite) pad_left = pad_right = 0;
  if (non_finite) {
    const size_t offset = pad_right + 1, inf_len = 3 + (neg_inf ? 1 : 0);
    pad_left = std::max({pad_left, 3 > offset ? 3 - offset : 0, inf_len > offset ? inf_len - offset : 0});
  }
  std::vector<std::string> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (!std::isfinite(v[i])) {
      out[i] = PadLeft(std::isnan(v[i]) ? "nan" : v[i] < 0 ? "-inf" : "inf", pad_left + pad_right + 1);
      continue;
    }
    const FloatParts& f = parts[i];
    if (exp_format) {
      // Every element shows `precision` fraction digits of its exact value (numpy's
      // min_digits), the exponent zero-padded to a common width.
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof buf, v[i], std::chars_format::scientific, static_cast<int>(precision));
      FloatParts e = Scientific(ParseScientific(std::string_view(buf, r.ptr - buf)), v[i]);
      e.fraction.resize(precision, '0');
      std::string exponent = e.exponent.substr(1);
      exponent.insert(0, exp_digits - std::min(exp_digits, exponent.size()), '0');
      out[i] = StrCat(PadLeft(e.integer, pad_left), ".", e.fraction, "e", e.exponent.substr(0, 1), exponent);
    } else {
      out[i] = StrCat(PadLeft(f.integer, pad_left), ".", f.fraction,
                      std::string(pad_right - f.fraction.size(), ' '));
    }
  }
  return out;
}

// The printed elements of one array, formatted as numpy formats them together: floats
// by FormatFloats, integers right-aligned to the widest, booleans as " True"/"False".
std::vector<std::string> FormatColumns(int32_t dtype, const std::vector<std::string>& raw, bool scalar) {
  const DTypeInfo* info = LookupDType(dtype);
  if (info->kind == ValueKind::kFloat) return FormatFloats(dtype, raw);
  std::vector<std::string> out(raw.size());
  size_t width = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    out[i] = FormatElement(dtype, raw[i].data());
    width = std::max(width, out[i].size());
  }
  if (info->kind == ValueKind::kSigned || info->kind == ValueKind::kUnsigned ||
      (info->kind == ValueKind::kBool && !scalar)) {
    for (std::string& s : out) s = PadLeft(std::move(s), info->kind == ValueKind::kBool ? 5 : width);
  }
  return out;
}

// Finds the element at a full-tensor index among the stored pieces of a tensor.
class ElementSource {
 public:
  ElementSource(const Checkpoint& c, const TensorEntry& t, bool json)
      : c_(c), t_(t), info_(LookupDType(t.dtype)), json_(json) {}

  // Fixed-size elements: their bytes. Strings and variants: their printed text.
  absl::StatusOr<std::string> Get(const std::vector<int64_t>& index) {
    for (size_t k = 0; k < t_.slices.size(); ++k) {
      const size_t i = (last_ + k) % t_.slices.size();
      const StoredSlice& s = t_.slices[i];
      if (!s.region.Contains(index)) continue;
      last_ = i;
      TFCKPT_ASSIGN_OR_RETURN(const Piece* piece, Load(i));
      int64_t local = 0;
      for (size_t d = 0; d < index.size(); ++d) local = local * s.region.shape[d] + (index[d] - s.region.start[d]);
      if (info_->element_size == 0) {
        if (t_.dtype == static_cast<int32_t>(DType::kVariant)) {
          std::string text = StrCat("<variant ", piece->elements[local].size(), " bytes>");
          return json_ ? JsonString(text) : text;
        }
        return json_ ? JsonString(piece->elements[local]) : Quote(piece->elements[local]);
      }
      return std::string(piece->bytes.data.substr(local * info_->element_size, info_->element_size));
    }
    std::string idx;
    for (int64_t x : index) StrAppend(&idx, idx.empty() ? "" : ",", x);
    return absl::DataLossError(StrCat("element [", idx, "] of \"", t_.name, "\" is in no stored slice"));
  }

 private:
  struct Piece {
    TensorBytes bytes;
    std::vector<std::string_view> elements;  // strings and variants
  };
  absl::StatusOr<const Piece*> Load(size_t i) {
    auto it = cache_.find(i);
    if (it != cache_.end()) return &it->second;
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c_.Read(t_, t_.slices[i]));
    Piece p{std::move(b), {}};
    const int64_t n = t_.slices[i].region.num_elements();
    if (t_.dtype == static_cast<int32_t>(DType::kString)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeStrings(p.bytes.data, n));
      p.elements = std::move(d.elements);
    } else if (t_.dtype == static_cast<int32_t>(DType::kVariant)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeVariants(p.bytes.data, n));
      p.elements = std::move(d.elements);
    }
    return &cache_.emplace(i, std::move(p)).first->second;
  }

  const Checkpoint& c_;
  const TensorEntry& t_;
  const DTypeInfo* info_;
  const bool json_;
  std::map<size_t, Piece> cache_;
  size_t last_ = 0;
};

// The indices numpy prints along an axis of length n: all, or the edges of a summary.
std::vector<int64_t> ShownIndices(int64_t n, bool summarise, int edge) {
  std::vector<int64_t> shown;
  const bool cut = summarise && n > 2 * edge;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == edge) i = n - edge;
    shown.push_back(i);
  }
  return shown;
}

// Reads the printed elements in printing order.
absl::Status Collect(ElementSource& src, const Shape& shape, bool summarise, int edge, size_t depth,
                     std::vector<int64_t>& index, std::vector<std::string>* out) {
  if (depth == shape.size()) {
    TFCKPT_ASSIGN_OR_RETURN(std::string e, src.Get(index));
    out->push_back(std::move(e));
    return absl::OkStatus();
  }
  for (int64_t i : ShownIndices(shape[depth], summarise, edge)) {
    index[depth] = i;
    TFCKPT_RETURN_IF_ERROR(Collect(src, shape, summarise, edge, depth + 1, index, out));
  }
  return absl::OkStatus();
}

// numpy's _formatArray with separator ' ': rows wrap before `width` columns, sub-arrays are
// separated by (axes left - 1) blank lines and indented to their bracket. `words` are the
// formatted elements in printing order, consumed from `next`.
class Layout {
 public:
  Layout(const Shape& shape, bool summarise, int edge, const std::vector<std::string>& words)
      : shape_(shape), summarise_(summarise), edge_(edge), words_(words) {}

  std::string Axis(size_t depth, const std::string& indent, size_t width) {
    const bool cut = summarise_ && shape_[depth] > 2 * edge_;
    const size_t count = ShownIndices(shape_[depth], summarise_, edge_).size();
    std::string s;
    if (depth + 1 == shape_.size()) {
      std::string line = indent;
      for (size_t i = 0; i < count; ++i) {
        if (cut && i == static_cast<size_t>(edge_)) Extend(&s, &line, "...", width - 1, indent) += ' ';
        Extend(&s, &line, words_[next_++], width - 1, indent);
        if (i + 1 < count) line += ' ';
      }
      s += line;
    } else {
      const std::string sep(shape_.size() - depth - 1, '\n');
      for (size_t i = 0; i < count; ++i) {
        if (cut && i == static_cast<size_t>(edge_)) s += indent + "..." + sep;
        s += indent + Axis(depth + 1, indent + " ", width - 1);
        if (i + 1 < count) s += sep;
      }
    }
    return "[" + s.substr(indent.size()) + "]";
  }

  // The same elements as nested JSON arrays, "..." in place of a summary's gap.
  std::string Json(size_t depth) {
    const bool cut = summarise_ && shape_[depth] > 2 * edge_;
    const size_t count = ShownIndices(shape_[depth], summarise_, edge_).size();
    std::string s = "[";
    for (size_t i = 0; i < count; ++i) {
      if (cut && i == static_cast<size_t>(edge_)) s += "\"...\", ";
      s += depth + 1 == shape_.size() ? words_[next_++] : Json(depth + 1);
      if (i + 1 < count) s += ", ";
    }
    return s + "]";
  }

 private:
  // numpy's _extendLine: wraps before `word` when the line would pass `width` (unless the
  // line holds nothing but its indent).
  static std::string& Extend(std::string* s, std::string* line, const std::string& word, size_t width,
                             const std::string& indent) {
    if (line->size() + word.size() > width && line->size() > indent.size()) {
      while (!line->empty() && line->back() == ' ') line->pop_back();
      *s += *line + "\n";
      *line = indent;
    }
    *line += word;
    return *line;
  }

  const Shape& shape_;
  bool summarise_;
  int edge_;
  const std::vector<std::string>& words_;
  size_t next_ = 0;
};

}  // namespace

absl::StatusOr<std::string> FormatValues(const Checkpoint& c, const TensorEntry& t, const PrintOptions& options) {
  const DTypeInfo* info = LookupDType(t.dtype);
  if (info == nullptr) {
    return absl::DataLossError(StrCat(t.name, ": cannot print values of dtype ", DTypeName(t.dtype)));
  }
  TFCKPT_ASSIGN_OR_RETURN(int64_t n, NumElements(t.shape));
  if (n == 0) return std::string("[]");
  const bool summarise = !options.all_values && n > options.threshold;
  ElementSource src(c, t, options.json);
  std::vector<int64_t> index(t.shape.size(), 0);
  std::vector<std::string> raw;
  TFCKPT_RETURN_IF_ERROR(Collect(src, t.shape, summarise, options.edge_items, 0, index, &raw));
  if (options.json) {
    if (info->element_size != 0) {
      for (std::string& e : raw) e = JsonElement(t.dtype, e.data());
    }
    if (t.shape.empty()) return raw[0];
    return Layout(t.shape, summarise, options.edge_items, raw).Json(0);
  }
  const bool text = info->element_size == 0 || info->kind == ValueKind::kComplex;
  if (text && info->kind == ValueKind::kComplex) {
    for (std::string& e : raw) e = FormatElement(t.dtype, e.data());
  }
  const std::vector<std::string> words = text ? raw : FormatColumns(t.dtype, raw, t.shape.empty());
  if (t.shape.empty()) return words[0];
  return Layout(t.shape, summarise, options.edge_items, words).Axis(0, " ", kLineWidth);
}

}  // namespace tfckpt
