// tfckpt merge: TensorFlow's MergeV2Checkpoints, and recovery of unmerged distributed saves.
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/merge.h"
#include "tfckpt/status.h"
#include "tfckpt/validate.h"

namespace tfckpt::cli {
namespace {

struct MergeArgs {
  std::vector<std::string> inputs;
  std::string out;
  bool recover = false, allow_missing = false, move = false, force = false, no_verify = false, json = false;
};

int RunMerge(const MergeArgs& a) {
  const char* cmd = "merge";
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
  MergeOptions o;
  o.allow_missing = a.allow_missing;
  o.move = a.move;
  o.overwrite = a.force;
  auto report = MergeBundles(inputs, out, o);
  if (!report.ok()) return ReportError(cmd, report.status());
  bool verified = false;
  if (!a.no_verify) {
    auto v = Validate(out, {});
    if (!v.ok()) return ReportError(cmd, v.status());
    if (!v->ok(false)) {
      for (const Finding& f : v->findings) {
        if (f.severity == Severity::kError) std::cerr << "tfckpt merge: " << f.check << ": " << f.message << "\n";
      }
      ReportError(cmd, absl::DataLossError(StrCat(out, ": merged checkpoint does not validate")));
      return kExitCheckFailed;
    }
    verified = true;
  }
  if (a.json) {
    nlohmann::ordered_json j{{"output", out},
                             {"inputs", report->inputs_used},
                             {"skipped", report->inputs_skipped},
                             {"num_files", report->num_files},
                             {"entries", report->entries},
                             {"verified", verified},
                             {"notes", report->notes}};
    std::cout << j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  } else {
    for (const auto& n : report->notes) std::cerr << "tfckpt merge: note: " << n << "\n";
    std::cout << absl::StrFormat("merged %d input%s into %s: %d data file%s, %d entries%s\n", report->inputs_used.size(),
                                 report->inputs_used.size() == 1 ? "" : "s", out, report->num_files,
                                 report->num_files == 1 ? "" : "s", report->entries, verified ? ", validated" : "");
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddMerge(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* sub = app.add_subcommand("merge", "Merge bundles like TensorFlow's MergeV2Checkpoints; finish unmerged saves");
  sub->add_option("PREFIX", args->inputs, "Input bundles, in order (with --recover: the checkpoint to finish)")
      ->required();
  sub->add_option("-o,--output", args->out, "Output prefix (with --recover: defaults to PREFIX)");
  sub->add_flag("--recover", args->recover,
                "Find the parts of an interrupted or unmerged save of PREFIX (PREFIX_temp/part-*, "
                "PREFIX_temp_<hex>/part-*, PREFIX.part-*, PREFIX_dev-N-of-M) and merge them");
  sub->add_flag("--allow-missing", args->allow_missing, "Skip inputs without an index (at least one must exist)");
  sub->add_flag("--move", args->move,
                "TensorFlow's behaviour: rename the data files, delete input indexes and emptied input directories");
  sub->add_flag("--force", args->force, "Replace an existing checkpoint at the output");
  sub->add_flag("--no-verify", args->no_verify, "Skip validating the output");
  sub->add_flag("--json", args->json, "Machine-readable result");
  sub->footer(
      "Examples:\n"
      "  tfckpt merge part0/model part1/model part2/model -o merged/model\n"
      "  tfckpt merge --recover train/model.ckpt-1000         # finish model.ckpt-1000_temp/part-*\n"
      "  tfckpt merge --recover train/model.ckpt-1000 --move  # ... and clean up like TensorFlow\n\n"
      "Inputs are left untouched unless --move (data files are hard-linked, else copied).\n"
      "Exit codes: 0 ok, 1 the output does not validate, 2 usage error or refused request (duplicate\n"
      "tensor, existing output), 3 missing or unreadable input.");
  return [args] { return RunMerge(*args); };
}

}  // namespace tfckpt::cli
