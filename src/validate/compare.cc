// The logical comparison of two checkpoints (compare.h): validate --against, merge's
// collapse checks, the verification of every written output.
#include "validate/compare.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/match.h"

#include "base/crc32c.h"
#include "base/float_convert.h"
#include "base/parallel.h"
#include "model/tensor_encoding.h"
#include "model/values.h"
#include "run/run.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "model/piece_reader.h"

namespace tfckpt {

namespace {

Finding Make(std::string check, Severity sev, std::string file, std::string key, int64_t offset, std::string msg) {
  return Finding{std::move(check), sev, std::move(file), std::move(key), offset, std::move(msg)};
}

struct Loaded {
  TensorBytes bytes;
  std::vector<std::string_view> elements;  // strings
};

absl::StatusOr<std::vector<Loaded>> LoadAll(const Checkpoint& c, const TensorEntry& t) {
  std::vector<Loaded> out;
  for (const auto& s : t.slices) {
    TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(t, s, /*verify=*/true));
    Loaded l{std::move(b), {}};
    if (t.dtype == static_cast<int32_t>(DType::kString)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeStrings(l.bytes.data, s.region.num_elements()));
      l.elements = std::move(d.elements);
    } else if (t.dtype == static_cast<int32_t>(DType::kVariant)) {
      TFCKPT_ASSIGN_OR_RETURN(auto d, DecodeVariants(l.bytes.data, s.region.num_elements()));
      l.elements = std::move(d.elements);
    }
    out.push_back(std::move(l));
  }
  return out;
}

// The index in the full tensor of the element at offset `local` of region `r`, into `idx`.
void FullIndex(const Region& r, int64_t local, std::vector<int64_t>* idx) {
  idx->resize(r.rank());
  for (size_t d = r.rank(); d-- > 0;) {
    (*idx)[d] = r.start[d] + local % r.shape[d];
    local /= r.shape[d];
  }
}

std::string StringText(std::string_view e) {
  std::string s(e.substr(0, 64));
  return StrCat("b'", PrintableKey(s), e.size() > 64 ? "...'" : "'");
}

bool Numeric(ValueKind k) {
  return k == ValueKind::kFloat || k == ValueKind::kSigned || k == ValueKind::kUnsigned || k == ValueKind::kBool;
}

// |new - old|: 0 for two NaNs, infinite when only one side is NaN.
double AbsDiff(double u, double v) {
  if (std::isnan(u) && std::isnan(v)) return 0;
  const double d = std::fabs(u - v);
  return std::isnan(d) ? HUGE_VAL : d;
}

// |new - old| / |old| for the difference `d`: infinite when old is 0 (or not finite).
double RelDiff(double d, double v) {
  if (d == 0) return 0;
  const double r = d / std::fabs(v);
  return std::isnan(r) ? HUGE_VAL : r;
}

// The running ValueDifference of one tensor pair: differing elements are added in any
// order; the first and the largest are kept by their row-major position.
class DiffTracker {
 public:
  DiffTracker(const TensorEntry& a, bool numeric) : strides_(Strides(a.shape)) {
    d_.tensor = a.name;
    d_.elements = NumElements(a.shape).value_or(0);
    d_.numeric = numeric;
  }

  // The element at offset `k` of the new side's region `r` differs by `abs` (relative
  // `rel`; numeric dtypes). `texts()` gives both values as text, only when needed.
  template <typename Texts>
  void Add(const Region& r, int64_t k, double abs, double rel, Texts texts) {
    ++d_.differing;
    FullIndex(r, k, &idx_);
    int64_t linear = 0;
    for (size_t i = 0; i < idx_.size(); ++i) linear += idx_[i] * strides_[i];
    auto element = [&] {
      auto [n, o] = texts();
      return ValueDifference::Element{idx_, std::move(n), std::move(o)};
    };
    if (linear < first_) {
      first_ = linear;
      d_.first = element();
    }
    if (!d_.numeric) return;
    d_.max_rel = std::max(d_.max_rel, rel);
    if (abs > d_.max_abs || (abs == d_.max_abs && linear < max_)) {
      d_.max_abs = abs;
      max_ = linear;
      d_.max = element();
    }
  }

