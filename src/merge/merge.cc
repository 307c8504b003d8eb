// Discovery of unmerged save parts (docs/FORMAT.md §e.2); merging them is MergeBundles
// (bundle_merge.h).
#include "merge/merge.h"

#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/path.h"
#include "base/regex.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace tfckpt {


namespace {

// DTensor's per-device save parts (save_restore_util.cc BuildPerDeviceSave):
// PREFIX_device_<D>_save_op_<K>, in the order DTensorShardedPrefix hands them to
// MergeV2 (device, then save op). Device 0 always saves (the fully replicated tensors and
// the first slice of every sharded one) and a device's save ops are numbered from 0, so
// a missing device 0 or a gap in a device's save ops is a missing part.
absl::StatusOr<std::vector<std::string>> DTensorDeviceParts(
    const std::string& prefix, const std::map<std::pair<int64_t, int64_t>, std::string>& parts) {
  std::vector<std::string> out;
  std::map<int64_t, int64_t> next_op;  // device -> the save op expected next
  next_op[0] = 0;
  for (const auto& [at, part] : parts) next_op.try_emplace(at.first, 0);
  for (const auto& [at, part] : parts) {
    if (at.second != next_op[at.first]) continue;  // after a gap: reported below
    ++next_op[at.first];
    out.push_back(part);
  }
  for (const auto& [device, op] : next_op) {
    const auto it = parts.upper_bound({device, op});
    const bool more = it != parts.end() && it->first.first == device;
    if (op == 0 || more) {
      return absl::NotFoundError(StrCat(prefix, "_device_", device, "_save_op_", op,
                                        ": DTensor save part is missing (its save did not finish)"));
    }
  }
  return out;
}

// Older DTensor's per-device parts PREFIX_dev-D-of-N (save_restore_util.cc DeviceSuffix),
// in device order, as DTensorShardedPrefix (dtensor_sharded_prefix_kernel.cc) lists them
// for MergeV2. It skips devices with nothing to save (a slice held by several devices is
// saved by the lowest of them), so gaps are normal; device 0 always saves (the fully
// replicated tensors and the first slice of every sharded one).
absl::StatusOr<std::vector<std::string>> DTensorDevParts(
    const std::string& prefix, const std::pair<const int64_t, std::map<int64_t, std::string>>& set) {
  const auto& [count, parts] = set;
  if (!parts.count(0)) {
    const int width = static_cast<int>(StrCat(count).size());
    return absl::NotFoundError(StrCat(prefix, absl::StrFormat("_dev-%0*d-of-%d", width, 0, count),
                                      ": DTensor save part of device 0 is missing (its save did not finish)"));
  }
  std::vector<std::string> out;
  for (const auto& [device, part] : parts) out.push_back(part);
  return out;
}

// TF 2.21's DTensor parts PREFIX_temp/part-IIIII-of-NNNNN_dev-D-of-M: each of the N task
// parts of a TF2 save (the object graph is one of its own) saved per device as the older
// DTensor did. MergeV2 takes them device by device, a device's parts in part order (what
// TF's save merges, the oracle's tf2_dtensor); device 0 saves every part (replicated
// tensors, the first slice of sharded ones, the object graph), so a part missing there
// means the save did not finish.
absl::StatusOr<std::vector<std::string>> DTensorNestedParts(
    const std::string& prefix,
    const std::pair<const std::pair<int64_t, int64_t>, std::map<std::pair<int64_t, int64_t>, std::string>>& set) {
  const auto& [counts, parts] = set;
  for (int64_t i = 0; i < counts.first; ++i) {
    if (!parts.count({0, i})) {
      const int width = static_cast<int>(StrCat(counts.second).size());
      return absl::NotFoundError(StrCat(prefix, absl::StrFormat("_temp/part-%05d-of-%05d_dev-%0*d-of-%d", i,
                                                                counts.first, width, 0, counts.second),
                                        ": DTensor save part of device 0 is missing (its save did not finish)"));
    }
  }
  std::vector<std::string> out;
  for (const auto& [at, part] : parts) out.push_back(part);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> FindSaveParts(const std::string& prefix, std::vector<std::string>* found) {
  const std::string dir = DirectoryOf(prefix);
  const std::string base = Basename(prefix);
  Storage& store = Location::Of(prefix).store();
  // set name -> (count, parts present)
  std::map<std::string, std::pair<int, std::map<int, std::string>>> sets;
  static const Regex part_re = Regex::Fixed(R"((.*)-(\d{5})-of-(\d{5})\.index)");
  auto consider = [&](const std::string& set, const std::string& index_path, const std::string& part_prefix_re) {
    const std::string name = Basename(index_path);
    std::vector<std::string> m;
    if (!part_re.FullMatch(name, &m)) return;
    if (!Regex::Fixed(part_prefix_re).FullMatch(m[0])) return;
    const int i = std::stoi(m[1]), n = std::stoi(m[2]);
    auto& s = sets[StrCat(set, " (", n, " parts)")];
    s.first = n;
    const std::string part_prefix = index_path.substr(0, index_path.size() - 6);
    s.second[i] = part_prefix;
    if (found) found->push_back(part_prefix);
  };
  // DTensor: (device, save op) -> part prefix.
  std::map<std::pair<int64_t, int64_t>, std::string> device_parts;
  const Regex device_re = Regex::Fixed(Regex::Quote(base) + R"(_device_(\d{1,9})_save_op_(\d{1,9})\.index)");
  // TF 2.21's DTensor: PREFIX_temp/part-IIIII-of-NNNNN_dev-D-of-M, (N, M) -> (D, I) -> prefix.
  std::map<std::pair<int64_t, int64_t>, std::map<std::pair<int64_t, int64_t>, std::string>> nested_parts;
  static const Regex nested_re = Regex::Fixed(R"(part-(\d{5})-of-(\d{5})_dev-(\d{1,9})-of-(\d{1,9})\.index)");
  // Older DTensor: PREFIX_dev-D-of-N, count -> device -> part prefix.
  std::map<int64_t, std::map<int64_t, std::string>> dev_parts;
  const Regex dev_re = Regex::Fixed(Regex::Quote(base) + R"(_dev-(\d{1,9})-of-(\d{1,9})\.index)");
  // A listing that fails is the error, never "no parts found": a refused one (no
  // s3:ListBucket), an unreachable store. Only a directory that is not there (no object
  // under the prefix's "directory" in a store) has none.
  const auto list = [&](const std::string& where) -> absl::StatusOr<std::vector<DirEntry>> {
    absl::StatusOr<std::vector<DirEntry>> entries = store.List(where);
    if (entries.ok()) return entries;
    if (absl::IsNotFound(entries.status())) return std::vector<DirEntry>{};
    return Annotate(entries.status(), StrCat(prefix, ": cannot list the parts of an unmerged save beside it"));
  };
  TFCKPT_ASSIGN_OR_RETURN(const std::vector<DirEntry> listing, list(dir));
  for (const DirEntry& e : listing) {
    const std::string& name = e.name;
    if (name.find(".tempstate") != std::string::npos) continue;
    if (e.kind == EntryKind::kDirectory &&
        (name == base + "_temp" || Regex::Fixed(Regex::Quote(base) + R"(_temp_[0-9a-fA-F]+)").FullMatch(name))) {
      const std::string sub = JoinPath(dir, name);
      TFCKPT_ASSIGN_OR_RETURN(const std::vector<DirEntry> inner, list(sub));
      for (const DirEntry& f : inner) {
        if (f.name.find(".tempstate") != std::string::npos) continue;
        if (std::vector<std::string> m; nested_re.FullMatch(f.name, &m) && m[2].size() == m[3].size()) {
          // TF 2.21's DTensor save: PREFIX_temp/part-IIIII-of-NNNNN_dev-D-of-M.
          const int64_t part = std::stoll(m[0]), parts = std::stoll(m[1]), device = std::stoll(m[2]),
                        devices = std::stoll(m[3]);
          if (part < parts && device < devices) {
            const std::string path = JoinPath(sub, f.name);
            nested_parts[{parts, devices}][{device, part}] = path.substr(0, path.size() - 6);
            if (found) found->push_back(path.substr(0, path.size() - 6));
          }
          continue;
        }
        consider(sub + "/part", JoinPath(sub, f.name), "part");
      }
    } else if (name.rfind(base + ".part-", 0) == 0) {
      consider(StrCat(prefix, ".part"), JoinPath(dir, name), Regex::Quote(base) + R"(\.part)");
    } else if (std::vector<std::string> m; dev_re.FullMatch(name, &m) && m[0].size() == m[1].size()) {
      // DeviceSuffix: "_dev-%0*d-of-%d", the device id padded to the width of the count.
      const std::string part = JoinPath(dir, name);
      const int64_t device = std::stoll(m[0]), count = std::stoll(m[1]);
      if (device < count) dev_parts[count][device] = part.substr(0, part.size() - 6);
      if (device < count && found) found->push_back(dev_parts[count][device]);
    } else if (std::vector<std::string> m; device_re.FullMatch(name, &m)) {
      const std::string part = JoinPath(dir, name);
      device_parts[{std::stoll(m[0]), std::stoll(m[1])}] = part.substr(0, part.size() - 6);
      if (found) found->push_back(device_parts.rbegin()->second);
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, s] : sets) names.push_back(name);
  if (!device_parts.empty()) names.push_back(StrCat(prefix, "_device_*_save_op_* (", device_parts.size(), " parts)"));
  for (const auto& [count, parts] : dev_parts) {
    names.push_back(StrCat(prefix, "_dev-*-of-", count, " (", parts.size(), " parts)"));
  }
  for (const auto& [counts, parts] : nested_parts) {
    names.push_back(StrCat(prefix, "_temp/part-*-of-", counts.first, "_dev-*-of-", counts.second, " (", parts.size(),
                           " parts)"));
  }
  if (names.empty()) return absl::NotFoundError(StrCat(prefix, ": no parts of an unmerged save found beside it"));
  if (names.size() > 1) {
    return absl::InvalidArgumentError(StrCat(prefix, ": several sets of save parts: ", absl::StrJoin(names, "; "),
                                             " (merge one explicitly)"));
  }
  if (!device_parts.empty()) return DTensorDeviceParts(prefix, device_parts);
  if (!dev_parts.empty()) return DTensorDevParts(prefix, *dev_parts.begin());
  if (!nested_parts.empty()) return DTensorNestedParts(prefix, *nested_parts.begin());
  const auto& [name, s] = *sets.begin();
  std::vector<std::string> parts;
  for (int i = 0; i < s.first; ++i) {
    auto it = s.second.find(i);
    if (it == s.second.end()) {
      return absl::NotFoundError(StrCat(name, ": part ", absl::StrFormat("%05d-of-%05d", i, s.first),
                                        " is missing (its save did not finish)"));
    }
    parts.push_back(it->second);
  }
  return parts;
}

}  // namespace tfckpt
