// tfckpt inspect: list tensors, print values and statistics, show the object graph.

#include <cmath>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/object_graph.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

std::string StatNumber(long double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return absl::StrFormat("%.6g", static_cast<double>(v));
}

// The listing: a header line, then the table.
void PrintTable(const InspectReport& r) {
  const Checkpoint& c = *r.checkpoint;
  const CheckpointInfo& info = c.info();
  const size_t files = info.format != Format::kV1 ? info.data_files.size() : info.v1_files.size();
  std::cout << absl::StrFormat("%s %s: %d %s, %s, %s (%d bytes)\n",
                               info.format == Format::kV2   ? "V2 checkpoint"
                               : info.format == Format::kV1 ? "V1 checkpoint"
                                                            : "safetensors",
                               info.prefix, files,
                               info.format == Format::kV2 ? (files == 1 ? "data file" : "data files")
                                                          : (files == 1 ? "file" : "files"),
                               Count(c.tensors().size(), "tensor"), HumanBytes(r.total_bytes), r.total_bytes);
  std::vector<std::string> names;
  names.reserve(r.tensors.size());
  size_t w = 4;
  for (const InspectedTensor& t : r.tensors) {
    names.push_back(PrintableKey(t.tensor->name));
    w = std::max(w, DisplayWidth(names.back()));
  }
  std::string out = absl::StrFormat("%s  %-10s  %-18s  %10s  %s\n", PadRight("NAME", w), "DTYPE", "SHAPE", "SIZE", "SLICES");
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorEntry* t = r.tensors[i].tensor;
    absl::StrAppendFormat(&out, "%s  %-10s  %-18s  %10s  %s\n", PadRight(names[i], w), DTypeName(t->dtype),
                          ShapeString(t->shape), HumanBytes(t->bytes), t->partitioned ? StrCat(t->slices.size()) : "-");
  }
  std::cout << out;
}

void PrintStats(const InspectReport& r) {
  size_t w = 4;
  for (const InspectedTensor& t : r.tensors) w = std::max(w, DisplayWidth(PrintableKey(t.tensor->name)));
  std::cout << absl::StrFormat("%s  %12s  %12s  %12s  %12s  %6s  %6s  %8s\n", PadRight("NAME", w), "MIN", "MAX", "MEAN",
                               "STD", "NAN", "INF", "ZEROS");
  for (const InspectedTensor& t : r.tensors) {
    if (!t.stats) continue;
    const TensorStats& st = *t.stats;
    std::cout << absl::StrFormat("%s  %12s  %12s  %12s  %12s  %6d  %6d  %8d\n", PadRight(PrintableKey(t.tensor->name), w),
                                 StatNumber(st.min), StatNumber(st.max), StatNumber(st.mean), StatNumber(st.std), st.nan,
                                 st.inf, st.zeros);
  }
}

int RunInspect(const OptionValues& v) {
  InspectRequest request;
  const bool json = v.Has("--json");
  RunOptions run = CommandRun("inspect", false);
  if (absl::Status s = FillRequest(v, &request, &run); !s.ok()) return ReportError("inspect", s);
  request.json_values = json;
  absl::StatusOr<InspectReport> report = Inspect(request, run);
  if (!report.ok()) return ReportError("inspect", report.status());
  const InspectReport& r = *report;
  // The listing is printed either way; missing bytes then make the exit code 3.
  auto finish = [&]() -> int {
    if (r.problem.ok()) return kExitOk;
    std::cout.flush();
    return ReportError("inspect", r.problem);
  };
  if (json) {
    WriteJson(r, [](std::string_view piece) {
      std::cout << piece;
      NoteJsonPrinted();
    });
    std::cout.flush();
    return finish();
  }
  for (const auto& n : r.checkpoint->info().notes) std::cerr << "tfckpt inspect: note: " << n << "\n";
  if (request.tree) {
    if (!r.has_graph) {
      std::cout << r.checkpoint->info().prefix << ": no object graph (" << kObjectGraphKey
                << " is absent: a TF1 name-based checkpoint)\n";
    } else {
      std::cout << r.tree_text;
    }
    return finish();
  }
  if (request.tensors.empty() && !request.stats) {
    PrintTable(r);
    // (The listing reads no payload; a tensor whose entry cannot be read is said once here,
    // as --json says it in "defect".)
    for (const InspectedTensor& t : r.tensors) {
      if (t.tensor->defect.empty() || !r.problem.ok()) continue;  // (an error is the one line then)
      std::cerr << "tfckpt inspect: note: tensor \"" << PrintableKey(t.tensor->name) << "\" cannot be read: "
                << t.tensor->defect << " (" << t.tensor->defect_check << "; run tfckpt validate)\n";
    }
    return finish();
  }
  if (request.stats) PrintStats(r);
  for (const InspectedTensor& t : r.tensors) {
    if (!t.values) continue;
    std::cout << PrintableKey(t.tensor->name) << " " << DTypeName(t.tensor->dtype) << " " << ShapeString(t.tensor->shape)
              << "\n"
              << *t.values << "\n";
  }
  return finish();
}

}  // namespace

std::function<int()> AddInspect(CLI::App& app, std::span<const OptionSpec> table) {
  auto values = std::make_shared<OptionValues>();
  CLI::App* sub = app.add_subcommand("inspect", "List tensors, print values and statistics, show the object graph");
  AddTableOptions(sub, table, values.get());
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
  return [values] { return RunInspect(*values); };
}

}  // namespace tfckpt::cli
