// validate: prove a checkpoint intact, or two checkpoints equal (commands.h).
#include "commands/command_util.h"
#include "run/run.h"
#include "tfckpt/commands.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "validate/compare.h"
#include "validate/validate.h"

namespace tfckpt {
namespace {

absl::StatusOr<ValidateCommandReport> ValidateRun(const ValidateRequest& r) {
  if (r.ckpt.empty()) return absl::InvalidArgumentError("CKPT is required");
  if (r.tolerance && r.against.empty()) return absl::InvalidArgumentError("--tolerance needs --against");
  if (r.report && r.against.empty()) return absl::InvalidArgumentError("--report needs --against");
  if (r.tolerance && !(*r.tolerance >= 0)) return absl::InvalidArgumentError("--tolerance must be a number >= 0");
  ValidateCommandReport report;
  if (r.abort_uploads) {
    if (!r.against.empty()) return absl::InvalidArgumentError("--abort-uploads takes no --against");
    if (r.ckpt.find("://") == std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat(r.ckpt, ": --abort-uploads is for an object store's prefix (s3://, gs://); a local path has no uploads"));
    }
    TFCKPT_ASSIGN_OR_RETURN(report.aborted_uploads, Location::Of(r.ckpt).store().AbortUnfinishedWrites(r.ckpt, r.older_than_seconds));
  }
  ValidateReport v;
  if (r.against.empty()) {
    ValidateOptions o;
    o.quick = r.quick;
    o.jobs = RunJobs();
    TFCKPT_ASSIGN_OR_RETURN(v, Validate(r.ckpt, o));
  } else {
    CompareOptions o;
    o.jobs = RunJobs();
    o.use_tolerance = r.tolerance.has_value();
    o.tolerance = r.tolerance.value_or(0);
    TFCKPT_ASSIGN_OR_RETURN(v, Compare(r.ckpt, r.against, o));
  }
  report.path = v.path;
  report.against = r.against;
  report.strict = r.strict;
  report.with_differences = r.report;
  report.tensors = v.tensors;
  report.bytes_checked = v.bytes_checked;
  report.differences = std::move(v.differences);
  for (Finding& f : v.findings) {
    // --strict turns warnings into errors (notes stay notes).
    if (r.strict && f.severity == Severity::kWarning) f.severity = Severity::kError;
    (f.severity == Severity::kError ? report.errors : f.severity == Severity::kWarning ? report.warnings : report.notes)++;
    report.findings.push_back(std::move(f));
  }
  return report;
}

}  // namespace

absl::StatusOr<ValidateCommandReport> ValidateCommand(const ValidateRequest& request, const RunOptions& run) {
  return AsRun<ValidateCommandReport>(run, [&] { return ValidateRun(request); });
}

}  // namespace tfckpt
