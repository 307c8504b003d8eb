// ComputeStats (values.h, src/core/stats.cc) against the same statistics computed directly
// in long double: every dtype it summarises in blocks, NaN/Inf/zeros, blocks and pieces cut
// at odd places, pieces of several 1 MiB chunks; the same result whatever the number of
// threads; a damaged piece is its data.crc error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "test_util.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "model/values.h"

namespace {

using tfckpt::DType;
using tfckpt::Region;
using tfckpt::testing::TempDir;

struct Reference {
  int64_t count = 0, nan = 0, inf = 0, zeros = 0;
  long double min = INFINITY, max = -INFINITY, sum = 0, sum2 = 0;
  int64_t finite = 0;
  void Add(long double v) {
    ++count;
    if (std::isnan(v)) return void(++nan);
    if (std::isinf(v)) return void(++inf);
    ++finite;
    zeros += v == 0;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
  }
  long double Mean() const { return sum / finite; }
};

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
bool SameValue(T a, T b) {
  return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof(double)) == 0 || (a == b && a != 0);
}

bool SameBits(const tfckpt::TensorStats& a, const tfckpt::TensorStats& b) {
  return a.numeric == b.numeric && a.count == b.count && a.nan == b.nan && a.inf == b.inf && a.zeros == b.zeros &&
         SameValue(a.mean, b.mean) && SameValue(a.std, b.std) && SameValue(a.min, b.min) && SameValue(a.max, b.max);
}

// Writes `payload` (elements of `dtype`, shape [rows, cols]) as tensor "t" in `slices` row
// slices, opens the checkpoint and checks ComputeStats against `ref` at 1 and 3 threads.
void Check(const TempDir& dir, int32_t dtype, int64_t rows, int64_t cols, const std::string& payload, int slices,
           const Reference& ref, const std::vector<long double>& values) {
  const std::string prefix = dir / ("c" + std::to_string(dtype) + "_" + std::to_string(slices));
  const int64_t esize = tfckpt::LookupDType(dtype)->element_size;
  {
    tfckpt::BundleWriterOptions options;
    options.num_shards = 2;
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), options);
    REQUIRE(w.ok());
    int64_t at = 0;
    for (int s = 0; s < slices; ++s) {
      const int64_t n = rows / slices + (s < rows % slices ? 1 : 0);
      const std::string part = payload.substr(static_cast<size_t>(at * cols * esize), static_cast<size_t>(n * cols * esize));
      if (slices == 1) {
        REQUIRE((*w)->Add("t", dtype, {rows, cols}, part, 0).ok());
      } else {
        REQUIRE((*w)->AddSlice("t", dtype, {rows, cols}, Region{{at, 0}, {n, cols}}, part, s % 2).ok());
      }
      at += n;
    }
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  const tfckpt::TensorEntry& t = *(*c)->Find("t");
  auto one = tfckpt::ComputeStats(**c, t, 1);
  auto three = tfckpt::ComputeStats(**c, t, 3);
  REQUIRE(one.ok());
  REQUIRE(three.ok());
  CHECK(one->numeric);
  CHECK(one->count == ref.count);
  CHECK(one->nan == ref.nan);
  CHECK(one->inf == ref.inf);
  CHECK(one->zeros == ref.zeros);
  CHECK(one->min == ref.min);
  CHECK(one->max == ref.max);
  long double m2 = 0;
  for (long double v : values) {
    if (std::isfinite(v)) m2 += (v - ref.Mean()) * (v - ref.Mean());
  }
  const long double std_ref = std::sqrt(m2 / ref.finite);
  CHECK(std::fabs(one->mean - ref.Mean()) <= 1e-12L * (std::fabs(ref.Mean()) + std_ref));
  CHECK(std::fabs(one->std - std_ref) <= 1e-12L * std_ref);
  // The same bits with three threads: partial sums are merged in chunk order.
  CHECK(SameBits(*one, *three));
}

}  // namespace

TEST_CASE("ComputeStats: float32 with NaN, Inf, signed zeros and an odd tail, over several chunks and pieces") {
  TempDir dir;
  const int64_t rows = 1237, cols = 517;  // 2.4 MiB: several 1 MiB chunks, blocks cut anywhere
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(3.5f, 0.25f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  Reference ref;
  std::vector<long double> values;
  for (size_t i = 0; i < v.size(); ++i) {
    float x = normal(rng);
    if (i % 1013 == 5) x = NAN;
    if (i % 4099 == 7) x = i % 2 ? INFINITY : -INFINITY;
    if (i % 977 == 3) x = i % 2 ? 0.0f : -0.0f;
    if (i % 8191 == 1) x = 1e-40f;  // subnormal
    v[i] = x;
    ref.Add(x);
    values.push_back(x);
  }
  for (int slices : {1, 3}) Check(dir, static_cast<int32_t>(DType::kFloat), rows, cols, Bytes(v), slices, ref, values);
}

TEST_CASE("ComputeStats: a block whose first elements are not finite, and a tensor with nothing finite") {
  TempDir dir;
  std::vector<float> v(3000, 2.0f);
  for (int i = 0; i < 40; ++i) v[static_cast<size_t>(i)] = NAN;  // the shift is the first finite element
  v[2999] = -1.0f;
  Reference ref;
  std::vector<long double> values;
  for (float x : v) ref.Add(x), values.push_back(x);
  Check(dir, static_cast<int32_t>(DType::kFloat), 3, 1000, Bytes(v), 1, ref, values);
  const std::vector<float> none = {NAN, INFINITY, -INFINITY};
  const std::string prefix = dir / "none";
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("t", 1, {3}, Bytes(none)).ok());
    REQUIRE((*w)->Finish().ok());
  }
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  auto st = tfckpt::ComputeStats(**c, *(*c)->Find("t"), 2);
  REQUIRE(st.ok());
  CHECK(st->count == 3);
  CHECK(st->nan == 1);
  CHECK(st->inf == 2);
  CHECK(std::isnan(st->mean));
  CHECK(std::isnan(static_cast<double>(st->min)));
}

