// tfckpt reshard: re-slice partitioned variables and re-split data files.
#include <algorithm>
#include <tuple>
#include <iostream>

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

int RunReshard(const OptionValues& v) {
  ReshardRequest request;
  const bool json = v.Has("--json"), quiet = v.Has("--quiet");
  RunOptions run = CommandRun("reshard", !quiet && !json);
  if (absl::Status s = FillRequest(v, &request, &run); !s.ok()) return ReportError("reshard", s);
  const char* cmd = "reshard";
  absl::StatusOr<ReshardReport> r = Reshard(request, run);
  if (!r.ok()) return ReportWriteError(cmd, r.status());
  if (json) {
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
  if (!quiet) PrintTransfer(r->transfer);
  return kExitOk;
}

}  // namespace

std::function<int()> AddReshard(CLI::App& app, std::span<const OptionSpec> table) {
  auto values = std::make_shared<OptionValues>();
  CLI::App* sub = app.add_subcommand("reshard", "Re-slice partitioned variables and re-split data files");
  AddTableOptions(sub, table, values.get());
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
  return [values] { return RunReshard(*values); };
}

}  // namespace tfckpt::cli
