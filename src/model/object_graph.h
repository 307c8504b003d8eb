// The TF2 object graph (docs/FORMAT.md §f): `_CHECKPOINTABLE_OBJECT_GRAPH`, a scalar string
// holding a serialized TrackableObjectGraph.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/object_graph.h"
#include "trackable_object_graph.pb.h"

namespace tfckpt {

// The object graph of `c`, or nullopt when the checkpoint has none (TF1 checkpoints).
// Error when the tensor exists but cannot be read or parsed.
absl::StatusOr<std::optional<pb::TrackableObjectGraph>> LoadObjectGraph(const Checkpoint& c);

// Each node's object path (docs/FORMAT.md §f.1, §f.2): breadth-first from node 0 over children,
// then slot variables as VAR/.OPTIMIZER_SLOT/OPTIMIZER/SLOT. Unreachable nodes get "".
std::vector<std::string> ObjectPaths(const pb::TrackableObjectGraph& g);

// Each node of `g` as the reports and the public API give it (tfckpt/reports.h), with its
// object path (ObjectPaths).
std::vector<ObjectGraphNode> GraphNodes(const pb::TrackableObjectGraph& g);

// Escapes one path component: "." -> "..", "/" -> ".S".
std::string EscapeLocalName(std::string_view name);

// The tensors that hold an attribute's value: `checkpoint_key` itself, or, for saveables
// that store several tensors or a suffixed one, keys that extend it (an iterator's
// "<key>_STATE", a hash table's "<key>-keys" and "<key>-values"). Empty when absent.
std::vector<const TensorEntry*> AttributeTensors(const Checkpoint& c, const std::string& checkpoint_key);

// The checkpoint keys of `g`'s attributes in the order TF2 writes their tensors: node by
// node (the graph lists its nodes in the order TrackableSaver serializes them), each node's
// attributes in turn. (The object graph's own tensor, written last, is not among them.)
std::vector<std::string> SaveOrderKeys(const pb::TrackableObjectGraph& g);

// An indented tree: children by local name, each attribute with its checkpoint key,
// dtype and shape (from `c`), and slot variables under the variable they belong to.
std::string FormatObjectTree(const Checkpoint& c, const pb::TrackableObjectGraph& g);

// Object paths of the optimizers in `g` (for IsOptimizerState): nodes that list slot
// variables, and every child named "optimizer" (the root's, a model's).
std::vector<std::string> OptimizerPaths(const pb::TrackableObjectGraph& g);

}  // namespace tfckpt
