// tfckpt reshard: re-slice partitioned variables and re-split data files.
#include <algorithm>
#include <tuple>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "tfckpt/commands.h"
#include "tfckpt/dtype.h"
#include "tfckpt/status.h"

namespace tfckpt::cli {
namespace {

struct ReshardArgs {
  ReshardRequest request;
  bool json = false, quiet = false;
  int jobs = 0;
};

std::string SliceList(const std::vector<ReshardPiece>& pieces, const Shape& shape) {
  std::vector<Region> regions;
  for (const auto& p : pieces) regions.push_back({p.start, p.shape});
  if (regions.size() == 1 && regions[0].Covers(shape)) return "whole";
  std::sort(regions.begin(), regions.end(),
            [](const Region& x, const Region& y) { return std::tie(x.start, x.shape) < std::tie(y.start, y.shape); });
  if (regions.size() > 6) return StrCat(regions.size(), " slices");
  std::vector<std::string> s;
  for (const auto& r : regions) s.push_back(SliceString(r, shape));
  return absl::StrJoin(s, " ");
}

void PrintPlan(const ReshardReport& r) {
  std::string out = absl::StrFormat("plan: %s -> %s: %d data file%s\n", r.input, r.output, r.num_files,
                                    r.num_files == 1 ? "" : "s");
  for (const ReshardTensor& t : r.tensors) {
    std::vector<std::string> files;
    for (const auto& p : t.new_pieces) files.push_back(StrCat(p.file));
    StrAppend(&out, "  ", PrintableKey(t.name), "  ", DTypeName(t.dtype), " ", ShapeString(t.shape), ": ",
              t.resliced ? StrCat(SliceList(t.old_pieces, t.shape), " -> ", SliceList(t.new_pieces, t.shape))
                         : SliceList(t.new_pieces, t.shape),
              "  file ", absl::StrJoin(files, ","), t.rule.empty() ? "" : StrCat("  [", t.rule, "]"),
              t.note.empty() ? "" : StrCat("  (", t.note, ")"), "\n");
  }
  for (int32_t f = 0; f < r.num_files; ++f) {
    StrAppend(&out, "  file ", f, ": ", r.data_files[f], "  ", HumanBytes(r.file_bytes[f]),
              "\n");
  }
  std::cout << out;
}

int RunReshard(const ReshardArgs& a) {
  const char* cmd = "reshard";
  absl::StatusOr<ReshardReport> r = Reshard(a.request, CommandRun(cmd, !a.quiet && !a.json, a.jobs));
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (a.json) {
    PrintJson(ToJson(*r));
    return kExitOk;
  }
  // The plan's notes (e.g. data files that stay empty), one line each on stderr.
  for (const std::string& n : r->notes) std::cerr << "tfckpt reshard: note: " << n << "\n";
  using Mode = ReshardReport::Mode;
  switch (r->mode) {
    case Mode::kDryRun:
      PrintPlan(*r);
      break;
    case Mode::kPlan:
      std::cout << absl::StrFormat("wrote plan %s: %d task%s (one per output data file), %s; run each with\n"
                                   "  tfckpt reshard --execute %s --task I     (I = 0..%d, or --task auto)\n"
                                   "then: tfckpt reshard --finalize %s\n",
                                   r->plan, r->num_tasks, r->num_tasks == 1 ? "" : "s", HumanBytes(r->bytes), r->plan,
                                   r->num_tasks - 1, r->plan);
      break;
    case Mode::kExecute:
      std::cout << absl::StrFormat("task %d of %d: wrote %s (%s, %s)\n", r->task, r->num_tasks, r->part,
                                   Count(r->entries, "entry", "entries"), HumanBytes(r->bytes));
      break;
    case Mode::kFinalize:
      std::cout << absl::StrFormat("finalized %s from %d task%s: %s%s\n", r->output, r->num_tasks,
                                   r->num_tasks == 1 ? "" : "s", Count(r->entries, "entry", "entries"),
                                   r->verified ? ", verified against the input" : "");
      break;
    case Mode::kReshard: {
      int resliced = 0;
      uint64_t total = 0;
      for (const ReshardTensor& t : r->tensors) resliced += t.resliced;
      for (uint64_t b : r->file_bytes) total += b;
      std::cout << absl::StrFormat("wrote %s: %d data file%s, %s (%d resliced), %s%s\n", r->output, r->num_files,
                                   r->num_files == 1 ? "" : "s", Count(r->tensors.size(), "tensor"), resliced,
                                   HumanBytes(total), r->verified ? ", verified against the input" : "");
      break;
    }
  }
  if (!a.quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddReshard(CLI::App& app) {
  auto args = std::make_shared<ReshardArgs>();
  ReshardRequest& r = args->request;
  CLI::App* sub = app.add_subcommand("reshard", "Re-slice partitioned variables and re-split data files");
  sub->add_option("CKPT", r.ckpt, "Input checkpoint");
  AddOutputOption(sub, &r.out, "prefix (OUT.index, OUT.data-*)");
  sub->add_option("--partition", r.partitions,
                  "[REGEX=]SPEC (repeatable, first match wins): fixed:N[@AXIS], "
                  "min-size[:BYTES[,MAX_SHARDS]][@AXIS] (TF's defaults 262144,1), "
                  "max-size:BYTES[,MAX_SHARDS][@AXIS] (MAX_SHARDS 0 = no limit), none, layout:SPECS@MESH "
                  "(checked as DTensor checks layouts). Without REGEX: every tensor partitioned today");
  sub->add_option("--policy", r.policy,
                  "Which data file each piece goes to: by-task[:N] (default: a piece stored as it is keeps its "
                  "data file modulo N, new pieces go to the files in turn, no file left empty), shards:N, single, "
                  "max-shard-size:BYTES (K/M/G/T suffixes; per task, as TF), by-device (DTensor's per-device "
                  "files), file:SHARDS.json (your own shards, checked by TF's validate_shards rules)");
  sub->add_flag("--allow-any-dtype", r.allow_any_dtype,
                "Also cut tensors TF cannot read back whole from slices (float16, uint16/32/64, string, ...: "
                "BundleReader::GetSliceValue assembles only float, double, int8-64, uint8, bool, complex, "
                "qint8/32, quint8, bfloat16, int4, uint4)");
  CLI::Option* dry_run = AddDryRunOption(sub, &r.dry_run, "not with --plan");
  AddJsonOption(sub, &args->json, "the plan, then the result");
  AddJobsOption(sub, &args->jobs, "Threads copying tensors");
  AddConnectionsOption(sub);
  AddForceOption(sub, &r.force);
  AddNoVerifyOption(sub, &r.no_verify, "compared with the input; input checksums are then not checked either");
  AddQuietOption(sub, &args->quiet, "labelled 'copying', then 'verifying'");
  AddServerSideOption(sub, &r.server_side);
  sub->add_option("--bytes-per-string", r.bytes_per_string, "Element size of strings for min-size/max-size (16)")
      ->check(WholeNumber(1));
  auto* scale = "Scale-out (docs/SCALE_OUT.md)";
  sub->add_option("--plan", r.plan_out, "Write only a plan to PLAN.json: one task per output data file")
      ->excludes(dry_run)
      ->group(scale);
  sub->add_option("--execute", r.execute, "Run one task of PLAN.json (with --task)")->group(scale);
  sub->add_option("--task", r.task,
                  "Task number, or auto: SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, then TASK_INDEX")
      ->group(scale);
  sub->add_option("--finalize", r.finalize,
                  "Check every task of PLAN.json finished, merge their parts into OUT, verify, clean up")
      ->group(scale);
  sub->footer(
      "Examples:\n"
      "  tfckpt reshard ps8/model.ckpt-1000 -o ps3/model.ckpt-1000 --partition fixed:3\n"
      "  tfckpt reshard model.ckpt -o serving/variables --partition none --policy single\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'embedding=max-size:67108864' --dry-run\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'emb$=fixed:3'   # other tensors stay in their files\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'layout:x,unsharded@x=2,y=4'\n"
      "  tfckpt reshard s3://bkt/run/ckpt-100 -o s3://bkt/serve/ckpt --policy shards:4  # data objects, then the index\n"
      "  tfckpt reshard model.ckpt -o out/model --policy max-shard-size:1G\n"
      "  tfckpt reshard model.ckpt -o out/model --policy file:shards.json   # {\"shards\": [[{\"key\", \"slice\"}, ...], ...]}\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'emb=layout:x,unsharded@x=4' --policy by-device\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'vocab=fixed:4' --allow-any-dtype  # a string tensor\n"
      "  tfckpt reshard model.ckpt -o out/model --partition fixed:8 --policy shards:16 --plan plan.json\n"
      "  tfckpt reshard --execute plan.json --task auto        # one task, e.g. in a Slurm array job\n"
      "  tfckpt reshard --finalize plan.json\n\n"
      "Exit codes: 0 ok, 1 the output did not verify, 2 usage error or refused output, 3 unreadable input\n"
      "or I/O failure; interrupted: 130 (Ctrl-C), 143 (SIGTERM), 129 (SIGHUP). A run that fails or is\n"
      "interrupted leaves nothing under OUT's names.");
  return [args] { return RunReshard(*args); };
}

}  // namespace tfckpt::cli