  ValueDifference Take() { return std::move(d_); }

 private:
  std::vector<int64_t> strides_, idx_;
  ValueDifference d_;
  int64_t first_ = INT64_MAX, max_ = INT64_MAX;
};

// Strings and variants: both tensors decoded, compared element by element.
absl::Status CompareElements(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
                             const CompareOptions& options, DiffTracker* diff) {
  auto strip = [&](std::string_view e) {
    if (options.strings_without_trailing_nul) {
      while (!e.empty() && e.back() == '\0') e.remove_suffix(1);
    }
    return e;
  };
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Loaded> la, LoadAll(ca, a));
  TFCKPT_ASSIGN_OR_RETURN(std::vector<Loaded> lb, LoadAll(cb, b));
  for (size_t i = 0; i < a.slices.size(); ++i) {
    for (size_t j = 0; j < b.slices.size(); ++j) {
      auto r = Intersect(a.slices[i].region, b.slices[j].region);
      if (!r && !(a.shape.empty())) continue;
      const Region& inter = r ? *r : a.slices[i].region;
      const Loaded& x = la[i];
      const Loaded& y = lb[j];
      ForEachRun(inter, {&a.slices[i].region, &b.slices[j].region}, [&](const int64_t* off, int64_t n) {
        for (int64_t e = 0; e < n; ++e) {
          const std::string_view u = x.elements[off[0] + e], v = y.elements[off[1] + e];
          if (u == v || strip(u) == strip(v)) continue;
          diff->Add(a.slices[i].region, off[0] + e, 0, 0, [&] { return std::pair(StringText(u), StringText(v)); });
        }
      });
    }
  }
  return absl::OkStatus();
}

// Checks every stored piece of `t`: by its cursor when that read the whole piece in
// order from a V2 little-endian file (the bytes ReadRange gives are then the stored
// bytes), else (or to report a mismatch with its usual error) by VerifyCrc.
absl::Status SettleCrcs(const Checkpoint& c, const TensorEntry& t, const std::vector<crc32c::Cursor>& cursors,
                        std::string* buf) {
  const bool raw = c.info().format == Format::kV2 && !c.info().big_endian;
  for (size_t k = 0; k < t.slices.size(); ++k) {
    const StoredSlice& s = t.slices[k];
    const crc32c::Cursor& cur = cursors[k];
    if (raw && cur.Covered(s.data.size) && cur.crc == crc32c::Unmask(s.data.masked_crc)) continue;
    TFCKPT_RETURN_IF_ERROR(c.VerifyCrc(t, s, buf));
  }
  return absl::OkStatus();
}

