// tfckpt merge: TensorFlow's MergeV2Checkpoints, and recovery of unmerged distributed saves.
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "progress.h"
#include "tfckpt/bundle_merge.h"
#include "tfckpt/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/combine.h"
#include "tfckpt/dtype.h"
#include "tfckpt/file.h"
#include "tfckpt/merge.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/validate.h"
#include "tfckpt/verify.h"

namespace tfckpt::cli {
namespace {

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out;
  bool recover = false, allow_missing = false, move = false, force = false, no_verify = false, json = false;
  // Combining (any of these rewrites the data instead of linking it).
  std::string on_conflict;  // "" = not given (error)
  std::vector<std::string> include, exclude, renames;
  bool drop_optimizer = false, average = false, collapse_replicas = false, no_check = false, dry_run = false;
  bool quiet = false;
  std::string collapse_parallel;  // "", "check", "first"
  std::optional<int> expand_parallel;
  int jobs = 0;

  bool combining() const {
    return !on_conflict.empty() || !include.empty() || !exclude.empty() || !renames.empty() || drop_optimizer ||
           average || collapse_replicas || !collapse_parallel.empty() || expand_parallel.has_value() || dry_run;
  }
};

using json = nlohmann::ordered_json;

// The one --json document of merge, plain or combining (fields in man tfckpt-merge);
// `skipped` and `entries` come from a plain merge, the rest from CombineCheckpoints'
// report (a plain merge fills only its inputs, tensors, num_files, bytes and notes).
json MergeJson(const MergeArgs& a, const std::string& out, const CombineReport& r,
               const std::vector<std::string>& skipped, bool verified) {
  json tensors = json::array();
  for (const auto& t : r.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", DTypeName(t.dtype)},
                       {"shape", t.shape},
                       {"file", t.file},
                       {"bytes", t.bytes},
                       {"from", t.origin.empty() ? json(nullptr) : json(t.origin)}});
  }
  return json{{"output", out},
              {"dry_run", a.dry_run},
              {"inputs", r.inputs},
              {"skipped", skipped},
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
              {"verified", verified},
              {"notes", r.notes},
              {"tensors", std::move(tensors)}};
}

// A plain merge's result in CombineReport's terms, its tensors read back from the output
// index ("from" unknown: entries are copied as they are).
absl::StatusOr<CombineReport> PlainMergeReport(const MergeReport& m, const std::string& out) {
  CombineReport r;
  r.inputs = m.inputs_used;
  r.num_files = m.num_files;
  r.notes = m.notes;
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(out));
  for (const TensorEntry& t : c->tensors()) {
    r.tensors.push_back({t.name, "", t.dtype, t.shape, t.slices.empty() ? 0 : t.slices[0].data.shard, t.bytes});
    r.bytes += t.bytes;
  }
  return r;
}

