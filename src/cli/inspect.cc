// tfckpt inspect: list tensors, print values and statistics, show the object graph.
#include <iostream>
#include <regex>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/crc32c.h"
#include "tfckpt/dtype.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/status.h"
#include "tfckpt/values.h"

namespace tfckpt::cli {
namespace {

struct InspectArgs {
  std::string ckpt;
  bool json = false;
  std::string filter;
  std::vector<std::string> tensors;
  bool all_values = false;
  bool stats = false;
  bool tree = false;
};

using json = nlohmann::ordered_json;

// A JSON string for a name that may not be UTF-8: invalid bytes become U+FFFD when the
// document is dumped; the caller adds the exact bytes as hex beside it.
std::string Hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

void PutName(json& j, const char* field, const std::string& name) {
  j[field] = name;
  if (!IsValidUtf8(name)) j[std::string(field) + "_hex"] = Hex(name);
}

json StatsJson(const TensorStats& s) {
  auto num = [](long double v) -> json {
    if (std::isnan(v) || std::isinf(v)) return nullptr;
    return static_cast<double>(v);
  };
  return json{{"count", s.count}, {"min", num(s.min)},   {"max", num(s.max)},   {"mean", num(s.mean)},
              {"std", num(s.std)},   {"nan", s.nan},      {"inf", s.inf},       {"zeros", s.zeros}};
}

std::string StatNumber(long double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return absl::StrFormat("%.6g", static_cast<double>(v));
}

// Warns (listing needs only the index) about data files that are missing or too short.
void CheckDataFiles(const Checkpoint& c) {
  const CheckpointInfo& info = c.info();
  std::vector<uint64_t> need(info.data_files.size(), 0);
  for (const auto& t : c.tensors()) {
    for (const auto& s : t.slices) {
      if (s.data.v1_file < 0 && s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(need.size())) {
        need[s.data.shard] = std::max(need[s.data.shard], s.data.offset + s.data.size);
      }
    }
  }
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    auto f = MappedFile::Open(info.data_files[i]);
    if (!f.ok()) {
      Warn("inspect", StrCat(info.data_files[i], ": data file missing; values cannot be read"));
    } else if ((*f)->size() < need[i]) {
      Warn("inspect", StrCat(info.data_files[i], ": ", (*f)->size(), " bytes, but the index needs ", need[i],
                                   " (truncated?)"));
    }
  }
}

int RunInspect(const InspectArgs& a) {
  auto opened = Checkpoint::Open(a.ckpt);
  if (!opened.ok()) return ReportError("inspect", opened.status());
  const Checkpoint& c = **opened;
  const CheckpointInfo& info = c.info();

  std::optional<std::regex> filter;
  if (!a.filter.empty()) {
    try {
      filter.emplace(a.filter, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return ReportError("inspect", absl::InvalidArgumentError(StrCat("--filter: bad regular expression: ", e.what())));
    }
  }
  std::vector<const TensorEntry*> selected;
  for (const std::string& name : a.tensors) {
    const TensorEntry* t = c.Find(name);
    if (t == nullptr) {
      return ReportError("inspect", absl::InvalidArgumentError(StrCat(info.prefix, ": no tensor named \"",
                                                                     PrintableKey(name), "\"")));
    }
    selected.push_back(t);
  }
  if (a.tensors.empty()) {
    for (const auto& t : c.tensors()) {
      if (!filter || std::regex_search(t.name, *filter)) selected.push_back(&t);
    }
  }
  if (!a.json) {
    for (const auto& n : info.notes) std::cerr << "tfckpt inspect: note: " << n << "\n";
  }
  if (info.format == Format::kV2 && !a.json) CheckDataFiles(c);

  uint64_t total = 0;
  for (const auto& t : c.tensors()) total += t.bytes;

  std::optional<pb::TrackableObjectGraph> graph;
  if (a.tree) {
    auto g = LoadObjectGraph(c);
    if (!g.ok()) return ReportError("inspect", g.status());
    graph = std::move(*g);
  }

  if (a.json) {
    json doc;
    doc["path"] = info.prefix;
    doc["format"] = info.format == Format::kV2 ? "v2" : "v1";
    doc["num_shards"] = info.format == Format::kV2 ? info.num_shards : static_cast<int32_t>(info.v1_files.size());
    doc["endianness"] = info.big_endian ? "big" : "little";
    doc["total_bytes"] = total;
    json list = json::array();
    for (const TensorEntry* t : selected) {
      json j;
      PutName(j, "name", t->name);
      j["dtype"] = DTypeName(t->dtype);
      j["shape"] = t->shape;
      j["bytes"] = t->bytes;
      if (!t->partitioned) {
        const StoredSlice& s = t->slices[0];
        if (info.format == Format::kV2) {
          j["shard"] = s.data.shard;
          j["offset"] = s.data.offset;
          j["size"] = s.data.size;
          j["crc32c"] = s.data.masked_crc;
        } else {
          j["file"] = info.v1_files[s.data.v1_file];
        }
      } else {
        json slices = json::array();
        for (const StoredSlice& s : t->slices) {
          json js{{"spec", SliceString(s.region, t->shape)}, {"shape", s.region.shape}};
          if (info.format == Format::kV2) {
            js["shard"] = s.data.shard;
            js["offset"] = s.data.offset;
            js["size"] = s.data.size;
          } else {
            js["file"] = info.v1_files[s.data.v1_file];
          }
          slices.push_back(std::move(js));
        }
        j["slices"] = std::move(slices);
      }
      if (!t->defect.empty()) j["defect"] = t->defect;
      if (a.stats) {
        auto st = ComputeStats(c, *t);
        if (!st.ok()) return ReportError("inspect", st.status());
        if (st->numeric) j["stats"] = StatsJson(*st);
      }
      if (!a.tensors.empty()) {
        PrintOptions po;
        po.all_values = a.all_values;
        auto v = FormatValues(c, *t, po);
        if (!v.ok()) return ReportError("inspect", v.status());
        j["values"] = *v;
      }
      list.push_back(std::move(j));
    }
    doc["tensors"] = std::move(list);
    if (a.tree) {
      if (!graph) {
        doc["object_graph"] = nullptr;
      } else {
        const auto paths = ObjectPaths(*graph);
        json nodes = json::array();
        for (int i = 0; i < graph->nodes_size(); ++i) {
          const auto& n = graph->nodes(i);
          json jn{{"id", i}, {"path", paths[i]}};
          json ch = json::array(), at = json::array(), sl = json::array();
          for (const auto& r : n.children()) ch.push_back({{"node_id", r.node_id()}, {"local_name", r.local_name()}});
          for (const auto& x : n.attributes()) {
            at.push_back({{"name", x.name()}, {"full_name", x.full_name()}, {"checkpoint_key", x.checkpoint_key()}});
          }
          for (const auto& x : n.slot_variables()) {
            sl.push_back({{"original_variable_node_id", x.original_variable_node_id()},
                          {"slot_name", x.slot_name()},
                          {"slot_variable_node_id", x.slot_variable_node_id()}});
          }
          jn["children"] = std::move(ch);
          jn["attributes"] = std::move(at);
          jn["slot_variables"] = std::move(sl);
          nodes.push_back(std::move(jn));
        }
        doc["object_graph"] = std::move(nodes);
      }
    }
    std::cout << doc.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }

  if (a.tree) {
    if (!graph) {
      std::cout << info.prefix << ": no object graph (" << kObjectGraphKey
                << " is absent: a TF1 name-based checkpoint)\n";
    } else {
      std::cout << FormatObjectTree(c, *graph);
    }
    return kExitOk;
  }

  if (a.tensors.empty() && !a.stats) {
  // Header line, then the table.
  const size_t files = info.format == Format::kV2 ? info.data_files.size() : info.v1_files.size();
  std::cout << absl::StrFormat("%s checkpoint %s: %d %s, %d tensors, %s (%d bytes)\n",
                               info.format == Format::kV2 ? "V2" : "V1", info.prefix, files,
                               info.format == Format::kV2 ? (files == 1 ? "data file" : "data files")
                                                          : (files == 1 ? "file" : "files"),
                               c.tensors().size(), HumanBytes(total), total);
    size_t w = 4;
    for (const TensorEntry* t : selected) w = std::max(w, PrintableKey(t->name).size());
    std::cout << absl::StrFormat("%-*s  %-10s  %-18s  %10s  %s\n", w, "NAME", "DTYPE", "SHAPE", "SIZE", "SLICES");
    for (const TensorEntry* t : selected) {
      std::cout << absl::StrFormat("%-*s  %-10s  %-18s  %10s  %s\n", w, PrintableKey(t->name), DTypeName(t->dtype),
                                   ShapeString(t->shape), HumanBytes(t->bytes),
                                   t->partitioned ? StrCat(t->slices.size()) : "-");
    }
    return kExitOk;
  }
  if (a.stats) {
    size_t w = 4;
    for (const TensorEntry* t : selected) w = std::max(w, PrintableKey(t->name).size());
    std::cout << absl::StrFormat("%-*s  %12s  %12s  %12s  %12s  %6s  %6s  %8s\n", w, "NAME", "MIN", "MAX", "MEAN",
                                 "STD", "NAN", "INF", "ZEROS");
    for (const TensorEntry* t : selected) {
      auto st = ComputeStats(c, *t);
      if (!st.ok()) return ReportError("inspect", st.status());
      if (!st->numeric) continue;
      std::cout << absl::StrFormat("%-*s  %12s  %12s  %12s  %12s  %6d  %6d  %8d\n", w, PrintableKey(t->name),
                                   StatNumber(st->min), StatNumber(st->max), StatNumber(st->mean),
                                   StatNumber(st->std), st->nan, st->inf, st->zeros);
    }
  }
  if (!a.tensors.empty()) {
    PrintOptions po;
    po.all_values = a.all_values;
    for (const TensorEntry* t : selected) {
      auto v = FormatValues(c, *t, po);
      if (!v.ok()) return ReportError("inspect", v.status());
      std::cout << PrintableKey(t->name) << " " << DTypeName(t->dtype) << " " << ShapeString(t->shape) << "\n"
                << *v << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddInspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "List tensors, print values and statistics, show the object graph");
  sub->add_option("CKPT", args->ckpt, "Checkpoint: prefix, .index file, directory, or V1 file")->required();
  sub->add_flag("--json", args->json, "One JSON document on stdout (format in man tfckpt-inspect)");
  sub->add_option("--filter", args->filter, "Only tensors whose logical name matches this regular expression");
  sub->add_option("--tensor", args->tensors, "Print the values of this tensor (repeatable)");
  sub->add_flag("--all-values", args->all_values, "With --tensor: print every element, never summarise");
  sub->add_flag("--stats", args->stats, "Min, max, mean, std, NaN/Inf/zero counts per numeric tensor");
  sub->add_flag("--tree", args->tree, "Show the TF2 object graph as a tree");
  sub->footer(
      "Examples:\n"
      "  tfckpt inspect train_dir/                      # newest checkpoint in the directory\n"
      "  tfckpt inspect model.ckpt-1000 --filter 'dense'\n"
      "  tfckpt inspect model.ckpt-1000 --json > tensors.json\n"
      "  tfckpt inspect model.ckpt-1000 --tensor global_step --tensor dense/bias\n"
      "  tfckpt inspect model.ckpt-1000 --stats --filter kernel\n"
      "  tfckpt inspect saved_model/variables/variables --tree\n\n"
      "Exit codes: 0 ok, 2 usage error, 3 unreadable or corrupt input.");
  return [args] { return RunInspect(*args); };
}

}  // namespace tfckpt::cli
