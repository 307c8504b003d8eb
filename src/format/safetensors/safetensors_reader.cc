// A .safetensors file or a sharded set as a Checkpoint (safetensors_reader.h): one stored
// piece per tensor, no CRCs, read through the bundle's data-file reader.
#include "format/safetensors/safetensors_reader.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/path.h"
#include "format/bundle/bundle_reader.h"
#include "format/safetensors/safetensors.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/status.h"

namespace tfckpt {

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenSafetensors(const std::string& path) {
  CheckpointInfo info;
  std::vector<TensorEntry> tensors;
  info.format = Format::kSafetensors;
  info.prefix = path;
  std::vector<std::string> files;
  std::map<std::string, std::string> expected;  // tensor -> file, for a set
  static const std::string kIndexSuffix = ".index.json";
  if (path.size() > kIndexSuffix.size() && path.compare(path.size() - kIndexSuffix.size(), kIndexSuffix.size(), kIndexSuffix) == 0) {
    TFCKPT_ASSIGN_OR_RETURN(SafetensorsIndex idx, ReadSafetensorsIndex(path));
    const std::string dir = Dirname(path);
    std::set<std::string> names;
    for (const auto& [t, f] : idx.weight_map) names.insert(f);
    for (const auto& f : names) files.push_back(JoinPath(dir, f));
    for (const auto& [t, f] : idx.weight_map) expected[t] = JoinPath(dir, f);
  } else {
    files.push_back(path);
  }
  info.data_files = files;
  info.num_shards = static_cast<int32_t>(files.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    TFCKPT_ASSIGN_OR_RETURN(SafetensorsHeader h, ReadSafetensorsHeader(files[i]));
    if (i == 0) info.safetensors_metadata = h.metadata;
    for (auto& st : h.tensors) {
      if (!seen.insert(st.name).second) {
        return DataLossAt("safetensors.index", files[i], st.name, -1, "tensor is in more than one file of the set");
      }
      if (!expected.empty()) {
        auto e = expected.find(st.name);
        if (e == expected.end() || e->second != files[i]) {
          return DataLossAt("safetensors.index", path, st.name, -1,
                            StrCat("tensor is in ", files[i], " but the weight_map says ",
                                   e == expected.end() ? std::string("nothing") : e->second));
        }
      }
      TensorEntry t;
      t.name = st.name;
      t.dtype = st.dtype;
      t.shape = st.shape;
      t.bytes = st.end - st.begin;
      StoredSlice s;
      s.region = Region::Full(st.shape);
      s.key = st.name;
      s.data.shard = static_cast<int32_t>(i);
      s.data.offset = h.data_start + st.begin;
      s.data.size = st.end - st.begin;
      t.slices.push_back(std::move(s));
      tensors.push_back(std::move(t));
    }
  }
  for (const auto& [t, f] : expected) {
    if (!seen.count(t)) return DataLossAt("safetensors.index", path, t, -1, StrCat("tensor is not in ", f));
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
  auto reader = std::make_unique<BundleReader>(
      BundleReader::DataFiles{info.data_files, info.num_shards, /*big_endian=*/false, /*checksums=*/false, FileOpener(),
                              BundleReader::LayoutOf(tensors, info.data_files.size())});
  return std::make_unique<Checkpoint>(std::move(info), std::move(tensors), std::move(reader));
}

}  // namespace tfckpt