TEST_CASE("ComputeStats: bfloat16, float16, float64 and integers") {
  TempDir dir;
  std::mt19937 rng(5);
  const int64_t rows = 301, cols = 33;
  const size_t n = static_cast<size_t>(rows * cols);
  {
    std::vector<uint16_t> bf(n), half(n);
    Reference rb, rh;
    std::vector<long double> vb, vh;
    std::uniform_real_distribution<float> u(-100, 100);
    for (size_t i = 0; i < n; ++i) {
      bf[i] = tfckpt::FloatToBFloat16(i % 500 == 1 ? NAN : u(rng));
      half[i] = tfckpt::FloatToHalf(i % 700 == 2 ? INFINITY : u(rng));
      rb.Add(tfckpt::BFloat16ToFloat(bf[i]));
      vb.push_back(tfckpt::BFloat16ToFloat(bf[i]));
      rh.Add(tfckpt::HalfToFloat(half[i]));
      vh.push_back(tfckpt::HalfToFloat(half[i]));
    }
    Check(dir, static_cast<int32_t>(DType::kBFloat16), rows, cols, Bytes(bf), 2, rb, vb);
    Check(dir, static_cast<int32_t>(DType::kHalf), rows, cols, Bytes(half), 1, rh, vh);
  }
  {
    std::vector<double> d(n);
    std::vector<int32_t> i32(n);
    std::vector<int64_t> i64(n);
    Reference rd, ri, rl;
    std::vector<long double> vd, vi, vl;
    for (size_t i = 0; i < n; ++i) {
      d[i] = static_cast<double>(rng()) / 7.0 - 1e8;
      i32[i] = static_cast<int32_t>(rng());
      i64[i] = i == 17 ? INT64_MAX : i == 18 ? INT64_MIN + 1 : static_cast<int64_t>(rng()) * 1000;
      rd.Add(d[i]), vd.push_back(d[i]);
      ri.Add(i32[i]), vi.push_back(i32[i]);
      rl.Add(static_cast<long double>(i64[i])), vl.push_back(static_cast<long double>(i64[i]));
    }
    Check(dir, static_cast<int32_t>(DType::kDouble), rows, cols, Bytes(d), 3, rd, vd);
    Check(dir, static_cast<int32_t>(DType::kInt32), rows, cols, Bytes(i32), 1, ri, vi);
    // 64-bit integers: exact extremes (long double), mean and std as doubles.
    const std::string prefix = dir / "i64";
    {
      auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
      REQUIRE(w.ok());
      REQUIRE((*w)->Add("t", static_cast<int32_t>(DType::kInt64), {rows, cols}, Bytes(i64)).ok());
      REQUIRE((*w)->Finish().ok());
    }
    auto c = tfckpt::OpenCheckpoint(prefix);
    REQUIRE(c.ok());
    auto st = tfckpt::ComputeStats(**c, *(*c)->Find("t"), 3);
    REQUIRE(st.ok());
    CHECK(st->max == static_cast<long double>(INT64_MAX));
    CHECK(st->min == static_cast<long double>(INT64_MIN + 1));
  }
}

TEST_CASE("ComputeStats: a flipped byte in a piece read in chunks is its data.crc error") {
  TempDir dir;
  std::vector<float> v(600000, 1.5f);
  const std::string prefix = dir / "crc";
  {
    auto w = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix));
    REQUIRE(w.ok());
    REQUIRE((*w)->Add("t", 1, {600, 1000}, Bytes(v)).ok());
    REQUIRE((*w)->Finish().ok());
  }
  std::string data = tfckpt::testing::ReadFile(prefix + ".data-00000-of-00001");
  data[1500000] ^= 0x10;  // in the second 1 MiB chunk
  tfckpt::testing::WriteFile(prefix + ".data-00000-of-00001", data);
  auto c = tfckpt::OpenCheckpoint(prefix);
  REQUIRE(c.ok());
  auto st = tfckpt::ComputeStats(**c, *(*c)->Find("t"), 2);
  REQUIRE_FALSE(st.ok());
  CHECK(tfckpt::ErrorInfoOf(st.status()).check == "data.crc");
}
