// tfckpt validate: prove a checkpoint intact, or two checkpoints equal.
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"
#include "tfckpt/validate.h"

namespace tfckpt::cli {
namespace {

struct ValidateArgs {
  std::string ckpt, against;
  bool json = false, strict = false, quick = false, report = false, abort_uploads = false;
  int jobs = 0;
  std::optional<double> tolerance;
};

using json = nlohmann::ordered_json;

json FindingJson(const Finding& f) {
  auto opt = [](const std::string& s) -> json { return s.empty() ? json(nullptr) : json(s); };
  return json{{"check", f.check},
              {"file", opt(f.file)},
              {"key", opt(f.key)},
              {"offset", f.offset >= 0 ? json(f.offset) : json(nullptr)},
              {"message", f.message}};
}

// A finding's severity as reported: --strict turns warnings into errors.
Severity Reported(const Finding& f, bool strict) {
  return strict && f.severity == Severity::kWarning ? Severity::kError : f.severity;
}

std::string FindingLine(const Finding& f, Severity severity) {
  std::string where = f.file;
  if (!f.key.empty()) StrAppend(&where, where.empty() ? "" : ": ", "key \"", PrintableKey(f.key), "\"");
  if (f.offset >= 0) StrAppend(&where, ": offset ", f.offset);
  const char* label = severity == Severity::kError ? "error" : severity == Severity::kWarning ? "warning" : "note";
  return absl::StrFormat("%-7s %-24s %s%s%s", label, f.check, where, where.empty() ? "" : ": ", f.message);
}

// --report: a number as JSON, "inf" when infinite.
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
  if (a.tolerance && a.against.empty()) {
    return ReportError("validate", absl::InvalidArgumentError("--tolerance needs --against"));
  }
  if (a.report && a.against.empty()) {
    return ReportError("validate", absl::InvalidArgumentError("--report needs --against"));
  }
  if (a.tolerance && !(*a.tolerance >= 0)) {
    return ReportError("validate", absl::InvalidArgumentError("--tolerance must be a number >= 0"));
  }
  if (a.abort_uploads) {
    if (!a.against.empty()) return ReportError("validate", absl::InvalidArgumentError("--abort-uploads takes no --against"));
    auto aborted = Storage::For(a.ckpt).AbortUnfinishedWrites(a.ckpt);
    if (!aborted.ok()) return ReportError("validate", aborted.status());
    for (const std::string& name : *aborted) std::cerr << "tfckpt validate: aborted the upload in progress of " << name << "\n";
  }
  absl::StatusOr<ValidateReport> report;
  if (a.against.empty()) {
    ValidateOptions o;
    o.quick = a.quick;
    o.jobs = a.jobs;
    report = Validate(a.ckpt, o);
  } else {
    CompareOptions o;
    o.jobs = a.jobs;
    o.use_tolerance = a.tolerance.has_value();
    o.tolerance = a.tolerance.value_or(0);
    report = Compare(a.ckpt, a.against, o);
  }
  if (!report.ok()) return ReportError("validate", report.status());
  const ValidateReport& r = *report;
  const bool ok = r.ok(a.strict);
  if (a.json) {
    json errors = json::array(), warnings = json::array(), notes = json::array();
    for (const Finding& f : r.findings) {
      const Severity s = Reported(f, a.strict);
      (s == Severity::kError ? errors : s == Severity::kWarning ? warnings : notes).push_back(FindingJson(f));
    }
    json doc{{"path", r.path},    {"tensors", r.tensors},   {"bytes_checked", r.bytes_checked},
             {"errors", errors},  {"warnings", warnings}, {"notes", notes}};
    if (!a.against.empty()) doc["against"] = a.against;
    if (a.report) {
      json differences = json::array();
      for (const ValueDifference& d : r.differences) differences.push_back(DifferenceJson(d));
      doc["differences"] = differences;
    }
    PrintJson(doc, ok);
  } else {
    for (const Finding& f : r.findings) std::cout << FindingLine(f, Reported(f, a.strict)) << "\n";
    if (a.report) {
      for (const ValueDifference& d : r.differences) std::cout << DifferenceLine(d) << "\n";
    }
    const size_t errors = a.strict ? r.errors() + r.warnings() : r.errors();
    const size_t warnings = a.strict ? 0 : r.warnings();
    std::vector<std::string> counts;
    if (!ok) counts.push_back(Count(errors, "error"));
    if (warnings) counts.push_back(Count(warnings, "warning"));
    if (r.notes()) counts.push_back(Count(r.notes(), "note"));
    std::cout << absl::StrFormat("%s: %s, %d bytes checked%s: %s%s\n", r.path, Count(r.tensors, "tensor"), r.bytes_checked,
                                 a.against.empty() ? "" : StrCat(" against ", a.against), ok ? "OK" : "FAILED",
                                 counts.empty() ? "" : StrCat(" (", absl::StrJoin(counts, ", "), ")"));
  }
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace

std::function<int()> AddValidate(CLI::App& app) {
  auto args = std::make_shared<ValidateArgs>();
  CLI::App* sub = app.add_subcommand("validate", "Prove a checkpoint intact, or two checkpoints equal");
  sub->add_option("CKPT", args->ckpt, "Checkpoint to check: prefix, .index file, directory, V1 file, or s3:// / gs:// URL (man tfckpt: OBJECT STORES)")->required();
  sub->add_option("--against", args->against,
                  "Compare with this checkpoint instead: same tensors, dtypes, shapes and values, whatever the slicing");
  AddJsonOption(sub, &args->json);
  sub->add_flag("--strict", args->strict, "Treat warnings as errors (notes stay notes)");
  sub->add_flag("--quick", args->quick, "Metadata only: skip reading data and checking tensor checksums");
  sub->add_flag("--abort-uploads", args->abort_uploads,
                "First abort the uploads in progress under an s3:// or gs:// CKPT (left by killed writers; "
                "validate lists them), then validate, e.g. validate --abort-uploads s3://b/run/ckpt-100");
  AddJobsOption(sub, &args->jobs, "Threads for data checks");
  AddConnectionsOption(sub);
  sub->add_option("--tolerance", args->tolerance,
                  "With --against: floats may differ by this much (absolute); tensors whose dtype changed between "
                  "floating-point dtypes (a cast) are then compared by value, the change reported as a note");
  sub->add_flag("--report", args->report,
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
