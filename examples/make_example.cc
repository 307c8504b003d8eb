// Writes a small wide-and-deep style checkpoint with the tfckpt library:
//   - an embedding [1000, 16] float32 partitioned in 4 slices along axis 0
//   - dense kernels and biases (float32), a bfloat16 tensor
//   - int64 global_step, a string vocabulary [8]
// spread over 2 data files (slices i go to file i % 2; whole tensors to file 0).
//
// Usage: make_example OUTPUT_PREFIX [--force]
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "model/tensor_encoding.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/dtype.h"

namespace {

using tfckpt::DType;

std::string Floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::string out(n * 4, '\0');
  for (size_t i = 0; i < n; ++i) {
    float v = dist(rng);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

int Fail(const absl::Status& s) {
  std::cerr << "make_example: " << s.message() << "\n";
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: make_example OUTPUT_PREFIX [--force]\n";
    return 2;
  }
  const std::string prefix = argv[1];
  tfckpt::BundleWriterOptions options;
  options.num_shards = 2;
  options.overwrite = argc > 2 && std::string(argv[2]) == "--force";
  auto writer = tfckpt::BundleWriter::Create(tfckpt::Location::Of(prefix), options);
  if (!writer.ok()) return Fail(writer.status());
  auto& w = **writer;
  std::mt19937 rng(42);
  const auto f32 = static_cast<int32_t>(DType::kFloat);

  // Embedding table in 4 row slices: [250, 16] each.
  const tfckpt::Shape emb{1000, 16};
  for (int i = 0; i < 4; ++i) {
    tfckpt::Region r{{250 * i, 0}, {250, 16}};
    if (auto s = w.AddSlice("wide_deep/embedding/embedding_weights", f32, emb, r, Floats(250 * 16, rng, 0.05f), i % 2);
        !s.ok()) {
      return Fail(s);
    }
  }
  struct Dense {
    const char* name;
    tfckpt::Shape shape;
  };
  for (const Dense& d : {Dense{"wide_deep/dnn/hiddenlayer_0/kernel", {16, 64}},
                         Dense{"wide_deep/dnn/hiddenlayer_0/bias", {64}},
                         Dense{"wide_deep/dnn/hiddenlayer_1/kernel", {64, 32}},
                         Dense{"wide_deep/dnn/hiddenlayer_1/bias", {32}},
                         Dense{"wide_deep/dnn/logits/kernel", {32, 1}},
                         Dense{"wide_deep/dnn/logits/bias", {1}},
                         Dense{"wide_deep/linear/linear_model/weights", {1000, 1}}}) {
    size_t n = 1;
    for (auto x : d.shape) n *= static_cast<size_t>(x);
    if (auto s = w.Add(d.name, f32, d.shape, Floats(n, rng, 0.1f), 0); !s.ok()) return Fail(s);
  }
  // A bfloat16 tensor: the upper halves of float32 values.
  {
    std::string f = Floats(32 * 8, rng, 1.0f), bf(32 * 8 * 2, '\0');
    for (size_t i = 0; i < 32 * 8; ++i) std::memcpy(bf.data() + 2 * i, f.data() + 4 * i + 2, 2);
    if (auto s = w.Add("wide_deep/dnn/projection_bf16", static_cast<int32_t>(DType::kBFloat16), {32, 8}, bf, 1);
        !s.ok()) {
      return Fail(s);
    }
  }
  int64_t step = 1000;
  if (auto s = w.Add("global_step", static_cast<int32_t>(DType::kInt64), {},
                     std::string_view(reinterpret_cast<const char*>(&step), 8), 0);
      !s.ok()) {
    return Fail(s);
  }
  std::vector<std::string_view> vocab = {"<unk>", "the", "of", "and", "to", "in", "a", "is"};
  std::string payload;
  tfckpt::EncodeStrings(vocab, &payload);
  if (auto s = w.Add("wide_deep/vocabulary", static_cast<int32_t>(DType::kString), {8}, payload, 1); !s.ok()) {
    return Fail(s);
  }
  if (auto s = w.Finish(); !s.ok()) return Fail(s);
  std::cout << "wrote " << prefix << ".index and 2 data files\n";
  return 0;
}
