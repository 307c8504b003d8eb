// The public face of model/ (tfckpt/object_graph.h): the object graph as plain structs, and
// the commands' tensor selection, for front ends and C++ programs.
#include <algorithm>

#include "model/name_rules.h"
#include "model/object_graph.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/status.h"

namespace tfckpt {

std::vector<ObjectGraphNode> GraphNodes(const pb::TrackableObjectGraph& g) {
  const std::vector<std::string> paths = ObjectPaths(g);
  std::vector<ObjectGraphNode> nodes(static_cast<size_t>(g.nodes_size()));
  for (int i = 0; i < g.nodes_size(); ++i) {
    const pb::TrackableObjectGraph::TrackableObject& n = g.nodes(i);
    ObjectGraphNode& out = nodes[static_cast<size_t>(i)];
    out.path = paths[static_cast<size_t>(i)];
    for (const auto& ch : n.children()) out.children.push_back({ch.node_id(), ch.local_name()});
    for (const auto& a : n.attributes()) out.attributes.push_back({a.name(), a.full_name(), a.checkpoint_key()});
    for (const auto& s : n.slot_variables()) {
      out.slot_variables.push_back({s.original_variable_node_id(), s.slot_name(), s.slot_variable_node_id()});
    }
  }
  return nodes;
}

absl::StatusOr<std::optional<std::vector<ObjectGraphNode>>> ReadObjectGraph(const Checkpoint& c) {
  TFCKPT_ASSIGN_OR_RETURN(std::optional<pb::TrackableObjectGraph> g, LoadObjectGraph(c));
  if (!g.has_value()) return std::nullopt;
  return GraphNodes(*g);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SelectTensors(const Checkpoint& c,
                                                                              const TensorSelection& selection) {
  std::vector<RenameRule> rules;
  for (const std::string& r : selection.renames) {
    TFCKPT_ASSIGN_OR_RETURN(RenameRule rule, ParseRenameRule(r));
    rules.push_back(std::move(rule));
  }
  TFCKPT_ASSIGN_OR_RETURN(const NameRules names, NameRules::Create(selection.include, selection.exclude, rules));
  std::vector<std::string> optimizer_paths;
  if (selection.drop_optimizer) {
    TFCKPT_ASSIGN_OR_RETURN(std::optional<pb::TrackableObjectGraph> g, LoadObjectGraph(c));
    if (g.has_value()) optimizer_paths = OptimizerPaths(*g);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (const TensorEntry& t : c.tensors()) {
    if (t.name == kObjectGraphKey || !names.Selected(t.name)) continue;
    if (selection.drop_optimizer && IsOptimizerState(t.name, optimizer_paths)) continue;
    out.emplace_back(t.name, names.Rename(t.name));
  }
  return out;
}

}  // namespace tfckpt
