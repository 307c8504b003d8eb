// A checkpoint's names as TensorFlow 2 and the commands see them: the object graph TF2
// writes beside the tensors (docs/FORMAT.md §f), and the selection the commands'
// --include, --exclude, --rename and --drop-optimizer make.
//
//   auto c = tfckpt::OpenCheckpoint("model.ckpt");                       // open.h
//   auto kept = tfckpt::SelectTensors(**c, {.include = {"^dense/"}, .drop_optimizer = true});
//   for (const auto& [name, new_name] : *kept) ...
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/reports.h"

namespace tfckpt {

// The tensor that holds the object graph: a scalar string, a serialized TrackableObjectGraph.
inline constexpr char kObjectGraphKey[] = "_CHECKPOINTABLE_OBJECT_GRAPH";

// The object graph of `c`, node by node (node 0 is the root; ObjectGraphNode, reports.h),
// each with its object path (docs/FORMAT.md §f.1, §f.2), or nullopt when the
// checkpoint has none (TF1 checkpoints, safetensors). Error when its tensor exists but
// cannot be read or parsed.
absl::StatusOr<std::optional<std::vector<ObjectGraphNode>>> ReadObjectGraph(const Checkpoint& c);

// The commands' tensor selection (man tfckpt-convert): `include` and `exclude` are RE2
// patterns searched in each name (some include must match, when any is given; no exclude
// may), `renames` are FROM=TO rules applied in order (RE2 rewrites: \1 for a group), and
// `drop_optimizer` leaves out optimizer state (slot variables, the optimizer's own
// variables; man tfckpt-merge, --drop-optimizer).
struct TensorSelection {
  std::vector<std::string> include = {}, exclude = {}, renames = {};
  bool drop_optimizer = false;
};

// (name, new name) of each tensor of `c` that `selection` keeps, in name order; the object
// graph's own tensor is never among them. InvalidArgument naming a pattern that does not
// compile or a rule without "=".
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SelectTensors(const Checkpoint& c,
                                                                              const TensorSelection& selection);

}  // namespace tfckpt
