// tfckpt merge: TensorFlow's MergeV2Checkpoints, and recovery of unmerged distributed saves.
#include <iostream>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt::cli {
namespace {

struct MergeArgs {
  MergeRequest request;
  bool json = false, quiet = false;
  int jobs = 0;
};

// Parallel components or replicas that differ: one line each on stderr, then the error;
// nothing was written (exit status 1).
int ReportMismatches(const MergeCommandReport& r) {
  for (const Finding& f : r.mismatches) {
    std::cerr << "tfckpt merge: " << f.check << ": " << f.file << ": \"" << f.key << "\" " << f.message << "\n";
  }
  const Finding& first = r.mismatches[0];
  ReportError("merge", DataLossAt(first.check, first.file, first.key, first.offset,
                                  StrCat(r.mismatches.size(), " check(s) failed, the first: ", first.message,
                                         "; nothing written (--collapse-parallel=first or --no-check skips the check)")));
  return kExitCheckFailed;
}

void PrintCombined(const MergeCommandReport& r, bool drop_optimizer) {
  if (r.dry_run) {
    for (const auto& t : r.tensors) {
      std::cout << absl::StrFormat("%-60s %-9s %-14s file %d  %s  from %s\n", t.name, DTypeName(t.dtype),
                                   ShapeString(t.shape), t.file, HumanBytes(t.bytes), t.from);
    }
  }
  std::cout << absl::StrFormat("%s %s (%s) in %d data file%s from %d input%s%s\n",
                               r.dry_run ? "would write" : StrCat("wrote ", r.output, ":"), Count(r.tensors.size(), "tensor"),
                               HumanBytes(r.bytes), r.num_files, r.num_files == 1 ? "" : "s", r.inputs.size(),
                               r.inputs.size() == 1 ? "" : "s", r.verified ? ", validated" : "");
  if (drop_optimizer) {
    std::cout << absl::StrFormat("dropped %s (%s)\n", Count(r.dropped_optimizer, "optimizer tensor"),
                                 HumanBytes(r.bytes_dropped_optimizer));
  }
  if (r.dropped_filtered > 0) {
    std::cout << absl::StrFormat("filtered out %s (%s)\n", Count(r.dropped_filtered, "tensor"), HumanBytes(r.bytes_dropped_filtered));
  }
  if (r.collapsed > 0) std::cout << absl::StrFormat("collapsed %s (%s)\n", Count(r.collapsed, "tensor"), HumanBytes(r.bytes_collapsed));
  if (r.averaged > 0) std::cout << absl::StrFormat("averaged %s\n", Count(r.averaged, "tensor"));
  if (r.expanded > 0) std::cout << absl::StrFormat("added %s\n", Count(r.expanded, "parallel component"));
}

int RunMerge(const MergeArgs& a) {
  const char* cmd = "merge";
  absl::StatusOr<MergeCommandReport> r = Merge(a.request, CommandRun(cmd, !a.quiet && !a.json, a.jobs));
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (!r->mismatches.empty()) return ReportMismatches(*r);
  if (a.json) {
    PrintJson(ToJson(*r));
    return kExitOk;
  }
  if (!r->found_parts.empty()) {
    std::cout << "found " << r->found_parts.size() << " parts: " << absl::StrJoin(r->found_parts, ", ") << "\n";
  }
  for (const auto& n : r->notes) std::cerr << "tfckpt merge: note: " << n << "\n";
  if (r->combined) {
    PrintCombined(*r, a.request.drop_optimizer);
  } else {
    std::cout << absl::StrFormat("merged %d input%s into %s: %d data file%s, %s%s\n", r->inputs.size(),
                                 r->inputs.size() == 1 ? "" : "s", r->output, r->num_files, r->num_files == 1 ? "" : "s",
                                 Count(r->entries, "entry", "entries"), r->verified ? ", validated" : "");
  }
  if (!a.quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddMerge(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  MergeRequest& r = args->request;
  CLI::App* sub = app.add_subcommand("merge", "Merge bundles like TensorFlow's MergeV2Checkpoints; finish unmerged saves");
  sub->add_option("PREFIX", r.inputs, "Input bundles, in order (with --recover: the checkpoint to finish)")
      ->required();
  AddOutputOption(sub, &r.out, "prefix (with --recover: defaults to PREFIX)");
  sub->add_flag("--recover", r.recover,
                "Find the parts of an interrupted or unmerged save of PREFIX (PREFIX_temp/part-*, "
                "PREFIX_temp_<hex>/part-*, PREFIX.part-*, DTensor's PREFIX_dev-D-of-N and "
                "PREFIX_device_D_save_op_K) and merge them");
  sub->add_flag("--allow-missing", r.allow_missing, "Skip inputs without an index (at least one must exist)");
  sub->add_flag("--move", r.move,
                "TensorFlow's behaviour: rename the data files, delete input indexes and emptied input directories");
  AddForceOption(sub, &r.force);
  AddNoVerifyOption(sub, &r.no_verify, "read back and compared with the inputs: CRCs, layout, values");
  AddServerSideOption(sub, &r.server_side);
  AddJsonOption(sub, &args->json, "one schema for every mode");
  auto* edits = "Combining (rewrites the data; inputs may be any checkpoint, V1 included)";
  sub->add_option("--on-conflict", r.on_conflict,
                  "The same tensor in several inputs: error (default), first, last")
      ->check(CLI::IsMember({"error", "first", "last"}))
      ->group(edits);
  AddNameRuleOptions(sub, &r.include, &r.exclude, &r.renames, edits);
  sub->add_flag("--drop-optimizer", r.drop_optimizer,
                "Remove optimizer state (TF2 .OPTIMIZER_SLOT and optimizer/*, TF1 Adam/Momentum/Ftrl/... slots, "
                "beta1_power, training/<Optimizer>/*)")
      ->group(edits);
  sub->add_flag("--average", r.average, "Element-wise mean of float tensors over all inputs (two or more); others from the last")
      ->group(edits);
  sub->add_option("--collapse-parallel", r.collapse_parallel,
                  "Keep component 0 (X/.ATTRIBUTES/VARIABLE_VALUE) of parallel-device variables and drop "
                  "parallel_component_1..N-1, TF's names (others are left, with a note); check (default) verifies "
                  "the values are equal, whatever the slicing")
      ->expected(0, 1)
      ->default_str("check")
      ->check(CLI::IsMember({"check", "first"}))
      ->group(edits);
  sub->add_option("--expand-parallel", r.expand_parallel,
                  "Copy each VARIABLE_VALUE but save_counter's into parallel_component_1..N-1 (restore on an N-device "
                  "parallel device; N >= 2)")
      ->group(edits);
  CLI::Option* collapse_replicas =
      sub->add_flag("--collapse-replicas", r.collapse_replicas,
                    "TPU replicas NAME/0..NAME/K-1 become NAME, after checking their values are equal (a lone NAME/0, "
                    "as TF1's Saver writes it, too; slots NAME/0/SLOT become NAME/SLOT)")
          ->group(edits);
  sub->add_flag("--no-check", r.no_check, "With --collapse-replicas (required): do not compare the replicas")
      ->needs(collapse_replicas)
      ->group(edits);
  AddDryRunOption(sub, &r.dry_run, "each output tensor and its source; with --json as JSON")->group(edits);
  AddJobsOption(sub, &args->jobs, "Output data files written in parallel")->group(edits);
  AddConnectionsOption(sub);
  AddQuietOption(sub, &args->quiet, "labelled 'copying', then 'verifying', the comparison with the inputs")->group(edits);
  sub->footer(
      "Examples:\n"
      "  tfckpt merge part0/model part1/model part2/model -o merged/model\n"
      "  tfckpt merge --recover train/model.ckpt-1000         # finish model.ckpt-1000_temp/part-*\n"
      "  tfckpt merge --recover train/model.ckpt-1000 --move  # ... and clean up like TensorFlow\n"
      "  tfckpt merge --recover dtensor/ckpt-5                # DTensor's ckpt-5_device_*_save_op_*\n"
      "  tfckpt merge bert/model.ckpt-100000 -o serve/model --drop-optimizer\n"
      "  tfckpt merge a/ckpt-1 b/ckpt-1 -o ab/ckpt --on-conflict last --exclude '^global_step$'\n"
      "  tfckpt merge run/ckpt-8 run/ckpt-9 run/ckpt-10 -o avg/ckpt --average\n"
      "  tfckpt merge old/model -o new/model --rename '^encoder/=enc/' --dry-run\n"
      "  tfckpt merge pd/ckpt-1 -o single/ckpt-1 --collapse-parallel\n"
      "  tfckpt merge single/ckpt-1 -o pd/ckpt-1 --expand-parallel 4\n"
      "  tfckpt merge tpu/model -o cpu/model --collapse-replicas\n\n"
      "Without edits, inputs are left untouched unless --move (data files are hard-linked, else copied).\n"
      "With edits, the data is rewritten and the object graph updated to match.\n"
      "Exit codes: 0 ok, 1 the output does not match the inputs (nothing is written; with --move it is kept) or parallel components / replicas differ,\n"
      "2 usage error or refused request (conflict, rename collision, existing output), 3 missing or\n"
      "unreadable input; interrupted: 130 (Ctrl-C), 143 (SIGTERM), 129 (SIGHUP). A run that fails or is\n"
      "interrupted leaves nothing under OUT's names (with --move: until the inputs are consumed).");
  return [args] { return RunMerge(*args); };
}

}  // namespace tfckpt::cli
