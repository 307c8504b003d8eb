// reshard: re-slice partitioned variables and re-split data files, and its scale-out steps
// (commands.h).
#include <algorithm>
#include <cstdlib>

#include "commands/command_util.h"
#include "run/run.h"
#include "format/bundle/bundle_writer.h"
#include "publish/publication.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/commands.h"
#include "copy/copy.h"
#include "tfckpt/open.h"
#include "reshard/reshard.h"
#include "reshard/scale_out.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

// The plan as the report describes it: each tensor's stored pieces before and after (with
// policy by-task, each new piece's task).
void DescribePlan(const ReshardPlan& plan, const Policy& policy, ReshardReport* report) {
  std::vector<std::vector<int64_t>> tasks;
  if (policy.kind == Policy::Kind::kByTask) tasks = PieceTasks(plan, std::max<int64_t>(1, plan.num_files));
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& tp = plan.tensors[i];
    const TensorEntry& t = *tp.source;
    ReshardTensor out{tp.out_name(), tp.out_name() != t.name ? t.name : "", t.dtype, t.shape, tp.resliced, {}, {},
                      tp.rule, tp.note};
    for (const StoredSlice& s : t.slices) {
      out.old_pieces.push_back(
          {StoredSpec(t, s), s.region.start, s.region.shape, s.data.v1_file < 0 ? s.data.shard : -1, 0});
    }
    for (size_t j = 0; j < tp.pieces.size(); ++j) {
      const PlannedPiece& p = tp.pieces[j];
      out.new_pieces.push_back(
          {StoredSpec(t, p), p.region.start, p.region.shape, p.file, p.bytes, tasks.empty() ? -1 : tasks[i][j]});
    }
    report->tensors.push_back(std::move(out));
  }
  report->num_files = plan.num_files;
  report->file_bytes = plan.file_bytes;
  for (int32_t f = 0; f < plan.num_files; ++f) report->data_files.push_back(DataFileName(report->output, f, plan.num_files));
  report->notes = plan.notes;
}

absl::StatusOr<ReshardReport> Execute(const ReshardRequest& r) {
  if (r.task.empty()) return absl::InvalidArgumentError("--execute needs --task I or --task auto");
  int task = 0;
  if (r.task == "auto") {
    TFCKPT_ASSIGN_OR_RETURN(task, TaskFromEnvironment());
  } else {
    char* end = nullptr;
    const long i = std::strtol(r.task.c_str(), &end, 10);
    if (*end != '\0' || i < 0 || i > 1'000'000) {
      return absl::InvalidArgumentError(StrCat("--task ", r.task, ": not a task number"));
    }
    task = static_cast<int>(i);
  }
  TFCKPT_ASSIGN_OR_RETURN(TaskReport t, ExecuteTask(r.execute, task, StartPhase("copying", 0)));
  ReshardReport report;
  report.mode = ReshardReport::Mode::kExecute;
  report.task = t.task;
  report.num_tasks = t.num_tasks;
  report.part = t.part;
  report.entries = t.entries;
  report.bytes = t.bytes;
  AddTransfers({t.source, t.out}, &report.transfer, &report.notes);
  return report;
}

absl::StatusOr<ReshardReport> Finalize(const ReshardRequest& r) {
  // (The parts' data files are renamed into place: from the first rename on, a stop waits
  // until the finalization is done; run/run.h.)
  TFCKPT_ASSIGN_OR_RETURN(FinalizeReport f, FinalizeTasks(r.finalize));
  ReshardReport report;
  report.mode = ReshardReport::Mode::kFinalize;
  report.output = f.out;
  report.num_tasks = f.num_tasks;
  report.entries = f.entries;
  report.verified = f.verified;
  return report;
}

