// tfckpt validate: prove a checkpoint intact, or two checkpoints equal.
#include <cmath>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/commands.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt::cli {
namespace {

struct ValidateArgs {
  ValidateRequest request;
  bool json = false;
  int jobs = 0;
};

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

int RunValidate(const ValidateArgs& a) {
  absl::StatusOr<ValidateCommandReport> report = ValidateCommand(a.request, CommandRun("validate", false, a.jobs));
  if (!report.ok()) return ReportError("validate", report.status());
  const ValidateCommandReport& r = *report;
  for (const std::string& name : r.aborted_uploads) {
    std::cerr << "tfckpt validate: aborted the upload in progress of " << name << "\n";
  }
  if (a.json) {
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

std::function<int()> AddValidate(CLI::App& app) {
  auto args = std::make_shared<ValidateArgs>();
  ValidateRequest& r = args->request;
  CLI::App* sub = app.add_subcommand("validate", "Prove a checkpoint intact, or two checkpoints equal");
  sub->add_option("CKPT", r.ckpt, "Checkpoint to check: prefix, .index file, directory, V1 file, or s3:// / gs:// URL (man tfckpt: OBJECT STORES)")->required();
  sub->add_option("--against", r.against,
                  "Compare with this checkpoint instead: same tensors, dtypes, shapes and values, whatever the slicing");
  AddJsonOption(sub, &args->json);
  sub->add_flag("--strict", r.strict, "Treat warnings as errors (notes stay notes)");
  sub->add_flag("--quick", r.quick, "Metadata only: skip reading data and checking tensor checksums");
  sub->add_flag("--abort-uploads", r.abort_uploads,
                "First abort the uploads in progress under an s3:// or gs:// CKPT (left by killed writers; "
                "validate lists them), then validate, e.g. validate --abort-uploads s3://my-bucket/run/ckpt-100");
  sub->add_option_function<std::string>(
         "--older-than",
         [&r](const std::string& v) {
           // A whole number of seconds, minutes, hours or days: 90s, 30m, 2h, 7d (0: all).
           int64_t n = 0;
           const char unit = v.empty() ? 's' : v.back();
           const std::string digits = (unit == 's' || unit == 'm' || unit == 'h' || unit == 'd') ? v.substr(0, v.size() - 1) : v;
           const int64_t scale = unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : 1;
           if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
               !absl::SimpleAtoi(digits, &n)) {
             throw CLI::ValidationError("--older-than", v + ": not a duration such as 90s, 30m, 2h, 7d or 0");
           }
           r.older_than_seconds = n * scale;
         },
         "With --abort-uploads: only uploads started at least this long ago (default 1h: a younger one may be a "
         "writer still running; 0: all)")
      ->type_name("DURATION");
  AddJobsOption(sub, &args->jobs, "Threads for data checks");
  AddConnectionsOption(sub);
  sub->add_option("--tolerance", r.tolerance,
                  "With --against: floats may differ by this much (absolute); tensors whose dtype changed between "
                  "floating-point dtypes (a cast) are then compared by value, the change reported as a note");
  sub->add_flag("--report", r.report,
                "With --against: one line (with --json, one \"differences\" entry) per differing tensor: how many "
                "elements differ, the largest |new - old| and where, the largest relative difference");
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
  return [args] { return RunValidate(*args); };
}

}  // namespace tfckpt::cli