int RunCombine(const MergeArgs& a, const std::vector<std::string>& inputs, const std::string& out) {
  const char* cmd = "merge";
  if (a.move) return ReportError(cmd, absl::InvalidArgumentError("--move only applies to a plain merge (no edits)"));
  if (a.allow_missing) {
    return ReportError(cmd, absl::InvalidArgumentError("--allow-missing only applies to a plain merge (no edits)"));
  }
  if (a.average && inputs.size() < 2) {
    return ReportError(cmd, absl::InvalidArgumentError("--average needs at least two inputs to average"));
  }
  CombineOptions o;
  if (a.on_conflict == "first") o.on_conflict = CombineOptions::Conflict::kFirst;
  else if (a.on_conflict == "last") o.on_conflict = CombineOptions::Conflict::kLast;
  o.include = a.include;
  o.exclude = a.exclude;
  for (const auto& r : a.renames) {
    auto rule = ParseRenameRule(r);
    if (!rule.ok()) return ReportError(cmd, rule.status());
    o.renames.push_back(*rule);
  }
  o.drop_optimizer = a.drop_optimizer;
  o.average = a.average;
  if (a.collapse_parallel == "check") o.collapse_parallel = CombineOptions::Parallel::kCheck;
  if (a.collapse_parallel == "first") o.collapse_parallel = CombineOptions::Parallel::kFirst;
  o.expand_parallel = a.expand_parallel;
  o.collapse_replicas = a.collapse_replicas;
  o.check_replicas = !a.no_check;
  o.overwrite = a.force;
  o.dry_run = a.dry_run;
  o.jobs = a.jobs;
  std::unique_ptr<Progress> progress;
  o.start_progress = [&](uint64_t total) {
    progress = std::make_unique<Progress>(total, !a.quiet && !a.json, "copying");
    return progress->counter();
  };
  bool verified = false;
  if (!a.dry_run && !a.no_verify) {
    o.read_back = true;
    // Before anything is published: an output that fails leaves OUT as it was.
    o.before_commit = [&](const WrittenOutput& written, const CombineReport& plan) -> absl::Status {
      TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(plan.inputs));
      VerifyOptions vo;
      vo.jobs = a.jobs;
      return VerifyBeforeCommit(out, written, CombinedSources(plan, sources), vo, plan.bytes, !a.quiet && !a.json,
                                &progress, &verified);
    };
  }
  auto r = CombineCheckpoints(inputs, out, o);
  progress.reset();
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (!r->mismatches.empty()) {
    for (const Finding& f : r->mismatches) {
      std::cerr << "tfckpt merge: " << f.check << ": " << f.file << ": \"" << f.key << "\" " << f.message << "\n";
    }
    const Finding& first = r->mismatches[0];
    ReportError(cmd, DataLossAt(first.check, first.file, first.key, first.offset,
                                StrCat(r->mismatches.size(), " check(s) failed, the first: ", first.message,
                                       "; nothing written (--collapse-parallel=first or --no-check skips the check)")));
    return kExitCheckFailed;
  }
  if (a.json) {
    PrintJson(MergeJson(a, out, *r, {}, verified));
    return kExitOk;
  }
  for (const auto& n : r->notes) std::cerr << "tfckpt merge: note: " << n << "\n";
  if (a.dry_run) {
    for (const auto& t : r->tensors) {
      std::cout << absl::StrFormat("%-60s %-9s %-14s file %d  %s  from %s\n", t.name, DTypeName(t.dtype),
                                   ShapeString(t.shape), t.file, HumanBytes(t.bytes), t.origin);
    }
  }
  std::cout << absl::StrFormat("%s %s (%s) in %d data file%s from %d input%s%s\n",
                               a.dry_run ? "would write" : StrCat("wrote ", out, ":"), Count(r->tensors.size(), "tensor"),
                               HumanBytes(r->bytes), r->num_files, r->num_files == 1 ? "" : "s", r->inputs.size(),
                               r->inputs.size() == 1 ? "" : "s", verified ? ", validated" : "");
  if (a.drop_optimizer) {
    std::cout << absl::StrFormat("dropped %s (%s)\n", Count(r->dropped_optimizer, "optimizer tensor"),
                                 HumanBytes(r->bytes_dropped_optimizer));
  }
  if (r->dropped_filtered > 0) {
    std::cout << absl::StrFormat("filtered out %s (%s)\n", Count(r->dropped_filtered, "tensor"), HumanBytes(r->bytes_dropped_filtered));
  }
  if (r->collapsed > 0) std::cout << absl::StrFormat("collapsed %s (%s)\n", Count(r->collapsed, "tensor"), HumanBytes(r->bytes_collapsed));
  if (r->averaged > 0) std::cout << absl::StrFormat("averaged %s\n", Count(r->averaged, "tensor"));
  if (r->expanded > 0) std::cout << absl::StrFormat("added %s\n", Count(r->expanded, "parallel component"));
  return kExitOk;
}

