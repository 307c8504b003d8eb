// The table reader (docs/FORMAT.md §a): footer, block handles, restarts, prefix-compressed
// entries, Snappy blocks. Input: the whole table file.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "format/table/table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tfckpt::fuzz::ScratchDir() + "/table";
  tfckpt::fuzz::WriteFile(path, {reinterpret_cast<const char*>(data), size});
  auto t = tfckpt::TableReader::Open(path);
  if (!t.ok()) return 0;
  std::string last;
  (void)(*t)->ForEach([&](std::string_view key, std::string_view, uint64_t) {
    last = std::string(key);
    return absl::OkStatus();
  });
  (void)(*t)->Get(last);
  (void)(*t)->Get("");
  return 0;
}
