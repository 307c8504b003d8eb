// tfckpt inspect: list tensors, print values and statistics, show the object graph.

#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "common.h"
#include "core/crc32c.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/open.h"
#include "tfckpt/regex.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"
#include "tfckpt/values.h"

namespace tfckpt::cli {
namespace {

const char* FormatName(Format f) {
  switch (f) {
    case Format::kV2: return "v2";
    case Format::kV1: return "v1";
    case Format::kSafetensors: return "safetensors";
    case Format::kNpz: return "npz";
  }
  return "?";
}

struct InspectArgs {
  std::string ckpt;
  bool json = false;
  std::string filter;
  std::vector<std::string> tensors;
  bool all_values = false;
  bool index_only = false;
  bool stats = false;
  bool tree = false;
  int jobs = 0;
};

using json = nlohmann::ordered_json;

// A JSON string for a name that may not be UTF-8: invalid bytes become U+FFFD when the
// document is dumped; the caller adds the exact bytes as hex beside it.
std::string Hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
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

// Data files that are missing or shorter than the index says, one message each. Listing
// needs only the index, but a checkpoint whose bytes are not all there is not intact.
std::vector<std::string> DataFileProblems(const Checkpoint& c) {
  const CheckpointInfo& info = c.info();
  std::vector<uint64_t> need(info.data_files.size(), 0);
  for (const auto& t : c.tensors()) {
    for (const auto& s : t.slices) {
      if (s.data.v1_file < 0 && s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(need.size()) &&
          s.data.size <= UINT64_MAX - s.data.offset) {
        need[s.data.shard] = std::max(need[s.data.shard], s.data.offset + s.data.size);
      }
    }
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    auto st = Storage::For(info.data_files[i]).Stat(info.data_files[i]);
    if (!st.ok()) {
      problems.push_back(StrCat(info.data_files[i], ": data file missing; values cannot be read"));
    } else if (st->size < need[i]) {
      problems.push_back(StrCat(info.data_files[i], ": ", st->size, " bytes, but the index needs ", need[i],
                                " (truncated?)"));
    }
  }
  return problems;
}

// Appends `s` as a JSON string. Invalid UTF-8 bytes become U+FFFD (the exact bytes are
// given separately as hex).
void AppendJsonString(std::string* out, std::string_view s) {
  if (!IsValidUtf8(s)) {
    *out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  *out += '"';
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      *out += '\\';
      *out += ch;
    } else if (c < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", c);
    } else {
      *out += ch;
    }
  }
  *out += '"';
}

void AppendShape(std::string* out, const Shape& shape) {
  *out += '[';
  for (size_t i = 0; i < shape.size(); ++i) StrAppend(out, i ? ", " : "", shape[i]);
  *out += ']';
}

// Appends the JSON object of one tensor (fields in man tfckpt-inspect) on one line.
absl::Status AppendTensorJson(const Checkpoint& c, const TensorEntry& t, const InspectArgs& a, std::string* out) {
  const CheckpointInfo& info = c.info();
  *out += "{\"name\": ";
  AppendJsonString(out, t.name);
  if (!IsValidUtf8(t.name)) StrAppend(out, ", \"name_hex\": \"", Hex(t.name), "\"");
  StrAppend(out, ", \"dtype\": \"", DTypeName(t.dtype), "\", \"shape\": ");
  AppendShape(out, t.shape);
  StrAppend(out, ", \"bytes\": ", t.bytes);
  auto location = [&](const StoredSlice& s, bool crc) {
    if (info.format != Format::kV1) {
      StrAppend(out, ", \"shard\": ", s.data.shard, ", \"offset\": ", s.data.offset, ", \"size\": ", s.data.size);
      if (crc && info.format == Format::kV2) StrAppend(out, ", \"crc32c\": ", s.data.masked_crc);
    } else {
      *out += ", \"file\": ";
      AppendJsonString(out, info.v1_files[s.data.v1_file]);
    }
  };
  if (!t.partitioned) {
    location(t.slices[0], true);
  } else {
    *out += ", \"slices\": [";
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const StoredSlice& s = t.slices[i];
      StrAppend(out, i ? ", " : "", "{\"spec\": \"", ExtentsString(s.extents), "\", \"shape\": ");
      AppendShape(out, s.region.shape);
      location(s, false);
      *out += '}';
    }
    *out += ']';
  }
  if (!t.defect.empty()) {
    *out += ", \"defect\": ";
    AppendJsonString(out, t.defect);
  }
  if (a.stats) {
    TFCKPT_ASSIGN_OR_RETURN(TensorStats st, ComputeStats(c, t, a.jobs));
    if (st.numeric) StrAppend(out, ", \"stats\": ", StatsJson(st).dump());
  }
  if (!a.tensors.empty()) {
    PrintOptions po;
    po.all_values = a.all_values;
    po.json = true;
    TFCKPT_ASSIGN_OR_RETURN(std::string values, FormatValues(c, t, po));
    StrAppend(out, ", \"values\": ", values);
  }
  *out += '}';
  return absl::OkStatus();
}

