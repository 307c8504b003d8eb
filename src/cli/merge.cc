// tfckpt merge: TensorFlow's MergeV2Checkpoints, and recovery of unmerged distributed saves.
#include <iostream>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "options.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt::cli {
namespace {

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

int RunMerge(const OptionValues& v) {
  MergeRequest request;
  const bool json = v.Has("--json"), quiet = v.Has("--quiet");
  RunOptions run = CommandRun("merge", !quiet && !json);
  if (absl::Status s = FillRequest(v, &request, &run); !s.ok()) return ReportError("merge", s);
  const char* cmd = "merge";
  absl::StatusOr<MergeCommandReport> r = Merge(request, run);
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (!r->mismatches.empty()) return ReportMismatches(*r);
  if (json) {
    PrintJson(ToJson(*r));
    return kExitOk;
  }
  if (!r->found_parts.empty()) {
    std::cout << "found " << r->found_parts.size() << " parts: " << absl::StrJoin(r->found_parts, ", ") << "\n";
  }
  for (const auto& n : r->notes) std::cerr << "tfckpt merge: note: " << n << "\n";
  if (r->combined) {
    PrintCombined(*r, request.drop_optimizer);
  } else {
    std::cout << absl::StrFormat("merged %d input%s into %s: %d data file%s, %s%s\n", r->inputs.size(),
                                 r->inputs.size() == 1 ? "" : "s", r->output, r->num_files, r->num_files == 1 ? "" : "s",
                                 Count(r->entries, "entry", "entries"), r->verified ? ", validated" : "");
  }
  if (!quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddMerge(CLI::App& app, std::span<const OptionSpec> table) {
  auto values = std::make_shared<OptionValues>();
  CLI::App* sub = app.add_subcommand("merge", "Merge bundles like TensorFlow's MergeV2Checkpoints; finish unmerged saves");
  AddTableOptions(sub, table, values.get());
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
  return [values] { return RunMerge(*values); };
}

}  // namespace tfckpt::cli