// Fixed-size values: each old slice is walked once, chunk by chunk (spans of about
// 1 MiB, read with pread); every new slice overlapping a chunk is compared with it over
// their intersection. Both sides' CRCs are computed on the bytes the comparison reads
// whenever a slice is read front to back (the usual case: one pass over each side); the
// others are checked by VerifyCrc afterwards.
absl::Status CompareFixed(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
                          const CompareOptions& options, DiffTracker* diff) {
  const DTypeInfo* da = LookupDType(a.dtype);
  const int64_t sa = da->element_size, sb = LookupDType(b.dtype)->element_size;
  const bool same_dtype = a.dtype == b.dtype;
  const bool cast = !same_dtype && options.cast;  // b's values cast to a's dtype, then compared bitwise
  const bool bitwise = same_dtype || cast;
  const bool by_value = !bitwise || (options.use_tolerance && da->kind == ValueKind::kFloat);
  const bool numeric = Numeric(da->kind);
  const double tolerance = options.use_tolerance ? options.tolerance : 0;
  std::string stage_a, stage_b, cast_b;
  std::vector<crc32c::Cursor> cur_a(a.slices.size()), cur_b(b.slices.size());
  for (size_t j = 0; j < b.slices.size(); ++j) {
    const Region& rb = b.slices[j].region;
    TensorBytes own_b;
    std::vector<TensorBytes> own_a(a.slices.size());
    TFCKPT_RETURN_IF_ERROR(ForEachChunk(rb, sb, 1 << 20, [&](const Region& chunk) -> absl::Status {
      // A stop ends the comparison here, within a chunk (a 1 GiB tensor took seconds).
      TFCKPT_RETURN_IF_ERROR(Reached("compare-chunk"));
      const RunPlan whole = PlanRuns(chunk, {&rb});
      const auto span_b = RunSpan(whole, chunk, 0);  // (clang 14 cannot capture structured bindings)
      const int64_t lb = span_b.first, hb = span_b.second;
      TFCKPT_ASSIGN_OR_RETURN(std::string_view y, cb.ReadRange(b, b.slices[j], lb * sb, hb * sb, &stage_b, &own_b));
      cur_b[j].Feed(static_cast<uint64_t>(lb * sb), y);
      for (size_t i = 0; i < a.slices.size(); ++i) {
        const Region& ra = a.slices[i].region;
        auto sub = a.shape.empty() ? std::optional<Region>(chunk) : Intersect(chunk, ra);
        if (!sub) continue;
        const RunPlan rp = PlanRuns(*sub, {&ra, &rb});
        const auto span_a = RunSpan(rp, *sub, 0);
        const int64_t la = span_a.first, ha = span_a.second;
        TFCKPT_ASSIGN_OR_RETURN(std::string_view x, ca.ReadRange(a, a.slices[i], la * sa, ha * sa, &stage_a, &own_a[i]));
        cur_a[i].Feed(static_cast<uint64_t>(la * sa), x);
        ForEachRun(*sub, {&ra, &rb}, [&](const int64_t* off, int64_t n) {
          const char* px = x.data() + (off[0] - la) * sa;
          const char* py_old = y.data() + (off[1] - lb) * sb;
          const char* py = py_old;
          if (cast) {
            cast_b.resize(static_cast<size_t>(n * sa));
            CastElements(b.dtype, a.dtype, py_old, static_cast<size_t>(n), cast_b.data());
            py = cast_b.data();
          }
          const int64_t sy = cast ? sa : sb;
          const int32_t ty = cast ? a.dtype : b.dtype;
          if (bitwise && std::memcmp(px, py, static_cast<size_t>(n * sa)) == 0) return;
          for (int64_t e = 0; e < n; ++e) {
            const char* p = px + e * sa;
            const char* q = py + e * sy;
            if (bitwise && std::memcmp(p, q, static_cast<size_t>(sa)) == 0) continue;
            const double u = numeric ? ElementToDouble(a.dtype, p) : 0, v = numeric ? ElementToDouble(ty, q) : 0;
            const double d = AbsDiff(u, v);
            if (by_value && d <= tolerance) continue;
            diff->Add(ra, off[0] + e, d, RelDiff(d, v),
                      [&] { return std::pair(FormatElement(a.dtype, p), FormatElement(b.dtype, py_old + e * sb)); });
          }
        });
      }
      return absl::OkStatus();
    }));
  }
  std::string buf;
  TFCKPT_RETURN_IF_ERROR(SettleCrcs(ca, a, cur_a, &buf));
  return SettleCrcs(cb, b, cur_b, &buf);
}

// A stored piece as a range of its tensor's row-major bytes.
struct ByteRange {
  uint64_t begin, end;
  size_t slice;  // index in TensorEntry::slices
};

