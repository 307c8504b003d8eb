// tfckpt reshard: re-slice partitioned variables and re-split data files.
#include <algorithm>
#include <filesystem>
#include <tuple>
#include <iostream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "common.h"
#include "progress.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/dtype.h"
#include "tfckpt/reshard.h"
#include "tfckpt/status.h"
#include "tfckpt/validate.h"

namespace tfckpt::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct ReshardArgs {
  std::string ckpt, out;
  std::vector<std::string> partitions;
  std::string policy = "by-task";
  bool dry_run = false, json = false, force = false, no_verify = false, quiet = false;
  int jobs = 0;
  int64_t bytes_per_string = 16;
};

// True when `out` names the input checkpoint (the same index file, by path or inode).
bool SamePrefix(const std::string& out, const CheckpointInfo& in) {
  std::error_code ec;
  const std::string a = fs::weakly_canonical(out + ".index", ec).string();
  const std::string b = fs::weakly_canonical(in.index_path.empty() ? in.prefix : in.index_path, ec).string();
  if (a == b) return true;
  return fs::exists(out + ".index", ec) && fs::exists(b, ec) && fs::equivalent(out + ".index", b, ec);
}

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
      json o{{"spec", SliceString(s.region, t.shape)}, {"shape", s.region.shape}};
      if (s.data.v1_file < 0) o["shard"] = s.data.shard;
      old.push_back(std::move(o));
    }
    for (const auto& p : tp.pieces) {
      neu.push_back({{"spec", SliceString(p.region, t.shape)}, {"shape", p.region.shape}, {"file", p.file},
                     {"bytes", p.bytes}});
    }
    json j{{"name", t.name}, {"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"resliced", tp.resliced},
           {"old", std::move(old)}, {"new", std::move(neu)}};
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
  return json{{"input", a.ckpt}, {"output", a.out}, {"num_files", plan.num_files}, {"policy", a.policy},
              {"tensors", std::move(tensors)}, {"files", std::move(files)}};
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
    StrAppend(&out, "  ", PrintableKey(t.name), "  ", DTypeName(t.dtype), " ", ShapeString(t.shape), ": ",
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

int RunReshard(const ReshardArgs& a) {
  const char* cmd = "reshard";
  auto opened = Checkpoint::Open(a.ckpt);
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
  if (SamePrefix(a.out, c.info()) || a.out == c.info().prefix) {
    return ReportError(cmd, absl::InvalidArgumentError(StrCat(a.out, ": is the input checkpoint; write elsewhere")));
  }
  auto plan = PlanReshard(c, options);
  if (!plan.ok()) return ReportError(cmd, plan.status());
  if (a.dry_run) {
    if (a.json) {
      std::cout << PlanJson(*plan, a).dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      PrintPlan(*plan, a);
    }
    return kExitOk;
  }
  uint64_t total = 0;
  for (uint64_t b : plan->file_bytes) total += b;
  {
    Progress progress(total, !a.quiet);
    ExecuteOptions eo;
    eo.jobs = a.jobs;
    eo.overwrite = a.force;
    eo.progress = progress.counter();
    absl::Status s = ExecutePlan(c, *plan, a.out, eo);
    if (!s.ok()) return ReportError(cmd, s);
  }
  bool verified = false;
  if (!a.no_verify) {
    CompareOptions co;
    co.jobs = a.jobs;
    auto report = Compare(a.out, a.ckpt, co);
    if (!report.ok()) return ReportError(cmd, report.status());
    if (!report->ok(false)) {
      for (const Finding& f : report->findings) {
        std::cerr << "tfckpt reshard: " << f.check << ": " << f.file << ": " << PrintableKey(f.key) << ": "
                  << f.message << "\n";
      }
      // Never leave an output that does not match its input under the final name.
      std::error_code ec;
      fs::remove(a.out + ".index", ec);
      for (int32_t f = 0; f < plan->num_files; ++f) fs::remove(DataFileName(a.out, f, plan->num_files), ec);
      ReportError(cmd, absl::InternalError(StrCat(a.out, ": output does not match the input; removed it")));
      return kExitCheckFailed;
    }
    verified = true;
  }
  int resliced = 0;
  for (const TensorPlan& tp : plan->tensors) resliced += tp.resliced;
  if (a.json) {
    json j = PlanJson(*plan, a);
    j["verified"] = verified;
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    std::cout << absl::StrFormat("wrote %s: %d data file%s, %d tensors (%d resliced), %s%s\n", a.out, plan->num_files,
                                 plan->num_files == 1 ? "" : "s", plan->tensors.size(), resliced, HumanBytes(total),
                                 verified ? ", verified against the input" : "");
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddReshard(CLI::App& app) {
  auto args = std::make_shared<ReshardArgs>();
  CLI::App* sub = app.add_subcommand("reshard", "Re-slice partitioned variables and re-split data files");
  sub->add_option("CKPT", args->ckpt, "Input checkpoint")->required();
  sub->add_option("-o,--output", args->out, "Output prefix (OUT.index, OUT.data-*)")->required();
  sub->add_option("--partition", args->partitions,
                  "[REGEX=]SPEC (repeatable, first match wins): fixed:N[@AXIS], min-size:BYTES[,MAX_SHARDS][@AXIS], "
                  "max-size:BYTES[,MAX_SHARDS][@AXIS], none, layout:SPECS@MESH. Without REGEX: every tensor "
                  "partitioned today");
  sub->add_option("--policy", args->policy, "Which data file each piece goes to: by-task[:N] (default), shards:N, "
                                            "single, max-shard-size:BYTES");
  sub->add_flag("--dry-run", args->dry_run, "Print the plan, write nothing");
  sub->add_flag("--json", args->json, "Machine-readable plan / result");
  sub->add_option("-j,--jobs", args->jobs, "Output files written in parallel (default: cores)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--force", args->force, "Replace an existing checkpoint at OUT");
  sub->add_flag("--no-verify", args->no_verify,
                "Skip checking the output against the input (input checksums are then not checked either)");
  sub->add_flag("-q,--quiet", args->quiet, "No progress bar");
  sub->add_option("--bytes-per-string", args->bytes_per_string, "Element size of strings for min-size/max-size (16)")
      ->check(CLI::PositiveNumber);
  sub->footer(
      "Examples:\n"
      "  tfckpt reshard ps8/model.ckpt-1000 -o ps3/model.ckpt-1000 --partition fixed:3\n"
      "  tfckpt reshard model.ckpt -o serving/variables --partition none --policy single\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'embedding=max-size:67108864' --dry-run\n"
      "  tfckpt reshard model.ckpt -o out/model --partition 'layout:x,unsharded@x=2,y=4'\n"
      "  tfckpt reshard model.ckpt -o out/model --policy max-shard-size:1073741824\n\n"
      "Exit codes: 0 ok, 1 the output did not verify, 2 usage error or refused output, 3 unreadable input\n"
      "or I/O failure.");
  return [args] { return RunReshard(*args); };
}

}  // namespace tfckpt::cli
