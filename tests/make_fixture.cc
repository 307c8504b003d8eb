// Writes small checkpoints for the CLI tests with the library:
//   make_fixture non_utf8 PREFIX      a tensor whose name is not valid UTF-8
//   make_fixture partitioned PREFIX   a [10, 3] float32 tensor in 4 slices, values 0..29
//   make_fixture kinds PREFIX         float16, bfloat16, bool, strings, complex64, NaN/Inf
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

#include "tfckpt/bundle_writer.h"
#include "tfckpt/tensor_encoding.h"

namespace {

template <typename T>
std::string Pod(std::initializer_list<T> v) {
  std::string s;
  for (T x : v) s.append(reinterpret_cast<const char*>(&x), sizeof x);
  return s;
}

int Check(const absl::Status& s) {
  if (s.ok()) return 0;
  std::cerr << "make_fixture: " << s.message() << "\n";
  std::exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_fixture non_utf8|partitioned|kinds PREFIX\n";
    return 2;
  }
  const std::string mode = argv[1], prefix = argv[2];
  tfckpt::BundleWriterOptions o;
  o.num_shards = mode == "partitioned" ? 2 : 1;
  auto w = tfckpt::BundleWriter::Create(prefix, o);
  Check(w.status());
  if (mode == "non_utf8") {
    Check((*w)->Add(std::string("bad\xff\xfe name"), 1, {}, Pod<float>({1.5f})));
    Check((*w)->Add("good", 1, {}, Pod<float>({2.5f})));
    Check((*w)->Add("quote\"back\\slash\nnewline\ttab", 1, {}, Pod<float>({3.5f})));
  } else if (mode == "partitioned") {
    std::string all;
    for (int i = 0; i < 30; ++i) all += Pod<float>({static_cast<float>(i)});
    const int rows[] = {3, 3, 2, 2};
    int at = 0;
    for (int i = 0; i < 4; ++i) {
      Check((*w)->AddSlice("part", 1, {10, 3}, tfckpt::Region{{at, 0}, {rows[i], 3}},
                           std::string_view(all).substr(at * 12, rows[i] * 12), i % 2));
      at += rows[i];
    }
  } else if (mode == "kinds") {
    Check((*w)->Add("half", 19, {3}, Pod<uint16_t>({0x3C00, 0xC000, 0x3555})));   // 1, -2, 0.333
    Check((*w)->Add("bf16", 14, {2}, Pod<uint16_t>({0x3F80, 0x4049})));           // 1, 3.140625
    Check((*w)->Add("flags", 10, {3}, Pod<uint8_t>({1, 0, 1})));
    Check((*w)->Add("cplx", 8, {1}, Pod<float>({1.0f, -2.0f})));
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    Check((*w)->Add("specials", 1, {5}, Pod<float>({nan, inf, 0.0f, 1.0f, 3.0f})));
    std::string strings;
    tfckpt::EncodeStrings({"plain", std::string_view("tab\there\x01", 9), ""}, &strings);
    Check((*w)->Add("words", 7, {3}, strings));
    std::string big;
    for (int i = 0; i < 2000; ++i) big += Pod<int32_t>({i});
    Check((*w)->Add("big", 3, {2000}, big));
  } else {
    std::cerr << "unknown mode " << mode << "\n";
    return 2;
  }
  Check((*w)->Finish());
  return 0;
}