// The pieces of `t` as byte ranges in order, when they tile the tensor's bytes exactly
// (each piece whole rows, i.e. cut on axis 0 only, or the whole tensor; no gap, no
// overlap; each stored with the size of its range) and are raw little-endian V2 bytes (or,
// with `copies_too`, a safetensors tensor's or an .npz member's bytes, which have no CRC-32C).
std::optional<std::vector<ByteRange>> RowTiling(const Checkpoint& c, const TensorEntry& t, int64_t esize,
                                                bool copies_too = false) {
  const Format f = c.info().format;
  const bool raw = f == Format::kV2 || (copies_too && (f == Format::kSafetensors || f == Format::kNpz));
  if (!raw || c.info().big_endian || !t.defect.empty()) return std::nullopt;
  const auto total = NumElements(t.shape);
  if (!total.ok()) return std::nullopt;
  std::vector<ByteRange> ranges;
  for (size_t k = 0; k < t.slices.size(); ++k) {
    const Region& r = t.slices[k].region;
    uint64_t begin = 0, end = static_cast<uint64_t>(*total * esize);
    if (!r.Covers(t.shape)) {
      if (r.rank() != t.shape.size() || r.rank() == 0 || t.shape[0] == 0 || !r.WholeRowsOf(t.shape)) {
        return std::nullopt;
      }
      const uint64_t row = end / static_cast<uint64_t>(t.shape[0]);
      begin = static_cast<uint64_t>(r.start[0]) * row;
      end = begin + static_cast<uint64_t>(r.shape[0]) * row;
    }
    if (t.slices[k].data.size != end - begin) return std::nullopt;
    ranges.push_back({begin, end, k});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& x, const ByteRange& y) { return std::tie(x.begin, x.end) < std::tie(y.begin, y.end); });
  uint64_t at = 0;
  for (const ByteRange& r : ranges) {
    if (r.begin != at) return std::nullopt;
    at = r.end;
  }
  if (at != static_cast<uint64_t>(*total * esize)) return std::nullopt;
  return ranges;
}

// CompareOptions::crc_holds: the bytes of `a` (new) equal those of `b` (old) by their stored
// CRCs alone. Both tilings cover the same bytes; they are walked together in stretches
// that end where a boundary of each side meets (the whole tensor at worst), and over each
// stretch the CRCs of its pieces, concatenated, must be equal on both sides.
bool SameByStoredCrcs(const TensorEntry& a, const std::vector<ByteRange>& new_ranges, const TensorEntry& b,
                      const std::vector<ByteRange>& old_ranges) {
  size_t i = 0, j = 0;
  auto add = [](const TensorEntry& t, const ByteRange& r, uint32_t* crc, uint64_t* end) {
    *crc = crc32c::Concat(*crc, crc32c::Unmask(t.slices[r.slice].data.masked_crc), r.end - r.begin);
    *end = r.end;
  };
  while (i < new_ranges.size() && j < old_ranges.size()) {
    uint32_t crc_new = 0, crc_old = 0;
    uint64_t end_new = 0, end_old = 0;
    add(a, new_ranges[i++], &crc_new, &end_new);
    add(b, old_ranges[j++], &crc_old, &end_old);
    while (end_new != end_old) {
      if (end_new < end_old) {
        if (i == new_ranges.size()) return false;
        add(a, new_ranges[i++], &crc_new, &end_new);
      } else {
        if (j == old_ranges.size()) return false;
        add(b, old_ranges[j++], &crc_old, &end_old);
      }
    }
    if (crc_new != crc_old) return false;
  }
  return i == new_ranges.size() && j == old_ranges.size();
}

// `b` (old, without stored CRCs) with the CRCs options.source_crc gives its pieces, as if
// stored; none when it gives none for any piece.
std::optional<TensorEntry> WithSourceCrcs(const Checkpoint& cb, const TensorEntry& b, const CompareOptions& options) {
  if (!options.source_crc) return std::nullopt;
  TensorEntry noted = b;
  for (StoredSlice& s : noted.slices) {
    const std::optional<uint32_t> crc = options.source_crc(cb, s);
    if (!crc) return std::nullopt;
    s.data.masked_crc = crc32c::Mask(*crc);
  }
  return noted;
}

