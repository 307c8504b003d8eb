// merge: TensorFlow's MergeV2Checkpoints, recovery of unmerged distributed saves, and
// combining checkpoints with edits (commands.h).
#include "commands/command_util.h"
#include "run/run.h"
#include "format/bundle/bundle_merge.h"
#include "merge/combine.h"
#include "tfckpt/commands.h"
#include "merge/merge.h"
#include "tfckpt/open.h"
#include "tfckpt/status.h"
#include "tfckpt/strings.h"

namespace tfckpt {
namespace {

// The words of --on-conflict and --collapse-parallel and what each asks CombineOptions for:
// ConflictWords() and CollapseParallelWords() are their first halves.
constexpr std::pair<std::string_view, CombineOptions::Conflict> kConflicts[] = {
    {"error", CombineOptions::Conflict::kError},
    {"first", CombineOptions::Conflict::kFirst},
    {"last", CombineOptions::Conflict::kLast}};
constexpr std::pair<std::string_view, CombineOptions::Parallel> kCollapses[] = {
    {"check", CombineOptions::Parallel::kCheck},
    {"first", CombineOptions::Parallel::kFirst}};

template <typename T, size_t N>
const std::vector<std::string>* WordsOf(const std::pair<std::string_view, T> (&modes)[N]) {
  auto* words = new std::vector<std::string>;
  for (const auto& [word, mode] : modes) words->emplace_back(word);
  return words;
}

bool Combining(const MergeRequest& r) {
  return !r.on_conflict.empty() || !r.include.empty() || !r.exclude.empty() || !r.renames.empty() ||
         r.drop_optimizer || r.average || r.collapse_replicas || !r.collapse_parallel.empty() ||
         r.expand_parallel.has_value() || r.dry_run;
}

void Describe(const CombineReport& c, MergeCommandReport* report) {
  report->inputs = c.inputs;
  report->num_files = c.num_files;
  report->bytes = c.bytes;
  report->dropped_filtered = c.dropped_filtered;
  report->dropped_optimizer = c.dropped_optimizer;
  report->collapsed = c.collapsed;
  report->averaged = c.averaged;
  report->expanded = c.expanded;
  report->bytes_dropped_filtered = c.bytes_dropped_filtered;
  report->bytes_dropped_optimizer = c.bytes_dropped_optimizer;
  report->bytes_collapsed = c.bytes_collapsed;
  report->graph_attributes_removed = c.graph_attributes_removed;
  report->graph_attributes_renamed = c.graph_attributes_renamed;
  report->graph_slots_removed = c.graph_slots_removed;
  report->notes = c.notes;
  report->mismatches = c.mismatches;
  for (const CombinedTensor& t : c.tensors) report->tensors.push_back({t.name, t.dtype, t.shape, t.file, t.bytes, t.origin});
}

absl::Status Combine(const MergeRequest& r, const std::vector<std::string>& inputs, const std::string& out,
                     MergeCommandReport* report) {
  if (r.move) return absl::InvalidArgumentError("--move only applies to a plain merge (no edits)");
  if (r.allow_missing) return absl::InvalidArgumentError("--allow-missing only applies to a plain merge (no edits)");
  if (r.average && inputs.size() < 2) return absl::InvalidArgumentError("--average needs at least two inputs to average");
  if (r.no_check && !r.collapse_replicas) return absl::InvalidArgumentError("--no-check needs --collapse-replicas");
  CombineOptions o;
  if (!r.on_conflict.empty()) {
    absl::StatusOr<size_t> i = OneOf(r.on_conflict, ConflictWords());
    if (!i.ok()) return Annotate(i.status(), "--on-conflict");
    o.on_conflict = kConflicts[*i].second;
  }
  o.include = r.include;
  o.exclude = r.exclude;
  for (const std::string& text : r.renames) {
    TFCKPT_ASSIGN_OR_RETURN(RenameRule rule, ParseRenameRule(text));
    o.renames.push_back(std::move(rule));
  }
  o.drop_optimizer = r.drop_optimizer;
  o.average = r.average;
  if (!r.collapse_parallel.empty()) {
    absl::StatusOr<size_t> i = OneOf(r.collapse_parallel, CollapseParallelWords());
    if (!i.ok()) return Annotate(i.status(), "--collapse-parallel");
    o.collapse_parallel = kCollapses[*i].second;
  }
  o.expand_parallel = r.expand_parallel;
  o.collapse_replicas = r.collapse_replicas;
  o.check_replicas = !r.no_check;
  o.overwrite = r.force;
  o.server_side = r.server_side;
  o.dry_run = r.dry_run;
  o.jobs = RunJobs();
  o.start_progress = [](uint64_t total) { return StartPhase("copying", total); };
  if (!r.dry_run && !r.no_verify) {
    o.read_back = true;
    // Before anything is published: an output that fails leaves OUT as it was.
    o.before_commit = [&](const WrittenOutput& written, const CombineReport& plan) -> absl::Status {
      TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(plan.inputs));
      return VerifyBeforeCommit(out, written, CombinedSources(plan, sources), {}, &report->verified);
    };
  }
  TFCKPT_ASSIGN_OR_RETURN(CombineReport c, CombineCheckpoints(inputs, out, o));
  report->combined = true;
  Describe(c, report);
  return absl::OkStatus();
}

// A plain merge's tensors, read back from the output index ("from" unknown: entries are
// copied as they are).
absl::Status DescribeOutput(const std::string& out, MergeCommandReport* report) {
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> c, OpenCheckpoint(out));
  for (const TensorEntry& t : c->tensors()) {
    report->tensors.push_back({t.name, t.dtype, t.shape, t.slices.empty() ? 0 : t.slices[0].data.shard, t.bytes, ""});
    report->bytes += t.bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<MergeCommandReport> MergeRun(const MergeRequest& r) {
  MergeCommandReport report;
  report.dry_run = r.dry_run;
  std::vector<std::string> inputs = r.inputs;
  std::string out = r.out;
  if (inputs.empty()) return absl::InvalidArgumentError("merge needs at least one input PREFIX");
  if (r.recover) {
    if (r.inputs.size() != 1) {
      return absl::InvalidArgumentError("--recover takes one PREFIX (the checkpoint to finish)");
    }
    if (out.empty()) out = r.inputs[0];
    std::vector<std::string> found;
    TFCKPT_ASSIGN_OR_RETURN(inputs, FindSaveParts(r.inputs[0], &found));
    report.found_parts = inputs;
  }
  if (out.empty()) return absl::InvalidArgumentError("-o OUT is required (or --recover PREFIX)");
  TFCKPT_RETURN_IF_ERROR(CheckServerSide(r.server_side, r.inputs, out));
  TFCKPT_ASSIGN_OR_RETURN(out, OutputName("-o", out, true));
  report.output = out;
  if (Combining(r)) {
    TFCKPT_RETURN_IF_ERROR(Combine(r, inputs, out, &report));
    std::vector<std::string> paths = inputs;
    paths.push_back(out);
    AddTransfers(paths, &report.transfer, &report.notes);
    return report;
  }
  // A plain merge takes the forms every CKPT takes (a directory, PREFIX.index, ...): each
  // V2 input is merged by its prefix; other formats (V1, safetensors) are combined.
  if (!r.recover) {
    for (std::string& in : inputs) {
      auto resolved = ResolveCheckpoint(in);
      if (!resolved.ok()) continue;  // MergeBundles names it (or skips it: --allow-missing)
      if (resolved->format != Format::kV2) {
        if (r.move) return absl::InvalidArgumentError(StrCat(in, ": --move takes V2 checkpoints only"));
        TFCKPT_RETURN_IF_ERROR(Combine(r, r.inputs, out, &report));
        return report;
      }
      in = resolved->prefix;
    }
  }
  MergeOptions o;
  o.allow_missing = r.allow_missing;
  o.move = r.move;
  o.overwrite = r.force;
  o.server_side = r.server_side;
  // --move by rename consumes the inputs as it goes; by copy (an object store) they stay
  // whole until the output is committed.
  const bool rename = r.move && !MovesByCopy(inputs, out);
  if (!r.no_verify && !rename) {
    // Before anything is published: an output that fails leaves OUT as it was. The
    // sources are the inputs that have an index (those without any are skipped or fail
    // the merge; those without tensors add nothing to compare).
    o.before_commit = [&](const WrittenOutput& written) -> absl::Status {
      std::vector<std::string> present;
      for (const std::string& in : inputs) {
        if (Location::Of(in).Sibling(".index").Exists()) present.push_back(in);
      }
      TFCKPT_ASSIGN_OR_RETURN(auto sources, OpenSources(present));
      return VerifyBeforeCommit(out, written, MergedSources(sources), {}, &report.verified);
    };
  }
  if (!r.no_verify && rename) {
    // --move consumed the inputs: the output is then checked by its CRCs and layout alone,
    // after the renames, and kept when it fails (it is all that is left: its publication's).
    o.after_commit = [&] { return VerifyCommitted(out, {}, {}, &report.verified); };
  }
  TFCKPT_ASSIGN_OR_RETURN(MergeReport m, MergeBundles(inputs, out, o));
  report.inputs = m.inputs_used;
  report.skipped = m.inputs_skipped;
  report.num_files = m.num_files;
  report.entries = m.entries;
  report.notes = m.notes;
  TFCKPT_RETURN_IF_ERROR(DescribeOutput(out, &report));
  std::vector<std::string> paths = inputs;
  paths.push_back(out);
  AddTransfers(paths, &report.transfer, &report.notes);
  return report;
}

}  // namespace

const std::vector<std::string>& ConflictWords() {
  static const auto* words = WordsOf(kConflicts);
  return *words;
}

const std::vector<std::string>& CollapseParallelWords() {
  static const auto* words = WordsOf(kCollapses);
  return *words;
}

absl::StatusOr<MergeCommandReport> Merge(const MergeRequest& request, const RunOptions& run) {
  return AsRun<MergeCommandReport>(run, [&] { return MergeRun(request); });
}

}  // namespace tfckpt
