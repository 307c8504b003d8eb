// Strings users type: --partition rules (incl. DTensor layouts), slice specs, --rename,
// --cast, --policy. Input: "TEXT\nSHAPE-BYTES"; the shape (rank 0-4) comes from the bytes
// after the newline, so rules are also applied to shapes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "convert/convert.h"
#include "model/name_rules.h"
#include "reshard/partition.h"
#include "tfckpt/region.h"
#include "reshard/reshard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [text, rest] = tfckpt::fuzz::SplitOnce({reinterpret_cast<const char*>(data), size}, '\n');
  tfckpt::Shape shape;
  for (size_t i = 0; i < rest.size() && i < 4; ++i) shape.push_back(static_cast<uint8_t>(rest[i]));
  const int64_t esize = rest.size() > 4 ? 1 + static_cast<uint8_t>(rest[4]) % 16 : 4;

  if (auto rule = tfckpt::ParsePartitionRule(text); rule.ok()) {
    std::string note;
    (void)tfckpt::ApplyRule(*rule, shape, esize, &note);
  }
  if (auto layout = tfckpt::ParseLayout(text); layout.ok()) (void)tfckpt::LayoutRegions(shape, *layout);
  (void)tfckpt::ParseSliceString(text, shape);
  (void)tfckpt::ParsePolicy(text);
  (void)tfckpt::ParseRenameRule(std::string(text));
  (void)tfckpt::ParseCast(std::string(text));
  return 0;
}