// Whether the bytes of `b` (old, raw: `old_ranges`), read once in order, have over each
// piece of `a` (new) that piece's stored CRC.
bool OldBytesHaveNewCrcs(const TensorEntry& a, const std::vector<ByteRange>& new_ranges, const Checkpoint& cb,
                         const TensorEntry& b, const std::vector<ByteRange>& old_ranges) {
  std::vector<crc32c::Cursor> cur(a.slices.size());
  std::string buffer;
  TensorBytes unused;
  size_t first = 0;  // the first new range not ended before the bytes being read
  for (const ByteRange& piece : old_ranges) {
    const StoredSlice& s = b.slices[piece.slice];
    for (uint64_t at = piece.begin; at < piece.end;) {
      // (a stop: false, and the comparison by value then stops at its first chunk)
      if (!Reached("compare-chunk").ok()) return false;
      const uint64_t n = std::min<uint64_t>(piece.end - at, 1 << 20);
      auto bytes = cb.ReadRange(b, s, at - piece.begin, at - piece.begin + n, &buffer, &unused);
      if (!bytes.ok()) return false;
      for (size_t m = first; m < new_ranges.size() && new_ranges[m].begin < at + n; ++m) {
        const ByteRange& o = new_ranges[m];
        const uint64_t lo = std::max(at, o.begin), hi = std::min(at + n, o.end);
        if (lo < hi) cur[o.slice].Feed(lo - o.begin, bytes->substr(lo - at, hi - lo));
      }
      at += n;
      while (first < new_ranges.size() && new_ranges[first].end <= at) ++first;
    }
  }
  for (const ByteRange& o : new_ranges) {
    const StoredSlice& s = a.slices[o.slice];
    if (!cur[o.slice].Covered(s.data.size) || cur[o.slice].crc != crc32c::Unmask(s.data.masked_crc)) return false;
  }
  return true;
}

