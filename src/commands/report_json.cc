// The documents `--json` prints (commands.h: ToJson, WriteJson, ErrorDocument): one
// serializer for the command line and Python. Fields are described in man tfckpt-COMMAND.
#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/ordered_code.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

using json = nlohmann::ordered_json;

json Optional(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string OneLine(std::string_view text) {
  std::string msg(text);
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return msg;
}

json ErrorObject(const absl::Status& s) {
  const ErrorInfo e = ErrorInfoOf(s);
  return {{"id", ErrorId(s)},
          {"message", OneLine(SV(s.message()))},
          {"file", Optional(e.file)},
          {"key", Optional(e.key)},
          {"offset", e.offset >= 0 ? json(e.offset) : json(nullptr)}};
}

// The document: "ok" first, then `doc`'s fields; two-space indentation, invalid UTF-8
// replaced.
std::string Document(const json& doc, bool ok) {
  json out{{"ok", ok}};
  for (const auto& [key, value] : doc.items()) {
    if (key != "ok") out[key] = value;
  }
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

json FindingJson(const Finding& f) {
  return json{{"check", f.check},
              {"file", Optional(f.file)},
              {"key", Optional(f.key)},
              {"offset", f.offset >= 0 ? json(f.offset) : json(nullptr)},
              {"message", f.message}};
}

json Number(double v) { return std::isinf(v) ? json("inf") : json(v); }

json ElementJson(const ValueDifference::Element& e) {
  return json{{"index", e.index}, {"new", e.new_value}, {"old", e.old_value}};
}

json DifferenceJson(const ValueDifference& d) {
  return json{{"tensor", d.tensor},
              {"elements", d.elements},
              {"differing", d.differing},
              {"first", ElementJson(d.first)},
              {"max_abs_diff", d.numeric ? Number(d.max_abs) : json(nullptr)},
              {"max_rel_diff", d.numeric ? Number(d.max_rel) : json(nullptr)},
              {"max_at", d.numeric ? ElementJson(d.max) : json(nullptr)}};
}

json StatsJson(const TensorStats& s) {
  auto num = [](long double v) -> json {
    if (std::isnan(v) || std::isinf(v)) return nullptr;
    return static_cast<double>(v);
  };
  return json{{"count", s.count}, {"min", num(s.min)}, {"max", num(s.max)}, {"mean", num(s.mean)},
              {"std", num(s.std)},   {"nan", s.nan},      {"inf", s.inf},       {"zeros", s.zeros}};
}

const char* FormatName(Format f) {
  switch (f) {
    case Format::kV2: return "v2";
    case Format::kV1: return "v1";
    case Format::kSafetensors: return "safetensors";
    case Format::kNpz: return "npz";
  }
  return "?";
}

std::string Hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

// Appends `s` as a JSON string; invalid UTF-8 bytes become U+FFFD (inspect gives the exact
// bytes beside it as hex).
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

// One tensor of inspect's listing, on one line.
void AppendTensorJson(const Checkpoint& c, const InspectedTensor& it, std::string* out) {
  const TensorEntry& t = *it.tensor;
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
  if (it.stats) StrAppend(out, ", \"stats\": ", StatsJson(*it.stats).dump());
  if (it.values) StrAppend(out, ", \"values\": ", *it.values);
  *out += '}';
}

json GraphJson(const std::vector<ObjectGraphNode>& graph) {
  json nodes = json::array();
  for (size_t i = 0; i < graph.size(); ++i) {
    const ObjectGraphNode& n = graph[i];
    json ch = json::array(), at = json::array(), sl = json::array();
    for (const auto& r : n.children) ch.push_back({{"node_id", r.node_id}, {"local_name", r.local_name}});
    for (const auto& x : n.attributes) {
      at.push_back({{"name", x.name}, {"full_name", x.full_name}, {"checkpoint_key", x.checkpoint_key}});
    }
    for (const auto& x : n.slot_variables) {
      sl.push_back({{"original_variable_node_id", x.original_variable_node_id},
                    {"slot_name", x.slot_name},
                    {"slot_variable_node_id", x.slot_variable_node_id}});
    }
    nodes.push_back({{"id", i}, {"path", n.path}, {"children", std::move(ch)}, {"attributes", std::move(at)},
                     {"slot_variables", std::move(sl)}});
  }
  return nodes;
}

json PieceJson(const ReshardPiece& p, bool is_new) {
  json j{{"spec", p.spec}, {"shape", p.shape}};
  if (is_new) {
    j["file"] = p.file;
    j["bytes"] = p.bytes;
    if (p.task >= 0) j["task"] = p.task;
  } else if (p.file >= 0) {
    j["shard"] = p.file;
  }
  return j;
}

}  // namespace

std::string ErrorId(const absl::Status& s) {
  const ErrorInfo e = ErrorInfoOf(s);
  if (!e.check.empty()) return e.check;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return "usage";
    case absl::StatusCode::kAlreadyExists: return "exists";
    case absl::StatusCode::kNotFound: return "not-found";
    case absl::StatusCode::kPermissionDenied: return "permission-denied";
    case absl::StatusCode::kResourceExhausted: return "no-space";
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange: return "corrupt";
    case absl::StatusCode::kFailedPrecondition: return "unsupported";
    case absl::StatusCode::kCancelled: return "interrupted";
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown: return "internal";
    default: return "io";
  }
}

