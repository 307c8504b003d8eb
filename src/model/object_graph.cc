#include "model/object_graph.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_cat.h"
#include "model/tensor_encoding.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt {

absl::StatusOr<std::optional<pb::TrackableObjectGraph>> LoadObjectGraph(const Checkpoint& c) {
  const TensorEntry* t = c.Find(kObjectGraphKey);
  if (t == nullptr) return std::optional<pb::TrackableObjectGraph>();
  if (t->dtype != static_cast<int32_t>(DType::kString) || !t->shape.empty() || t->slices.size() != 1) {
    return DataLossCheck("graph.parse", StrCat(kObjectGraphKey, " is not a scalar string"));
  }
  TFCKPT_ASSIGN_OR_RETURN(TensorBytes b, c.Read(*t, t->slices[0]));
  TFCKPT_ASSIGN_OR_RETURN(DecodedElements d, DecodeStrings(b.data, 1));
  pb::TrackableObjectGraph g;
  if (!g.ParseFromString(std::string(d.elements[0]))) {
    return DataLossCheck("graph.parse", StrCat(kObjectGraphKey, " does not hold a TrackableObjectGraph"));
  }
  return std::optional<pb::TrackableObjectGraph>(std::move(g));
}

std::string EscapeLocalName(std::string_view name) {
  std::string out;
  for (char ch : name) {
    if (ch == '.') {
      out += "..";
    } else if (ch == '/') {
      out += ".S";
    } else {
      out += ch;
    }
  }
  return out;
}

std::vector<std::string> ObjectPaths(const pb::TrackableObjectGraph& g) {
  const int n = g.nodes_size();
  std::vector<std::string> path(n);
  std::vector<bool> seen(n, false);
  if (n == 0) return path;
  std::deque<int> queue{0};
  seen[0] = true;
  while (!queue.empty()) {
    const int id = queue.front();
    queue.pop_front();
    for (const auto& ref : g.nodes(id).children()) {
      const int child = ref.node_id();
      if (child < 0 || child >= n || seen[child]) continue;
      seen[child] = true;
      path[child] = path[id].empty() ? EscapeLocalName(ref.local_name())
                                     : StrCat(path[id], "/", EscapeLocalName(ref.local_name()));
      queue.push_back(child);
    }
  }
  for (int id = 0; id < n; ++id) {
    for (const auto& slot : g.nodes(id).slot_variables()) {
      const int var = slot.original_variable_node_id(), node = slot.slot_variable_node_id();
      if (var < 0 || var >= n || node < 0 || node >= n || !seen[var] || seen[node]) continue;
      seen[node] = true;
      path[node] = StrCat(path[var], "/.OPTIMIZER_SLOT/", path[id], "/", EscapeLocalName(slot.slot_name()));
    }
  }
  return path;
}

std::vector<const TensorEntry*> AttributeTensors(const Checkpoint& c, const std::string& checkpoint_key) {
  std::vector<const TensorEntry*> out;
  if (const TensorEntry* t = c.Find(checkpoint_key)) {
    out.push_back(t);
    return out;
  }
  const auto& all = c.tensors();
  auto it = std::lower_bound(all.begin(), all.end(), checkpoint_key,
                             [](const TensorEntry& t, const std::string& k) { return t.name < k; });
  for (; it != all.end() && it->name.compare(0, checkpoint_key.size(), checkpoint_key) == 0; ++it) {
    const char next = it->name[checkpoint_key.size()];
    if (next == '_' || next == '-') out.push_back(&*it);
  }
  return out;
}

std::vector<std::string> SaveOrderKeys(const pb::TrackableObjectGraph& g) {
  std::vector<std::string> keys;
  for (const auto& node : g.nodes()) {
    for (const auto& attr : node.attributes()) keys.push_back(attr.checkpoint_key());
  }
  return keys;
}

namespace {

std::string Describe(const Checkpoint& c, const std::string& key) {
  std::vector<const TensorEntry*> ts = AttributeTensors(c, key);
  if (ts.empty()) return StrCat("(not in checkpoint)  key ", PrintableKey(key));
  std::string out;
  for (const TensorEntry* t : ts) {
    if (!out.empty()) out += "; ";
    StrAppend(&out, DTypeName(t->dtype), " ", ShapeString(t->shape), "  key ", PrintableKey(t->name));
  }
  return out;
}

void PrintNode(const Checkpoint& c, const pb::TrackableObjectGraph& g, const std::vector<std::string>& paths,
               std::vector<bool>& printed, int id, int depth, std::string* out) {
  printed[id] = true;
  const std::string indent(2 * depth, ' ');
  const auto& node = g.nodes(id);
  for (const auto& a : node.attributes()) {
    StrAppend(out, indent, "- ", a.name(), ": ", Describe(c, a.checkpoint_key()), "\n");
  }
  // Slot variables that belong to this node, declared on optimizer nodes.
  for (int opt = 0; opt < g.nodes_size(); ++opt) {
    for (const auto& slot : g.nodes(opt).slot_variables()) {
      if (slot.original_variable_node_id() != id) continue;
      const int sn = slot.slot_variable_node_id();
      if (sn < 0 || sn >= g.nodes_size()) continue;
      for (const auto& a : g.nodes(sn).attributes()) {
        StrAppend(out, indent, "- slot ", slot.slot_name(), " (", paths[opt].empty() ? "root" : paths[opt],
                        "): ", Describe(c, a.checkpoint_key()), "\n");
      }
      printed[sn] = true;
    }
  }
  for (const auto& ref : node.children()) {
    const int child = ref.node_id();
    if (child < 0 || child >= g.nodes_size()) {
      StrAppend(out, indent, ref.local_name(), "  (bad node id ", child, ")\n");
      continue;
    }
    const std::string expected = paths[id].empty() ? EscapeLocalName(ref.local_name())
                                                   : StrCat(paths[id], "/", EscapeLocalName(ref.local_name()));
    if (printed[child] || paths[child] != expected) {
      StrAppend(out, indent, ref.local_name(), "  (same object as ", paths[child], ")\n");
      continue;
    }
    StrAppend(out, indent, ref.local_name(), "\n");
    PrintNode(c, g, paths, printed, child, depth + 1, out);
  }
}

}  // namespace

std::string FormatObjectTree(const Checkpoint& c, const pb::TrackableObjectGraph& g) {
  std::string out;
  if (g.nodes_size() == 0) return "(empty object graph)\n";
  const std::vector<std::string> paths = ObjectPaths(g);
  std::vector<bool> printed(g.nodes_size(), false);
  out += "(root)\n";
  PrintNode(c, g, paths, printed, 0, 1, &out);
  return out;
}

std::vector<std::string> OptimizerPaths(const pb::TrackableObjectGraph& g) {
  std::vector<std::string> out;
  const auto paths = ObjectPaths(g);
  for (int i = 0; i < g.nodes_size(); ++i) {
    if (g.nodes(i).slot_variables_size() > 0 && !paths[i].empty()) out.push_back(paths[i]);
  }
  // Every object reached as a child named "optimizer": the root's (tf.train.Checkpoint(
  // optimizer=…), save_weights) and a model's (tf.train.Checkpoint(model=…) of a compiled
  // Keras model: model/optimizer).
  for (int i = 0; i < g.nodes_size(); ++i) {
    for (const auto& c : g.nodes(i).children()) {
      if (c.local_name() == "optimizer" && c.node_id() >= 0 && c.node_id() < g.nodes_size() && !paths[c.node_id()].empty()) {
        out.push_back(paths[c.node_id()]);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace tfckpt