// CompareOptions::by_checksum: whether the CRCs alone prove `a` (new) equal to `b` (old),
// both of one fixed-size dtype, raw, and cut on axis 0 only. The new side is read once,
// front to back: every new piece's bytes must have its stored CRC, and the new bytes
// over each old piece's range must have that piece's stored CRC. (Where a new piece is
// an old piece's range exactly, its one CRC serves both.) A safetensors or .npz new side
// has no CRC-32C: its bytes are proved by the old side's alone (and an .npz member's
// CRC-32 is checked on the same bytes, PayloadCheck). False when that cannot be shown, for
// whatever reason (the caller then compares as usual and reports).
bool SameByCrc(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb, const TensorEntry& b,
               const CompareOptions& options) {
  if (a.dtype != b.dtype) return false;
  const int64_t esize = LookupDType(a.dtype)->element_size;
  const bool new_crcs = ca.info().format == Format::kV2;
  const auto new_ranges = RowTiling(ca, a, esize, /*copies_too=*/true), old_ranges = RowTiling(cb, b, esize);
  if (new_ranges && new_crcs && options.crc_holds &&
      std::all_of(a.slices.begin(), a.slices.end(), options.crc_holds)) {
    if (old_ranges) return SameByStoredCrcs(a, *new_ranges, b, *old_ranges);
    // An old side without CRCs (safetensors): its bytes, read once, must have the new
    // pieces' CRCs (which hold for the new bytes).
    if (cb.info().format == Format::kSafetensors) {
      if (auto raw_old = RowTiling(cb, b, esize, /*copies_too=*/true)) {
        if (std::optional<TensorEntry> noted = WithSourceCrcs(cb, b, options)) {
          return SameByStoredCrcs(a, *new_ranges, *noted, *raw_old);
        }
        return OldBytesHaveNewCrcs(a, *new_ranges, cb, b, *raw_old);
      }
    }
  }
  if (!new_ranges || !old_ranges) return false;
  std::vector<crc32c::Cursor> old(b.slices.size());
  std::string buffer;
  TensorBytes unused;  // (ReadRange reads raw pieces into `buffer`)
  size_t first = 0;    // the first old range not ended before the bytes being read
  for (const ByteRange& piece : *new_ranges) {
    const StoredSlice& s = a.slices[piece.slice];
    std::optional<size_t> same;  // an old piece whose range is this one
    for (size_t m = first; m < old_ranges->size() && (*old_ranges)[m].begin <= piece.begin; ++m) {
      if ((*old_ranges)[m].begin == piece.begin && (*old_ranges)[m].end == piece.end) same = (*old_ranges)[m].slice;
    }
    crc32c::Cursor cur;
    std::unique_ptr<PayloadCheck> own = ca.StartPayloadCheck(a, s);  // (an .npz member's CRC-32)
    for (uint64_t at = piece.begin; at < piece.end;) {
      if (!Reached("compare-chunk").ok()) return false;
      const uint64_t n = std::min<uint64_t>(piece.end - at, 1 << 20);
      auto bytes = ca.ReadRange(a, s, at - piece.begin, at - piece.begin + n, &buffer, &unused);
      if (!bytes.ok()) return false;
      cur.Feed(at - piece.begin, *bytes);
      if (own) own->Feed(*bytes);
      for (size_t m = first; !same && m < old_ranges->size() && (*old_ranges)[m].begin < at + n; ++m) {
        const ByteRange& o = (*old_ranges)[m];
        const uint64_t lo = std::max(at, o.begin), hi = std::min(at + n, o.end);
        if (lo < hi) old[o.slice].Feed(lo - o.begin, bytes->substr(lo - at, hi - lo));
      }
      at += n;
      while (first < old_ranges->size() && (*old_ranges)[first].end <= at) ++first;
    }
    if (!cur.Covered(s.data.size) || (new_crcs && cur.crc != crc32c::Unmask(s.data.masked_crc))) return false;
    if (own && !own->Finish().ok()) return false;
    if (same) old[*same] = cur;
  }
  for (const ByteRange& o : *old_ranges) {
    const StoredSlice& s = b.slices[o.slice];
    if (!old[o.slice].Covered(s.data.size) || old[o.slice].crc != crc32c::Unmask(s.data.masked_crc)) return false;
  }
  return true;
}

// The against.values message: "N of M elements differ; first at [i]: new X, old Y".
std::string DifferenceMessage(const ValueDifference& d, const CompareOptions& options, bool by_value) {
  return StrCat(d.differing, " of ", d.elements, " elements differ",
                by_value && options.use_tolerance ? StrCat(" by more than ", options.tolerance) : "", "; first at ",
                ShapeString(d.first.index), ": new ", d.first.new_value, ", old ", d.first.old_value);
}

}  // namespace

std::map<std::string, std::string> Tf1SlotAliases(const Checkpoint& a, const Checkpoint& b) {
  // "P/part_0/S" <-> "P/S": S one path component, P a tensor of both checkpoints, the other
  // name absent from each side (then the two keys are one slot, as TF1 names it either way).
  auto other_form = [](const std::string& name) -> std::string {
    const size_t last = name.rfind('/');
    if (last == std::string::npos || last == 0) return "";
    const std::string head = name.substr(0, last), slot = name.substr(last + 1);
    if (absl::EndsWith(head, "/part_0")) return StrCat(head.substr(0, head.size() - 7), "/", slot);
    return StrCat(head, "/part_0/", slot);
  };
  auto primary_of = [](const std::string& name) {
    std::string head = name.substr(0, name.rfind('/'));
    if (absl::EndsWith(head, "/part_0")) head.resize(head.size() - 7);
    return head;
  };
  std::map<std::string, std::string> out;
  for (const TensorEntry& t : a.tensors()) {
    if (b.Find(t.name) != nullptr) continue;
    const std::string old = other_form(t.name);
    if (old.empty() || a.Find(old) != nullptr || b.Find(old) == nullptr) continue;
    const std::string primary = primary_of(t.name);
    if (primary.empty() || a.Find(primary) == nullptr || b.Find(primary) == nullptr) continue;
    out.emplace(t.name, old);
  }
  return out;
}