std::string ErrorJson(const absl::Status& s) { return ErrorObject(s).dump(-1, ' ', false, json::error_handler_t::replace); }

std::string ErrorDocument(const absl::Status& s) { return Document({{"error", ErrorObject(s)}}, false); }

std::string ToJson(const ValidateCommandReport& r) {
  json errors = json::array(), warnings = json::array(), notes = json::array();
  for (const Finding& f : r.findings) {
    (f.severity == Severity::kError ? errors : f.severity == Severity::kWarning ? warnings : notes).push_back(FindingJson(f));
  }
  json doc{{"path", r.path},   {"tensors", r.tensors},   {"bytes_checked", r.bytes_checked},
           {"errors", errors}, {"warnings", warnings}, {"notes", notes}};
  if (!r.against.empty()) doc["against"] = r.against;
  if (r.with_differences) {
    json differences = json::array();
    for (const ValueDifference& d : r.differences) differences.push_back(DifferenceJson(d));
    doc["differences"] = differences;
  }
  if (!r.aborted_uploads.empty()) doc["aborted_uploads"] = r.aborted_uploads;
  return Document(doc, r.ok());
}

static json TransferJson(const TransferReport& t) {
  return {{"copied_in_store", t.copied_in_store}, {"uploaded", t.uploaded}, {"downloaded", t.downloaded}};
}

std::string ToJson(const ReshardReport& r) {
  using Mode = ReshardReport::Mode;
  switch (r.mode) {
    case Mode::kPlan:
      return Document({{"plan", r.plan}, {"num_tasks", r.num_tasks}, {"bytes", r.bytes}, {"notes", r.notes}}, true);
    case Mode::kExecute:
      return Document({{"task", r.task}, {"num_tasks", r.num_tasks}, {"part", r.part}, {"entries", r.entries},
                       {"bytes", r.bytes}, {"transfer", TransferJson(r.transfer)}},
                      true);
    case Mode::kFinalize:
      return Document({{"output", r.output}, {"num_tasks", r.num_tasks}, {"entries", r.entries},
                       {"verified", r.verified}, {"transfer", TransferJson(r.transfer)}},
                      true);
    case Mode::kReshard:
    case Mode::kDryRun:
      break;
  }
  json tensors = json::array();
  for (const ReshardTensor& t : r.tensors) {
    json old = json::array(), neu = json::array();
    for (const auto& p : t.old_pieces) old.push_back(PieceJson(p, false));
    for (const auto& p : t.new_pieces) neu.push_back(PieceJson(p, true));
    json j{{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"resliced", t.resliced},
           {"old", std::move(old)}, {"new", std::move(neu)}};
    if (!t.source.empty()) j["source"] = t.source;  // a renamed TF1 slot
    if (!t.rule.empty()) j["rule"] = t.rule;
    if (!t.note.empty()) j["note"] = t.note;
    tensors.push_back(std::move(j));
  }
  json files = json::array();
  for (int32_t f = 0; f < r.num_files; ++f) {
    int n = 0;
    for (const ReshardTensor& t : r.tensors) {
      for (const auto& p : t.new_pieces) n += p.file == f;
    }
    files.push_back({{"file", f}, {"path", r.data_files[f]}, {"bytes", r.file_bytes[f]},
                     {"pieces", n}});
  }
  json doc{{"input", r.input},   {"output", r.output},         {"num_files", r.num_files}, {"policy", r.policy},
           {"tensors", tensors}, {"files", std::move(files)}, {"notes", r.notes}};
  if (r.mode == Mode::kReshard) doc["verified"] = r.verified;
  doc["transfer"] = TransferJson(r.transfer);
  return Document(doc, true);
}

