// Finding the pieces of an interrupted or unmerged distributed save (`merge --recover`);
// merging them is MergeBundles (bundle_merge.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt {

// The pieces of an interrupted or unmerged save of `prefix`, in part order:
// PREFIX_temp/part-NNNNN-of-MMMMM, PREFIX_temp_<hex>/part-..., PREFIX.part-... (object
// stores), PREFIX_dev-D-of-N (older DTensor's DeviceSuffix, D padded to N's width; in
// device order, device 0 required, other devices may have none), PREFIX_device_<D>_save_op_<K> (DTensor's
// BuildPerDeviceSave; in device, then save-op order, as DTensor merges them; device 0
// and each device's save ops from 0 up must be there). Refuses when a part of the set is
// missing (naming it) or when several sets are found. `*.tempstate*` debris is ignored.
absl::StatusOr<std::vector<std::string>> FindSaveParts(const std::string& prefix, std::vector<std::string>* found);

}  // namespace tfckpt
