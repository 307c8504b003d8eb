// tfckpt reshard: re-slice partitioned variables and re-split data files.
#include <algorithm>
#include <tuple>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "progress.h"
#include "tfckpt/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/copy.h"
#include "tfckpt/dtype.h"
#include "tfckpt/file.h"
#include "tfckpt/open.h"
#include "tfckpt/reshard.h"
#include "tfckpt/scale_out.h"
#include "tfckpt/status.h"
#include "tfckpt/validate.h"

namespace tfckpt::cli {
namespace {

using json = nlohmann::ordered_json;

struct ReshardArgs {
  std::string ckpt, out;
  std::vector<std::string> partitions;
  std::string policy = "by-task";
  bool dry_run = false, json = false, force = false, no_verify = false, quiet = false, allow_any_dtype = false;
  std::string plan_out, execute, task, finalize;  // scale-out: --plan, --execute/--task, --finalize
  int jobs = 0;
  int64_t bytes_per_string = 16;
};

std::string SliceList(std::vector<Region> regions, const Shape& shape) {
  if (regions.size() == 1 && regions[0].Covers(shape)) return "whole";
  std::sort(regions.begin(), regions.end(),
            [](const Region& x, const Region& y) { return std::tie(x.start, x.shape) < std::tie(y.start, y.shape); });
  if (regions.size() > 6) return StrCat(regions.size(), " slices");
  std::vector<std::string> s;
  for (const auto& r : regions) s.push_back(SliceString(r, shape));
  return absl::StrJoin(s, " ");
}

json PlanJson(const ReshardPlan& plan, const ReshardArgs& a) {
  json tensors = json::array();
  for (const TensorPlan& tp : plan.tensors) {
    const TensorEntry& t = *tp.source;
    json old = json::array(), neu = json::array();
    for (const auto& s : t.slices) {
      json o{{"spec", StoredSpec(t, s)}, {"shape", s.region.shape}};
      if (s.data.v1_file < 0) o["shard"] = s.data.shard;
      old.push_back(std::move(o));
    }
    for (const auto& p : tp.pieces) {
      neu.push_back({{"spec", StoredSpec(t, p)}, {"shape", p.region.shape}, {"file", p.file}, {"bytes", p.bytes}});
    }
    json j{{"name", tp.out_name()}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"resliced", tp.resliced},
           {"old", std::move(old)}, {"new", std::move(neu)}};
    if (tp.out_name() != t.name) j["source"] = t.name;  // a renamed TF1 slot
    if (!tp.rule.empty()) j["rule"] = tp.rule;
    if (!tp.note.empty()) j["note"] = tp.note;
    tensors.push_back(std::move(j));
  }
  json files = json::array();
  for (int32_t f = 0; f < plan.num_files; ++f) {
    int n = 0;
    for (const TensorPlan& tp : plan.tensors) {
      for (const auto& p : tp.pieces) n += p.file == f;
    }
    files.push_back({{"file", f}, {"path", DataFileName(a.out, f, plan.num_files)}, {"bytes", plan.file_bytes[f]},
                     {"pieces", n}});
  }
  return json{{"input", a.ckpt},
              {"output", a.out},
              {"num_files", plan.num_files},
              {"policy", a.policy},
              {"tensors", std::move(tensors)},
              {"files", std::move(files)},
              {"notes", plan.notes}};
}

// The plan's notes (e.g. data files that stay empty), one line each on stderr (text output).
void PrintNotes(const ReshardPlan& plan, const ReshardArgs& a) {
  if (a.json) return;  // in the document's "notes"
  for (const std::string& n : plan.notes) std::cerr << "tfckpt reshard: note: " << n << "\n";
}

void PrintPlan(const ReshardPlan& plan, const ReshardArgs& a) {
  std::string out = absl::StrFormat("plan: %s -> %s: %d data file%s\n", a.ckpt, a.out, plan.num_files,
                                    plan.num_files == 1 ? "" : "s");
  for (const TensorPlan& tp : plan.tensors) {
    const TensorEntry& t = *tp.source;
    std::vector<Region> before, after;
    for (const auto& s : t.slices) before.push_back(s.region);
    for (const auto& p : tp.pieces) after.push_back(p.region);
    std::vector<std::string> files;
    for (const auto& p : tp.pieces) files.push_back(StrCat(p.file));
    StrAppend(&out, "  ", PrintableKey(tp.out_name()), "  ", DTypeName(t.dtype), " ", ShapeString(t.shape), ": ",
              tp.resliced ? StrCat(SliceList(before, t.shape), " -> ", SliceList(after, t.shape))
                          : SliceList(after, t.shape),
              "  file ", absl::StrJoin(files, ","), tp.rule.empty() ? "" : StrCat("  [", tp.rule, "]"),
              tp.note.empty() ? "" : StrCat("  (", tp.note, ")"), "\n");
  }
  for (int32_t f = 0; f < plan.num_files; ++f) {
    StrAppend(&out, "  file ", f, ": ", DataFileName(a.out, f, plan.num_files), "  ", HumanBytes(plan.file_bytes[f]),
              "\n");
  }
  std::cout << out;
}

// --plan: the scale-out plan instead of the output (docs/SCALE_OUT.md).
int WritePlan(const Checkpoint& c, const ReshardPlan& plan, const ReshardArgs& a) {
  const char* cmd = "reshard";
  if (!a.force && FileExists(a.out + ".index")) {
    return ReportError(cmd, absl::AlreadyExistsError(StrCat(a.out, ".index: output exists (use --force to replace it)")));
  }
  TaskPlanOptions o;
  o.out = a.out;
  o.partitions = a.partitions;
  o.policy = a.policy;
  o.bytes_per_string = a.bytes_per_string;
  o.overwrite = a.force;
  o.verify = !a.no_verify;
  auto doc = MakeTaskPlan(c, plan, o);
  if (!doc.ok()) return ReportError(cmd, doc.status());
  Storage& store = Storage::For(a.plan_out);
  if (absl::Status s = store.CreateParentDirectories(a.plan_out); !s.ok()) return ReportError(cmd, s);
  auto f = store.Create(a.plan_out);
  absl::Status s = f.ok() ? (*f)->Append(*doc) : f.status();
  if (s.ok()) s = (*f)->Close();
  if (s.ok()) s = (*f)->Commit();
  if (!s.ok()) return ReportError(cmd, s);
  uint64_t total = 0;
  for (uint64_t b : plan.file_bytes) total += b;
  if (a.json) {
    PrintJson({{"plan", a.plan_out}, {"num_tasks", plan.num_files}, {"bytes", total}, {"notes", plan.notes}});
  } else {
    std::cout << absl::StrFormat("wrote plan %s: %d task%s (one per output data file), %s; run each with\n"
                                 "  tfckpt reshard --execute %s --task I     (I = 0..%d, or --task auto)\n"
                                 "then: tfckpt reshard --finalize %s\n",
                                 a.plan_out, plan.num_files, plan.num_files == 1 ? "" : "s", HumanBytes(total),
                                 a.plan_out, plan.num_files - 1, a.plan_out);
  }
  return kExitOk;
}

int RunExecute(const ReshardArgs& a) {
  const char* cmd = "reshard";
  absl::StatusOr<int> task = absl::InvalidArgumentError("--execute needs --task I or --task auto");
  if (a.task == "auto") {
    task = TaskFromEnvironment();
  } else if (!a.task.empty()) {
    char* end = nullptr;
    const long i = std::strtol(a.task.c_str(), &end, 10);
    task = *end == '\0' && i >= 0 && i <= 1'000'000 ? absl::StatusOr<int>(static_cast<int>(i))
                                                     : absl::InvalidArgumentError(StrCat("--task ", a.task, ": not a task number"));
  }
  if (!task.ok()) return ReportError(cmd, task.status());
  absl::StatusOr<TaskReport> r;
  {
    Progress progress(0, false, "copying");
    r = ExecuteTask(a.execute, *task, progress.counter());
  }
  if (!r.ok()) return ReportError(cmd, r.status());
  if (a.json) {
    PrintJson({{"task", r->task}, {"num_tasks", r->num_tasks}, {"part", r->part}, {"entries", r->entries},
               {"bytes", r->bytes}});
  } else {
    std::cout << absl::StrFormat("task %d of %d: wrote %s (%s, %s)\n", r->task, r->num_tasks, r->part,
                                 Count(r->entries, "entry", "entries"), HumanBytes(r->bytes));
  }
  return kExitOk;
}

int RunFinalize(const ReshardArgs& a) {
  const char* cmd = "reshard";
  // The parts' data files are renamed into place: an interrupt waits until the
  // finalization is done (file.h).
  InterruptShield consuming;
  auto r = FinalizeTasks(a.finalize);
  if (!r.ok()) {
    const int code = ReportError(cmd, r.status());
    return ErrorInfoOf(r.status()).check == "output.mismatch" ? kExitCheckFailed : code;
  }
  if (a.json) {
    PrintJson({{"output", r->out}, {"num_tasks", r->num_tasks}, {"entries", r->entries}, {"verified", r->verified}});
  } else {
    std::cout << absl::StrFormat("finalized %s from %d task%s: %s%s\n", r->out, r->num_tasks,
                                 r->num_tasks == 1 ? "" : "s", Count(r->entries, "entry", "entries"), r->verified ? ", verified against the input" : "");
  }
  if (DropPendingInterrupts()) {
    Warn(cmd, "interrupted while the parts were being moved into place: the finalization was finished instead");
  }
  return kExitOk;
}

int RunReshard(const ReshardArgs& args) {
  const char* cmd = "reshard";
  ReshardArgs a = args;
  if (!a.out.empty()) {
    auto out = OutputName("-o", a.out, true);
    if (!out.ok()) return ReportError(cmd, out.status());
    a.out = *out;
  }
  if (!a.plan_out.empty()) {
    auto plan_out = OutputName("--plan", a.plan_out, false);
    if (!plan_out.ok()) return ReportError(cmd, plan_out.status());
  }
  const int modes = !a.execute.empty() + !a.finalize.empty() + !a.plan_out.empty();
  if (modes > 1) return ReportError(cmd, absl::InvalidArgumentError("--plan, --execute and --finalize exclude each other"));
  if (!a.task.empty() && a.execute.empty()) return ReportError(cmd, absl::InvalidArgumentError("--task goes with --execute"));
  if (!a.execute.empty()) return RunExecute(a);
  if (!a.finalize.empty()) return RunFinalize(a);
  if (a.ckpt.empty() || a.out.empty()) {
    return ReportError(cmd, absl::InvalidArgumentError("CKPT and -o OUT are required (except with --execute/--finalize)"));
  }
  auto opened = OpenCheckpoint(a.ckpt);
  if (!opened.ok()) return ReportError(cmd, opened.status());
  std::shared_ptr<const Checkpoint> keep = std::move(*opened);
  KeepUntilExit(keep);
  const Checkpoint& c = *keep;
  ReshardOptions options;
  for (const std::string& p : a.partitions) {
    auto rule = ParsePartitionRule(p);
    if (!rule.ok()) return ReportError(cmd, rule.status());
    options.rules.push_back(std::move(*rule));
  }
  auto policy = ParsePolicy(a.policy);
  if (!policy.ok()) return ReportError(cmd, policy.status());
  options.policy = *policy;
  options.bytes_per_string = a.bytes_per_string;
  options.allow_any_dtype = a.allow_any_dtype;
  auto plan = PlanReshard(c, options);
  if (!plan.ok()) return ReportError(cmd, plan.status());
  // OUT may not be (or reach through a symlink or hard link) any file of the input.
  if (absl::Status s = Storage::For(a.out).CheckNotInputs(BundleFilesAt(a.out, plan->num_files), FilesOf(c.info())); !s.ok()) {
    return ReportError(cmd, s);
  }
  PrintNotes(*plan, a);
  if (!a.plan_out.empty()) return WritePlan(c, *plan, a);
  if (a.dry_run) {
    if (a.json) {
      PrintJson(PlanJson(*plan, a));
    } else {
      PrintPlan(*plan, a);
    }
    return kExitOk;
  }
  uint64_t total = 0;
  for (uint64_t b : plan->file_bytes) total += b;
  bool verified = false;
  {
    auto progress = std::make_unique<Progress>(total, !a.quiet, "copying");
    ExecuteOptions eo;
    eo.jobs = a.jobs;
    eo.overwrite = a.force;
    eo.progress = progress->counter();
    if (!a.no_verify) {
      // Before anything is published: an output that fails leaves OUT as it was.
      eo.read_back = true;  // each piece checked as it is written: the verification then reads none
      eo.before_commit = [&](const WrittenOutput& written) {
        VerifyOptions vo;
        vo.jobs = a.jobs;
        return VerifyBeforeCommit(a.out, written, ReshardSources(c, *plan), vo, total, !a.quiet, &progress, &verified);
      };
    }
    absl::Status s = ExecutePlan(c, *plan, a.out, eo);
    if (!s.ok()) return ReportWriteError(cmd, s);
  }
  int resliced = 0;
  for (const TensorPlan& tp : plan->tensors) resliced += tp.resliced;
  if (a.json) {
    json j = PlanJson(*plan, a);
    j["verified"] = verified;
    PrintJson(j);
  } else {
    std::cout << absl::StrFormat("wrote %s: %d data file%s, %s (%d resliced), %s%s\n", a.out, plan->num_files,
                                 plan->num_files == 1 ? "" : "s", Count(plan->tensors.size(), "tensor"), resliced, HumanBytes(total),
                                 verified ? ", verified against the input" : "");
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddReshard(CLI::App& app) {
  auto args = std::make_shared<ReshardArgs>();
  CLI::App* sub = app.add_subcommand("reshard", "Re-slice partitioned variables and re-split data files");
  sub->add_option("CKPT", args->ckpt, "Input checkpoint");
  AddOutputOption(sub, &args->out, "prefix (OUT.index, OUT.data-*)");
  sub->add_option("--partition", args->partitions,
                  "[REGEX=]SPEC (repeatable, first match wins): fixed:N[@AXIS], "
                  "min-size[:BYTES[,MAX_SHARDS]][@AXIS] (TF's defaults 262144,1), "
                  "max-size:BYTES[,MAX_SHARDS][@AXIS] (MAX_SHARDS 0 = no limit), none, layout:SPECS@MESH "
                  "(checked as DTensor checks layouts). Without REGEX: every tensor partitioned today");
  sub->add_option("--policy", args->policy,
                  "Which data file each piece goes to: by-task[:N] (default: a piece stored as it is keeps its "
                  "data file modulo N, new pieces go to the files in turn, no file left empty), shards:N, single, "
                  "max-shard-size:BYTES (K/M/G/T suffixes; per task, as TF), by-device (DTensor's per-device "
                  "files), file:SHARDS.json (your own shards, checked by TF's validate_shards rules)");
  sub->add_flag("--allow-any-dtype", args->allow_any_dtype,
                "Also cut tensors TF cannot read back whole from slices (float16, uint16/32/64, string, ...: "
                "BundleReader::GetSliceValue assembles only float, double, int8-64, uint8, bool, complex, "
                "qint8/32, quint8, bfloat16)");
  CLI::Option* dry_run = AddDryRunOption(sub, &args->dry_run, "not with --plan");
  AddJsonOption(sub, &args->json, "the plan, then the result");
  AddJobsOption(sub, &args->jobs, "Threads copying tensors");
  AddConnectionsOption(sub);
  AddForceOption(sub, &args->force);
  AddNoVerifyOption(sub, &args->no_verify, "compared with the input; input checksums are then not checked either");
  AddQuietOption(sub, &args->quiet, "labelled 'copying', then 'verifying'");
  sub->add_option("--bytes-per-string", args->bytes_per_string, "Element size of strings for min-size/max-size (16)")
      ->check(WholeNumber(1));
  auto* scale = "Scale-out (docs/SCALE_OUT.md)";
  sub->add_option("--plan", args->plan_out, "Write only a plan to PLAN.json: one task per output data file")
      ->excludes(dry_run)
      ->group(scale);
  sub->add_option("--execute", args->execute, "Run one task of PLAN.json (with --task)")->group(scale);
  sub->add_option("--task", args->task,
                  "Task number, or auto: SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, then TASK_INDEX")
      ->group(scale);
  sub->add_option("--finalize", args->finalize,
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