json ObjectGraphJson(const pb::TrackableObjectGraph& g) {
  const auto paths = ObjectPaths(g);
  json nodes = json::array();
  for (int i = 0; i < g.nodes_size(); ++i) {
    const auto& n = g.nodes(i);
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
    nodes.push_back({{"id", i}, {"path", paths[i]}, {"children", std::move(ch)}, {"attributes", std::move(at)},
                     {"slot_variables", std::move(sl)}});
  }
  return nodes;
}

int RunInspect(const InspectArgs& a) {
  auto opened = OpenCheckpoint(a.ckpt);
  if (!opened.ok()) return ReportError("inspect", opened.status());
  std::shared_ptr<const Checkpoint> keep = std::move(*opened);
  KeepUntilExit(keep);
  const Checkpoint& c = *keep;
  const CheckpointInfo& info = c.info();

  std::optional<Regex> filter;
  if (!a.filter.empty()) {
    auto f = Regex::Compile(a.filter, "--filter");
    if (!f.ok()) return ReportError("inspect", f.status());
    filter = *std::move(f);
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
      if (!filter || filter->Search(t.name)) selected.push_back(&t);
    }
  }
  if (!a.json) {
    for (const auto& n : info.notes) std::cerr << "tfckpt inspect: note: " << n << "\n";
  }
  std::vector<std::string> problems;
  // Listings check that the data files hold what the index describes (values and
  // --stats read the bytes and fail on their own).
  if (info.format == Format::kV2 && !a.index_only && a.tensors.empty() && !a.stats) problems = DataFileProblems(c);
  // The listing is printed either way; missing bytes then make the exit code 3.
  const size_t more = problems.empty() ? 0 : problems.size() - 1;
  const absl::Status problem =
      problems.empty() ? absl::OkStatus()
                       : absl::DataLossError(StrCat(problems[0],
                                                    more ? StrCat(" (and ", Count(more, "more data file problem"), ")")
                                                         : "",
                                                    "; --index-only lists without checking data files"));
  auto finish = [&]() -> int {
    if (problem.ok()) return kExitOk;
    std::cout.flush();
    return ReportError("inspect", problem);
  };

  uint64_t total = 0;
  for (const auto& t : c.tensors()) total += t.bytes;

  std::optional<pb::TrackableObjectGraph> graph;
  if (a.tree) {
    auto g = LoadObjectGraph(c);
    if (!g.ok()) return ReportError("inspect", g.status());
    graph = std::move(*g);
  }

  if (a.json) {
    // Streamed: the header fields, then one tensor object per line, so memory does not
    // grow with a DOM of the whole listing.
    // Values and statistics read data that may turn out damaged: that document is kept
    // whole until the end, so that a failure prints the error document instead.
    const bool stream = a.tensors.empty() && !a.stats;
    std::string out = "{\n";
    auto field = [&out](const char* key, const json& value) {
      out += "  ";
      out += json(key).dump();
      out += ": ";
      out += value.dump(-1, ' ', false, json::error_handler_t::replace);
      out += ",\n";
    };
    field("ok", problem.ok());
    if (!problem.ok()) field("error", ErrorJson(problem));
    field("path", info.prefix);
    field("format", FormatName(info.format));
    field("num_shards", info.format != Format::kV1 ? info.num_shards : static_cast<int32_t>(info.v1_files.size()));
    field("endianness", info.big_endian ? "big" : "little");
    field("total_bytes", total);
    if (!problems.empty()) field("data_file_problems", problems);
    out += "  \"tensors\": [";
    bool first = true;
    for (const TensorEntry* t : selected) {
      out += first ? "\n    " : ",\n    ";
      first = false;
      if (absl::Status s = AppendTensorJson(c, *t, a, &out); !s.ok()) return ReportError("inspect", s);
      if (stream && out.size() > (1 << 20)) {
        std::cout << out;
        out.clear();
        NoteJsonPrinted();
      }
    }
    out += first ? "]" : "\n  ]";
    if (a.tree) {
      out += ",\n  \"object_graph\": ";
      out += graph ? ObjectGraphJson(*graph).dump() : "null";
    }
    out += "\n}\n";
    std::cout << out;
    NoteJsonPrinted();
    return finish();
  }

  if (a.tree) {
    if (!graph) {
      std::cout << info.prefix << ": no object graph (" << kObjectGraphKey
                << " is absent: a TF1 name-based checkpoint)\n";
    } else {
      std::cout << FormatObjectTree(c, *graph);
    }
    return finish();
  }

  if (a.tensors.empty() && !a.stats) {
  // Header line, then the table.
  const size_t files = info.format != Format::kV1 ? info.data_files.size() : info.v1_files.size();
  std::cout << absl::StrFormat("%s %s: %d %s, %s, %s (%d bytes)\n",
                               info.format == Format::kV2   ? "V2 checkpoint"
                               : info.format == Format::kV1 ? "V1 checkpoint"
                                                            : "safetensors",
                               info.prefix, files,
                               info.format == Format::kV2 ? (files == 1 ? "data file" : "data files")
                                                          : (files == 1 ? "file" : "files"),
                               Count(c.tensors().size(), "tensor"), HumanBytes(total), total);
    std::vector<std::string> names;
    names.reserve(selected.size());
    size_t w = 4;
    for (const TensorEntry* t : selected) {
      names.push_back(PrintableKey(t->name));
      w = std::max(w, DisplayWidth(names.back()));
    }
    std::string out = absl::StrFormat("%s  %-10s  %-18s  %10s  %s\n", PadRight("NAME", w), "DTYPE", "SHAPE", "SIZE", "SLICES");
    for (size_t i = 0; i < selected.size(); ++i) {
      const TensorEntry* t = selected[i];
      absl::StrAppendFormat(&out, "%s  %-10s  %-18s  %10s  %s\n", PadRight(names[i], w), DTypeName(t->dtype),
                            ShapeString(t->shape), HumanBytes(t->bytes),
                            t->partitioned ? StrCat(t->slices.size()) : "-");
    }
    std::cout << out;
    return finish();
  }
  if (a.stats) {
    size_t w = 4;
    for (const TensorEntry* t : selected) w = std::max(w, DisplayWidth(PrintableKey(t->name)));
    std::cout << absl::StrFormat("%s  %12s  %12s  %12s  %12s  %6s  %6s  %8s\n", PadRight("NAME", w), "MIN", "MAX", "MEAN",
                                 "STD", "NAN", "INF", "ZEROS");
    for (const TensorEntry* t : selected) {
      auto st = ComputeStats(c, *t, a.jobs);
      if (!st.ok()) return ReportError("inspect", st.status());
      if (!st->numeric) continue;
      std::cout << absl::StrFormat("%s  %12s  %12s  %12s  %12s  %6d  %6d  %8d\n", PadRight(PrintableKey(t->name), w),
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
  return finish();
}

}  // namespace

std::function<int()> AddInspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = app.add_subcommand("inspect", "List tensors, print values and statistics, show the object graph");
  sub->add_option("CKPT", args->ckpt, "Checkpoint: prefix, .index file, directory, V1 file, or s3:// / gs:// URL (man tfckpt: OBJECT STORES)")->required();
  AddJsonOption(sub, &args->json, "--tensor values as JSON arrays");
  AddConnectionsOption(sub);
  sub->add_option("--filter", args->filter, "Only tensors whose logical name matches this regular expression");
  CLI::Option* tensor = sub->add_option("--tensor", args->tensors, "Print the values of this tensor (repeatable)");
  sub->add_flag("--all-values", args->all_values, "With --tensor: print every element, never summarise")
      ->needs(tensor);
  CLI::Option* stats = sub->add_flag("--stats", args->stats, "Min, max, mean, std, NaN/Inf/zero counts per numeric tensor");
  AddJobsOption(sub, &args->jobs, "Threads reading values for --stats");
  sub->add_flag("--tree", args->tree, "Show the TF2 object graph as a tree (not with --stats or --tensor)")
      ->excludes(stats)
      ->excludes(tensor);
  sub->add_flag("--index-only", args->index_only,
                "List from the index alone: do not fail when data files are missing or short");
  sub->footer(
      "Examples:\n"
      "  tfckpt inspect train_dir/                      # newest checkpoint in the directory\n"
      "  tfckpt inspect model.ckpt-1000 --filter 'dense'\n"
      "  tfckpt inspect model.ckpt-1000 --json > tensors.json\n"
      "  tfckpt inspect model.ckpt-1000 --tensor global_step --tensor dense/bias\n"
      "  tfckpt inspect model.ckpt-1000 --tensor dense/bias --json | jq -c '.tensors[0].values'\n"
      "  tfckpt inspect model.ckpt-1000 --stats --filter kernel\n"
      "  tfckpt inspect saved_model/variables/variables --tree\n"
      "  tfckpt inspect only_the_index/model.index --index-only\n\n"
      "Exit codes: 0 ok, 2 usage error, 3 unreadable or corrupt input (including, for listings\n"
      "without --index-only, a data file that is missing or shorter than the index needs).");
  return [args] { return RunInspect(*args); };
}

}  // namespace tfckpt::cli