bool ComparableByValue(int32_t a, int32_t b) {
  const DTypeInfo* x = LookupDType(a);
  const DTypeInfo* y = LookupDType(b);
  return x != nullptr && y != nullptr && x->kind == ValueKind::kFloat && y->kind == ValueKind::kFloat;
}

absl::StatusOr<ValueDifference> CompareTensorValues(const Checkpoint& ca, const TensorEntry& a, const Checkpoint& cb,
                                                    const TensorEntry& b, const CompareOptions& options) {
  const DTypeInfo* da = LookupDType(a.dtype);
  DiffTracker diff(a, da->element_size > 0 && Numeric(da->kind));
  if (da->element_size == 0) {
    TFCKPT_RETURN_IF_ERROR(CompareElements(ca, a, cb, b, options, &diff));
  } else if (options.by_checksum && SameByCrc(ca, a, cb, b, options)) {
    return diff.Take();  // equal
  } else {
    TFCKPT_RETURN_IF_ERROR(CompareFixed(ca, a, cb, b, options, &diff));
  }
  return diff.Take();
}

absl::StatusOr<ValidateReport> Compare(const std::string& new_spec, const std::string& old_spec,
                                       const CompareOptions& options) {
  ValidateReport report;
  std::vector<Finding>& out = report.findings;
  auto nc = OpenCheckpoint(new_spec, &out);
  if (!nc.ok()) return nc.status();
  auto oc = OpenCheckpoint(old_spec, &out);
  if (!oc.ok()) return oc.status();
  TFCKPT_RETURN_IF_ERROR(CompareCheckpoints(**nc, **oc, nullptr, options, &report));
  return report;
}