int RunMerge(const MergeArgs& a) {
  const char* cmd = "merge";
  // --move consumes the inputs: an interrupt waits until the merge is done (file.h).
  std::optional<InterruptShield> consuming;
  if (a.move) consuming.emplace();
  std::vector<std::string> inputs = a.inputs;
  std::string out = a.out;
  if (a.recover) {
    if (a.inputs.size() != 1) {
      return ReportError(cmd, absl::InvalidArgumentError("--recover takes one PREFIX (the checkpoint to finish)"));
    }
    if (out.empty()) out = a.inputs[0];
    std::vector<std::string> found;
    auto parts = FindSaveParts(a.inputs[0], &found);
    if (!parts.ok()) return ReportError(cmd, parts.status());
    if (!a.json) {
      std::cout << "found " << parts->size() << " parts: " << absl::StrJoin(*parts, ", ") << "\n";
    }
    inputs = *parts;
  }
  if (out.empty()) return ReportError(cmd, absl::InvalidArgumentError("-o OUT is required (or --recover PREFIX)"));
  if (auto name = OutputName("-o", out, true); name.ok()) {
    out = *name;
  } else {
    return ReportError(cmd, name.status());
  }
  if (a.combining()) return RunCombine(a, inputs, out);
  // A plain merge takes the forms every CKPT takes (a directory, PREFIX.index, ...): each
  // V2 input is merged by its prefix; other formats (V1, safetensors) are combined.
  if (!a.recover) {
    for (std::string& in : inputs) {
      auto resolved = ResolveCheckpoint(in);
      if (!resolved.ok()) continue;  // MergeBundles names it (or skips it: --allow-missing)
      if (resolved->format != Format::kV2) {
        if (a.move) {
          return ReportError(cmd, absl::InvalidArgumentError(StrCat(in, ": --move takes V2 checkpoints only")));
        }
        return RunCombine(a, a.inputs, out);
      }
      in = resolved->prefix;
    }
  }
  MergeOptions o;
  o.allow_missing = a.allow_missing;
  o.move = a.move;
  o.overwrite = a.force;
  bool verified = false;
  if (!a.no_verify && !a.move) {
    // Before anything is published: an output that fails leaves OUT as it was. The
    // sources are the inputs that have an index (those without any are skipped or fail
    // the merge; those without tensors add nothing to compare).
    o.before_commit = [&](const WrittenOutput& written) -> absl::Status {
      std::vector<std::string> present;
      for (const std::string& in : inputs) {
        if (FileExists(in + ".index")) present.push_back(in);
      }
      TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(present));
      VerifyOptions vo;
      vo.jobs = a.jobs;
      return VerifyBeforeCommit(out, written, MergedSources(sources), vo, 0, false, nullptr, &verified);
    };
  }
  auto report = MergeBundles(inputs, out, o);
  if (!report.ok()) return ReportWriteError(cmd, report.status());
  if (!a.no_verify && a.move) {
    // --move consumed the inputs: the output is then checked by its CRCs and layout alone,
    // after the renames, and kept when it fails (it is all that is left).
    VerifyOptions vo;
    vo.jobs = a.jobs;
    const int rc = VerifyOutput(cmd, out, {}, {}, vo);
    if (rc != kExitOk) return rc;
    verified = true;
  }
  if (a.json) {
    auto r = PlainMergeReport(*report, out);
    if (!r.ok()) return ReportError(cmd, r.status());
    PrintJson(MergeJson(a, out, *r, report->inputs_skipped, verified));
  } else {
    for (const auto& n : report->notes) std::cerr << "tfckpt merge: note: " << n << "\n";
    std::cout << absl::StrFormat("merged %d input%s into %s: %d data file%s, %s%s\n", report->inputs_used.size(),
                                 report->inputs_used.size() == 1 ? "" : "s", out, report->num_files,
                                 report->num_files == 1 ? "" : "s", Count(report->entries, "entry", "entries"), verified ? ", validated" : "");
  }
  if (consuming && DropPendingInterrupts()) {
    Warn(cmd, "interrupted while the inputs were being moved: the merge was finished instead");
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddMerge(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* sub = app.add_subcommand("merge", "Merge bundles like TensorFlow's MergeV2Checkpoints; finish unmerged saves");
  sub->add_option("PREFIX", args->inputs, "Input bundles, in order (with --recover: the checkpoint to finish)")
      ->required();
  AddOutputOption(sub, &args->out, "prefix (with --recover: defaults to PREFIX)");
  sub->add_flag("--recover", args->recover,
                "Find the parts of an interrupted or unmerged save of PREFIX (PREFIX_temp/part-*, "
                "PREFIX_temp_<hex>/part-*, PREFIX.part-*, PREFIX_dev-N-of-M, DTensor's "
                "PREFIX_device_D_save_op_K) and merge them");
  sub->add_flag("--allow-missing", args->allow_missing, "Skip inputs without an index (at least one must exist)");
  sub->add_flag("--move", args->move,
                "TensorFlow's behaviour: rename the data files, delete input indexes and emptied input directories");
  AddForceOption(sub, &args->force);
  AddNoVerifyOption(sub, &args->no_verify, "read back and compared with the inputs: CRCs, layout, values");
  AddJsonOption(sub, &args->json, "one schema for every mode");
  auto* edits = "Combining (rewrites the data; inputs may be any checkpoint, V1 included)";
  sub->add_option("--on-conflict", args->on_conflict,
                  "The same tensor in several inputs: error (default), first, last")
      ->check(CLI::IsMember({"error", "first", "last"}))
      ->group(edits);
  AddNameRuleOptions(sub, &args->include, &args->exclude, &args->renames, edits);
  sub->add_flag("--drop-optimizer", args->drop_optimizer,
                "Remove optimizer state (TF2 .OPTIMIZER_SLOT and optimizer/*, TF1 Adam/Momentum/Ftrl/... slots, "
                "beta1_power, training/<Optimizer>/*)")
      ->group(edits);
  sub->add_flag("--average", args->average, "Element-wise mean of float tensors over all inputs (two or more); others from the last")
      ->group(edits);
  sub->add_option("--collapse-parallel", args->collapse_parallel,
                  "Keep component 0 (X/.ATTRIBUTES/VARIABLE_VALUE) of parallel-device variables and drop "
                  "parallel_component_1..N-1, TF's names (others are left, with a note); check (default) verifies "
                  "the values are equal, whatever the slicing")
      ->expected(0, 1)
      ->default_str("check")
      ->check(CLI::IsMember({"check", "first"}))
      ->group(edits);
  sub->add_option("--expand-parallel", args->expand_parallel,
                  "Copy each VARIABLE_VALUE into parallel_component_1..N-1 (restore on an N-device parallel device; N >= 2)")
      ->group(edits);
  CLI::Option* collapse_replicas =
      sub->add_flag("--collapse-replicas", args->collapse_replicas,
                    "TPU replicas NAME/0..NAME/K-1 (K >= 2) become NAME, after checking their values are equal")
          ->group(edits);
  sub->add_flag("--no-check", args->no_check, "With --collapse-replicas (required): do not compare the replicas")
      ->needs(collapse_replicas)
      ->group(edits);
  AddDryRunOption(sub, &args->dry_run, "each output tensor and its source; with --json as JSON")->group(edits);
  AddJobsOption(sub, &args->jobs, "Output data files written in parallel")->group(edits);
  AddConnectionsOption(sub);
  AddQuietOption(sub, &args->quiet, "labelled 'copying'")->group(edits);
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