std::string ToJson(const MergeCommandReport& r) {
  json tensors = json::array();
  for (const MergedTensor& t : r.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", DTypeName(t.dtype)},
                       {"shape", t.shape},
                       {"file", t.file},
                       {"bytes", t.bytes},
                       {"from", t.from.empty() ? json(nullptr) : json(t.from)}});
  }
  return Document(json{{"output", r.output},
                       {"dry_run", r.dry_run},
                       {"inputs", r.inputs},
                       {"skipped", r.skipped},
                       {"num_files", r.num_files},
                       {"bytes", r.bytes},
                       {"dropped", {{"filtered", r.dropped_filtered},
                                    {"filtered_bytes", r.bytes_dropped_filtered},
                                    {"optimizer", r.dropped_optimizer},
                                    {"optimizer_bytes", r.bytes_dropped_optimizer},
                                    {"collapsed", r.collapsed},
                                    {"collapsed_bytes", r.bytes_collapsed}}},
                       {"averaged", r.averaged},
                       {"expanded", r.expanded},
                       {"object_graph", {{"attributes_removed", r.graph_attributes_removed},
                                         {"attributes_renamed", r.graph_attributes_renamed},
                                         {"slot_references_removed", r.graph_slots_removed}}},
                       {"verified", r.verified},
                       {"notes", r.notes},
                       {"transfer", TransferJson(r.transfer)},
                       {"tensors", std::move(tensors)}},
                  true);
}

std::string ToJson(const ConvertCommandReport& r) {
  return Document(json{{"output", r.output},
                       {"format", r.format},
                       {"files", r.files},
                       {"tensors", r.tensors},
                       {"bytes", r.bytes},
                       {"skipped", r.skipped},
                       {"notes", r.notes},
                       {"transfer", TransferJson(r.transfer)},
                       {"verified", r.verified}},
                  true);
}

void WriteJson(const InspectReport& r, const std::function<void(std::string_view)>& write) {
  const Checkpoint& c = *r.checkpoint;
  const CheckpointInfo& info = c.info();
  std::string out = "{\n";
  auto field = [&out](const char* key, const json& value) {
    out += "  ";
    out += json(key).dump();
    out += ": ";
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);
    out += ",\n";
  };
  field("ok", r.problem.ok());
  if (!r.problem.ok()) field("error", ErrorObject(r.problem));
  field("path", info.prefix);
  field("format", FormatName(info.format));
  field("num_shards", info.format != Format::kV1 ? info.num_shards : static_cast<int32_t>(info.v1_files.size()));
  field("endianness", info.big_endian ? "big" : "little");
  field("total_bytes", r.total_bytes);
  if (!r.data_file_problems.empty()) field("data_file_problems", r.data_file_problems);
  out += "  \"tensors\": [";
  bool first = true;
  for (const InspectedTensor& t : r.tensors) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    AppendTensorJson(c, t, &out);
    if (out.size() > (1 << 20)) {  // in pieces: memory does not grow with the listing
      write(out);
      out.clear();
    }
  }
  out += first ? "]" : "\n  ]";
  if (r.tree) {
    out += ",\n  \"object_graph\": ";
    out += r.has_graph ? GraphJson(r.graph).dump(-1, ' ', false, json::error_handler_t::replace) : "null";
  }
  out += "\n}\n";
  write(out);
}

}  // namespace tfckpt