// --plan: the scale-out plan instead of the output (docs/SCALE_OUT.md).
absl::Status WriteTaskPlan(const Checkpoint& c, const ReshardPlan& plan, const ReshardRequest& r,
                           const std::string& out, ReshardReport* report) {
  if (!r.force && Location::Of(out).Sibling(".index").Exists()) {
    return absl::AlreadyExistsError(StrCat(out, ".index: output exists (use --force to replace it)"));
  }
  TaskPlanOptions o;
  o.out = out;
  o.partitions = r.partitions;
  o.policy = r.policy;
  o.bytes_per_string = r.bytes_per_string;
  o.overwrite = r.force;
  o.verify = !r.no_verify;
  o.server_side = r.server_side;
  TFCKPT_ASSIGN_OR_RETURN(std::string doc, MakeTaskPlan(c, plan, o));
  // (A plan already there is replaced: it is the plan of this output.)
  const Location plan_file = Location::Of(r.plan_out);
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Publication> publication,
                          Publication::Files({plan_file}, {}, /*overwrite=*/true));
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, plan_file.store().Create(r.plan_out));
  TFCKPT_RETURN_IF_ERROR(f->Append(doc));
  TFCKPT_RETURN_IF_ERROR(f->Close());
  publication->Add(*f);
  TFCKPT_RETURN_IF_ERROR(publication->CommitFiles());
  report->mode = ReshardReport::Mode::kPlan;
  report->plan = r.plan_out;
  report->num_tasks = plan.num_files;
  for (uint64_t b : plan.file_bytes) report->bytes += b;
  return absl::OkStatus();
}

absl::StatusOr<ReshardReport> ReshardRun(const ReshardRequest& r) {
  // (First: --server-side always with a store that cannot is a usage error, whatever else.)
  if (!r.ckpt.empty() && !r.out.empty()) TFCKPT_RETURN_IF_ERROR(CheckServerSide(r.server_side, {r.ckpt}, r.out));
  std::string out;
  if (!r.out.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(out, OutputName("-o", r.out, true));
  }
  if (!r.plan_out.empty()) TFCKPT_RETURN_IF_ERROR(OutputName("--plan", r.plan_out, false).status());
  const int modes = !r.execute.empty() + !r.finalize.empty() + !r.plan_out.empty();
  if (modes > 1) return absl::InvalidArgumentError("--plan, --execute and --finalize exclude each other");
  if (!r.task.empty() && r.execute.empty()) return absl::InvalidArgumentError("--task goes with --execute");
  if (r.dry_run && !r.plan_out.empty()) return absl::InvalidArgumentError("--dry-run excludes --plan");
  if (!r.execute.empty()) return Execute(r);
  if (!r.finalize.empty()) return Finalize(r);
  if (r.ckpt.empty() || out.empty()) {
    return absl::InvalidArgumentError("CKPT and -o OUT are required (except with --execute/--finalize)");
  }
  if (r.bytes_per_string < 1) return absl::InvalidArgumentError("--bytes-per-string must be at least 1");
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(r.ckpt));
  ReshardOptions options;
  for (const std::string& p : r.partitions) {
    TFCKPT_ASSIGN_OR_RETURN(PartitionRule rule, ParsePartitionRule(p));
    options.rules.push_back(std::move(rule));
  }
  TFCKPT_ASSIGN_OR_RETURN(options.policy, ParsePolicy(r.policy));
  options.bytes_per_string = r.bytes_per_string;
  options.allow_any_dtype = r.allow_any_dtype;
  TFCKPT_ASSIGN_OR_RETURN(ReshardPlan plan, PlanReshard(*c, options));
  // OUT may not be (or reach through a symlink or hard link) any file of the input.
  const Location at = Location::Of(out);
  TFCKPT_RETURN_IF_ERROR(at.store().CheckNotInputs(BundleFilesAt(at, plan.num_files), FilesOf(c->info())));
  ReshardReport report;
  report.input = r.ckpt;
  report.output = out;
  report.policy = r.policy;
  if (!r.plan_out.empty()) {
    report.notes = plan.notes;
    TFCKPT_RETURN_IF_ERROR(WriteTaskPlan(*c, plan, r, out, &report));
    return report;
  }
  DescribePlan(plan, options.policy, &report);
  if (r.dry_run) {
    report.mode = ReshardReport::Mode::kDryRun;
    return report;
  }
  std::optional<std::vector<VerifySource>> sources;
  if (!r.no_verify) sources = ReshardSources(*c, plan);
  TFCKPT_RETURN_IF_ERROR(ExecuteVerified(*c, plan, out, r.force, r.server_side, "copying", std::move(sources),
                                         &report.verified).status());
  AddTransfers({r.ckpt, out}, &report.transfer, &report.notes);
  return report;
}

}  // namespace

absl::StatusOr<ReshardReport> Reshard(const ReshardRequest& request, const RunOptions& run) {
  return AsRun<ReshardReport>(run, [&] { return ReshardRun(request); });
}

}  // namespace tfckpt