absl::Status CompareCheckpoints(const Checkpoint& a, const Checkpoint& b,
                                const std::map<std::string, std::string>* names, const CompareOptions& options,
                                ValidateReport* report_out) {
  ValidateReport& report = *report_out;
  std::vector<Finding>& out = report.findings;
  // (The checkpoints come in opened, by their paths: each resolved here, once.)
  TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(a, Location::Of(a.info().prefix).store()));
  TFCKPT_RETURN_IF_ERROR(DataFilesPermitted(b, Location::Of(b.info().prefix).store()));
  report.path = a.info().prefix;
  report.tensors = static_cast<int64_t>(a.tensors().size());
  const std::string where = a.info().format == Format::kV2 ? a.info().index_path : a.info().prefix;
  std::vector<std::pair<const TensorEntry*, const TensorEntry*>> pairs;
  const std::map<std::string, std::string> slot_keys = names == nullptr ? Tf1SlotAliases(a, b) : std::map<std::string, std::string>{};
  std::set<std::string> aliased_old;
  for (const auto& [new_name, old_name] : slot_keys) aliased_old.insert(old_name);
  if (names == nullptr) {
    for (const auto& t : b.tensors()) {
      if (a.Find(t.name) == nullptr && aliased_old.count(t.name) == 0) {
        out.push_back(Make("against.removed", Severity::kError, where, t.name, -1,
                           StrCat("tensor of the old checkpoint (", DTypeName(t.dtype), " ", ShapeString(t.shape),
                                  ") is missing")));
      }
    }
  } else {
    for (const auto& [new_name, old_name] : *names) {
      if (a.Find(new_name) == nullptr) {
        out.push_back(Make("against.removed", Severity::kError, where, new_name, -1,
                           StrCat("tensor (from \"", old_name, "\" of the old checkpoint) is missing")));
      }
    }
  }
  for (const auto& t : a.tensors()) {
    const std::string* old_name = &t.name;
    if (names != nullptr) {
      const auto listed = names->find(t.name);
      if (listed == names->end()) continue;  // not the caller's to compare here
      old_name = &listed->second;
    } else if (const auto alias = slot_keys.find(t.name); alias != slot_keys.end()) {
      old_name = &alias->second;
      out.push_back(Make("against.renamed", Severity::kNote, where, t.name, -1,
                         StrCat("compared with \"", *old_name, "\" of the old checkpoint: TF1 keys the slot of a "
                                "variable in one partition PRIMARY/part_0/SLOT in older saves, PRIMARY/SLOT otherwise")));
    }
    const TensorEntry* o = b.Find(*old_name);
    if (o == nullptr) {
      out.push_back(Make("against.added", Severity::kError, where, t.name, -1,
                         StrCat("tensor (", DTypeName(t.dtype), " ", ShapeString(t.shape),
                                ") is not in the old checkpoint")));
      continue;
    }
    if (t.dtype != o->dtype) {
      // With a tolerance, floating-point values compare as numbers whatever their dtype;
      // with `cast`, the old values cast to the new dtype compare bitwise.
      const bool cast = options.cast && CastSupported(o->dtype, t.dtype);
      const bool by_value = cast || (options.use_tolerance && ComparableByValue(t.dtype, o->dtype));
      out.push_back(Make("against.dtype", by_value ? Severity::kNote : Severity::kError, where, t.name, -1,
                         StrCat("dtype changed from ", DTypeName(o->dtype), " to ", DTypeName(t.dtype),
                                cast ? "; old values compared cast to it" : by_value ? "; values compared as numbers" : "")));
      if (!by_value) continue;
    }
    if (t.shape != o->shape) {
      out.push_back(Make("against.shape", Severity::kError, where, t.name, -1,
                         StrCat("shape changed from ", ShapeString(o->shape), " to ", ShapeString(t.shape))));
      continue;
    }
    CheckSliceLayout(t, where, &out);
    if (!t.defect.empty()) {
      out.push_back(Make(t.defect_check, Severity::kError, where, t.name, -1, t.defect));
      continue;
    }
    if (!o->defect.empty()) {
      out.push_back(Make(o->defect_check, Severity::kError, b.info().prefix, o->name, -1, o->defect));
      continue;
    }
    if (LookupDType(t.dtype) == nullptr) continue;
    pairs.emplace_back(&t, o);
  }
  std::mutex mu;
  // (This call's bytes apart from the progress counter, which may count other calls' too.)
  std::atomic<uint64_t> bytes{0};
  ParallelFor(pairs.size(), Jobs(options.jobs), [&](size_t i) {
    const TensorEntry& t = *pairs[i].first;
    const TensorEntry& o = *pairs[i].second;
    auto d = CompareTensorValues(a, t, b, o, options);
    std::lock_guard<std::mutex> lock(mu);
    if (!d.ok()) {
      out.push_back(FindingOf(d.status()));  // a checksum error alone: the values of a damaged slice mean nothing
      return;
    }
    bytes += t.bytes;
    if (options.progress != nullptr) *options.progress += t.bytes;
    if (d->differing == 0) return;
    const bool by_value = t.dtype != o.dtype || LookupDType(t.dtype)->kind == ValueKind::kFloat;
    out.push_back(Make("against.values", Severity::kError, where, t.name, -1, DifferenceMessage(*d, options, by_value)));
    report.differences.push_back(*std::move(d));
  });
  report.bytes_checked += bytes;
  std::stable_sort(out.begin(), out.end(), [](const Finding& x, const Finding& y) {
    return std::tie(x.severity, x.file, x.key, x.offset) < std::tie(y.severity, y.file, y.key, y.offset);
  });
  std::sort(report.differences.begin(), report.differences.end(),
            [](const ValueDifference& x, const ValueDifference& y) { return x.tensor < y.tensor; });
  return absl::OkStatus();
}

}  // namespace tfckpt
