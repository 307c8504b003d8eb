// tfckpt validate: prove a checkpoint intact, or two checkpoints equal.
#include <cmath>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "tfckpt/commands.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

std::string FindingLine(const Finding& f) {
  std::string where = f.file;
  if (!f.key.empty()) StrAppend(&where, where.empty() ? "" : ": ", "key \"", PrintableKey(f.key), "\"");
  if (f.offset >= 0) StrAppend(&where, ": offset ", f.offset);
  const char* label = f.severity == Severity::kError ? "error" : f.severity == Severity::kWarning ? "warning" : "note";
  return absl::StrFormat("%-7s %-24s %s%s%s", label, f.check, where, where.empty() ? "" : ": ", f.message);
}

// --report: one line per differing tensor.
std::string DifferenceLine(const ValueDifference& d) {
  std::string line = absl::StrFormat("%-7s %s: %d of %d elements", "differ", PrintableKey(d.tensor), d.differing, d.elements);
  if (!d.numeric) {
    StrAppend(&line, "; first at ", ShapeString(d.first.index), " (new ", d.first.new_value, ", old ", d.first.old_value, ")");
    return line;
  }
  StrAppend(&line, absl::StrFormat("; max |new - old| %g at %s (new %s, old %s); max |new - old| / |old| %g", d.max_abs,
                                   ShapeString(d.max.index), d.max.new_value, d.max.old_value, d.max_rel));
  return line;
}

int RunValidate(const OptionValues& v) {
  ValidateRequest request;
  const bool json = v.Has("--json");
  RunOptions run = CommandRun("validate", false);
  if (absl::Status s = FillRequest(v, &request, &run); !s.ok()) return ReportError("validate", s);
  absl::StatusOr<ValidateCommandReport> report = ValidateCommand(request, run);
  if (!report.ok()) return ReportError("validate", report.status());
  const ValidateCommandReport& r = *report;
  for (const std::string& name : r.aborted_uploads) {
    std::cerr << "tfckpt validate: aborted the upload in progress of " << name << "\n";
  }
  if (json) {
    PrintJson(ToJson(r));
  } else {
    for (const Finding& f : r.findings) std::cout << FindingLine(f) << "\n";
    if (r.with_differences) {
      for (const ValueDifference& d : r.differences) std::cout << DifferenceLine(d) << "\n";
    }
    std::vector<std::string> counts;
    if (!r.ok()) counts.push_back(Count(r.errors, "error"));
    if (r.warnings) counts.push_back(Count(r.warnings, "warning"));
    if (r.notes) counts.push_back(Count(r.notes, "note"));
    std::cout << absl::StrFormat("%s: %s, %d bytes checked%s: %s%s\n", r.path, Count(r.tensors, "tensor"), r.bytes_checked,
                                 r.against.empty() ? "" : StrCat(" against ", r.against), r.ok() ? "OK" : "FAILED",
                                 counts.empty() ? "" : StrCat(" (", absl::StrJoin(counts, ", "), ")"));
  }
  return r.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace

std::function<int()> AddValidate(CLI::App& app, std::span<const OptionSpec> table) {
  auto values = std::make_shared<OptionValues>();
  CLI::App* sub = app.add_subcommand("validate", "Prove a checkpoint intact, or two checkpoints equal");
  AddTableOptions(sub, table, values.get());
  sub->footer(
      "Examples:\n"
      "  tfckpt validate train_dir/                       # newest checkpoint, every check\n"
      "  tfckpt validate model.ckpt-1000 --json > report.json   # a document even when it fails\n"
      "  tfckpt validate model.ckpt-1000 --quick --strict # metadata only; warnings fail too\n"
      "  tfckpt validate resharded/model --against model.ckpt-1000\n"
      "  tfckpt validate model_bf16 --against model_f32 --tolerance 0.01  # dtype change: notes\n"
      "  tfckpt validate finetuned/ckpt --against base/ckpt --report --json > diff.json\n\n"
      "Exit codes: 0 no errors, 1 a check failed, 2 usage error, 3 the input cannot be read at all.\n"
      "Check ids are listed in man tfckpt-validate.");
  return [values] { return RunValidate(*values); };
}

}  // namespace tfckpt::cli
