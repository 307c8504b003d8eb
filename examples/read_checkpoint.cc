// A C++ program over the installed library (docs/LIBRARY.md): lists a checkpoint's tensors
// (name, dtype, shape; one line each, tab-separated) and prints the first element of the
// first float32 tensor, read with tfckpt::ReadTensor into a buffer of one element.
//
//   c++ -std=c++20 read_checkpoint.cc $(pkg-config --cflags --libs tfckpt) -o read_checkpoint
//   ./read_checkpoint train_dir/model.ckpt-1000
//
// Usage: read_checkpoint CKPT (a prefix, its .index, a directory, a V1 file, a URL).
// Errors: one line on stderr, exit status 1.
#include <charconv>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/open.h"
#include "tfckpt/read.h"
#include "tfckpt/region.h"

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "read_checkpoint: " << status.message() << "\n";
  return 1;
}

// The shortest text that reads back as `v`.
std::string FloatText(float v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  return std::string(text, end);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: read_checkpoint CKPT\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<tfckpt::Checkpoint>> opened = tfckpt::OpenCheckpoint(argv[1]);
  if (!opened.ok()) return Fail(opened.status());
  const tfckpt::Checkpoint& c = **opened;

  const tfckpt::TensorEntry* first_float = nullptr;
  for (const tfckpt::TensorEntry& t : c.tensors()) {  // sorted by name
    std::cout << t.name << "\t" << tfckpt::DTypeName(t.dtype) << "\t" << tfckpt::ShapeString(t.shape) << "\n";
    const auto n = tfckpt::NumElements(t.shape);
    if (first_float == nullptr && t.dtype == static_cast<int32_t>(tfckpt::DType::kFloat) && n.ok() && *n > 0) {
      first_float = &t;
    }
  }
  if (first_float == nullptr) return 0;

  // The box of one element at the origin: start 0 and length 1 on every axis (a scalar's
  // box has no axes).
  const size_t rank = first_float->shape.size();
  const tfckpt::Region first{tfckpt::Shape(rank, 0), tfckpt::Shape(rank, 1)};
  char bytes[4];  // one float32 as stored: little-endian
  const absl::Status read = tfckpt::ReadTensor(c, *first_float, first, bytes, sizeof bytes);
  if (!read.ok()) return Fail(read);
  float value;
  std::memcpy(&value, bytes, sizeof value);  // (a little-endian host)
  std::cout << first_float->name << tfckpt::ShapeString(first.start) << " = " << FloatText(value) << "\n";
  return 0;
}
