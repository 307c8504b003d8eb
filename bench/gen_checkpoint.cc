// Synthetic checkpoints for the benchmarks.
//   gen_checkpoint many PREFIX N     N small float32 tensors [4] in one data file
//   gen_checkpoint tables PREFIX MIB N_TABLES SLICES
//                                    N_TABLES embedding tables of MIB MiB float32 each, in
//                                    SLICES row slices over SLICES data files, plus dense layers
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "tfckpt/bundle_writer.h"

namespace {

int Fail(const absl::Status& s) {
  std::cerr << "gen_checkpoint: " << s.message() << "\n";
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: gen_checkpoint many PREFIX N | tables PREFIX MIB N_TABLES SLICES\n";
    return 2;
  }
  const std::string mode = argv[1], prefix = argv[2];
  tfckpt::BundleWriterOptions o;
  o.overwrite = true;
  if (mode == "many") {
    const long n = std::stol(argv[3]);
    auto w = tfckpt::BundleWriter::Create(prefix, o);
    if (!w.ok()) return Fail(w.status());
    const std::string payload(16, '\x01');
    for (long i = 0; i < n; ++i) {
      const std::string name = absl::StrFormat("model/layer_%06d/kernel/.ATTRIBUTES/VARIABLE_VALUE", i);
      if (auto s = (*w)->Add(name, 1, {4}, payload); !s.ok()) return Fail(s);
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  if (mode == "tables" && argc == 6) {
    const long mib = std::stol(argv[3]), tables = std::stol(argv[4]), slices = std::stol(argv[5]);
    o.num_shards = static_cast<int32_t>(slices);
    auto w = tfckpt::BundleWriter::Create(prefix, o);
    if (!w.ok()) return Fail(w.status());
    const int64_t cols = 64;
    const int64_t rows = mib * 1024 * 1024 / (cols * 4);
    std::mt19937 rng(1);
    std::string chunk(1 << 20, '\0');
    for (auto& c : chunk) c = static_cast<char>(rng());
    for (long t = 0; t < tables; ++t) {
      const std::string name = absl::StrFormat("embedding_%d/embeddings", t);
      int64_t at = 0;
      for (long s = 0; s < slices; ++s) {
        const int64_t n = rows / slices + (s < rows % slices ? 1 : 0);
        tfckpt::Region r{{at, 0}, {n, cols}};
        auto stream = (*w)->BeginEntry(name, 1, {rows, cols}, r, static_cast<int32_t>(s));
        if (!stream.ok()) return Fail(stream.status());
        int64_t left = n * cols * 4;
        while (left > 0) {
          const int64_t k = std::min<int64_t>(left, chunk.size());
          if (auto st = stream->Append(std::string_view(chunk).substr(0, k)); !st.ok()) return Fail(st);
          left -= k;
        }
        if (auto st = stream->Close(); !st.ok()) return Fail(st);
        at += n;
      }
    }
    for (int d = 0; d < 4; ++d) {
      const std::string name = absl::StrFormat("dense_%d/kernel", d);
      if (auto s = (*w)->Add(name, 1, {512, 512}, std::string_view(chunk).substr(0, 512 * 512 * 4)); !s.ok()) {
        return Fail(s);
      }
    }
    if (auto s = (*w)->Finish(); !s.ok()) return Fail(s);
    return 0;
  }
  std::cerr << "gen_checkpoint: bad arguments\n";
  return 2;
}
