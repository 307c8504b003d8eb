// MergeBundles (MergeV2Checkpoints, docs/FORMAT.md §e.3) over one or two fuzzed indexes:
// the inputs read through the bundle reader's one walk, entries unioned, slices of a
// partitioned tensor concatenated, data files renumbered, the unused ones found, the output
// written, then opened again (a merge that succeeds writes a bundle the reader opens).
// Everything happens in this process's scratch directory: inputs in a/ and b/, the output
// in out/.
//
// Input: a flags byte (bit 0: a second input; bit 1: keep_empty; bit 2: move; bit 3: a
// third input that does not exist, with allow_missing), a byte of data-file counts (input
// a: bits 0-1, input b: bits 4-5, plus one: the files PREFIX.data-0000S-of-0000N written for
// it, a few bytes each), then each input's index as a 4-byte little-endian length and its
// bytes (the last one may run to the end).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "format/bundle/bundle_merge.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/open.h"

namespace {

// Takes a 4-byte little-endian length and that many bytes (fewer at the end) from `rest`.
std::string_view TakeIndex(std::string_view* rest) {
  if (rest->size() < 4) return {};
  uint32_t n;
  std::memcpy(&n, rest->data(), 4);
  rest->remove_prefix(4);
  const std::string_view index = rest->substr(0, n);
  rest->remove_prefix(index.size());
  return index;
}

// Writes input `prefix`: its index and `files` data files of that count.
void WriteInput(const std::string& prefix, std::string_view index, int files) {
  namespace fs = std::filesystem;
  fs::create_directories(fs::path(prefix).parent_path());
  tfckpt::fuzz::WriteFile(prefix + ".index", index);
  for (int s = 0; s < files; ++s) tfckpt::fuzz::WriteFile(tfckpt::DataFileName(prefix, s, files), "data");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0], counts = data[1];
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::string dir = tfckpt::fuzz::ScratchDir();
  for (const char* sub : {"a", "b", "out"}) std::filesystem::remove_all(dir + "/" + sub);

  std::vector<std::string> inputs = {dir + "/a/model"};
  WriteInput(inputs[0], TakeIndex(&rest), (counts & 3) + 1);
  if (flags & 1) {
    inputs.push_back(dir + "/b/model");
    WriteInput(inputs[1], TakeIndex(&rest), ((counts >> 4) & 3) + 1);
  }
  tfckpt::MergeOptions options;
  options.keep_empty = (flags & 2) != 0;
  options.move = (flags & 4) != 0;
  if (flags & 8) {
    inputs.push_back(dir + "/missing/model");
    options.allow_missing = true;
  }
  const std::string out = dir + "/out/model";
  auto merged = tfckpt::MergeBundles(inputs, out, options);
  if (!merged.ok()) return 0;
  auto c = tfckpt::OpenResolved({.format = tfckpt::Format::kV2, .prefix = out});
  if (!c.ok()) {
    std::fprintf(stderr, "merge wrote a bundle the reader refuses: %s\n", std::string(c.status().message()).c_str());
    std::abort();
  }
  return 0;
}
