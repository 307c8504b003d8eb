// inspect: list tensors, their values and statistics, the object graph (commands.h).
#include "absl/strings/cord.h"
#include "commands/command_util.h"
#include "run/run.h"
#include "tfckpt/commands.h"
#include "model/object_graph.h"
#include "tfckpt/open.h"
#include "base/regex.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"
#include "tfckpt/strings.h"
#include "model/values.h"

namespace tfckpt {
namespace {

// Data files that are missing or shorter than the index says, one message each. Listing
// needs only the index, but a checkpoint whose bytes are not all there is not intact.
// `*first_problem`: the first one as a status (its code and check id: the JSON error id).
std::vector<std::string> DataFileProblems(const Checkpoint& c, absl::Status* first_problem) {
  const CheckpointInfo& info = c.info();
  std::vector<uint64_t> need(info.data_files.size(), 0);
  for (const auto& t : c.tensors()) {
    if (!t.defect.empty()) continue;  // (its entry is wrong, not the file: said as its defect)
    for (const auto& s : t.slices) {
      if (s.data.v1_file < 0 && s.data.shard >= 0 && s.data.shard < static_cast<int32_t>(need.size()) &&
          s.data.size <= UINT64_MAX - s.data.offset) {
        need[s.data.shard] = std::max(need[s.data.shard], s.data.offset + s.data.size);
      }
    }
  }
  // (On an object store each is a HEAD: asked side by side, not one after the other.)
  const std::vector<absl::StatusOr<FileStat>> stats =
      info.data_files.empty() ? std::vector<absl::StatusOr<FileStat>>{}
                              : Location::Of(info.prefix).store().StatAll(info.data_files);
  std::vector<std::string> problems;
  for (size_t i = 0; i < info.data_files.size(); ++i) {
    const absl::StatusOr<FileStat>& st = stats[i];
    if (absl::IsNotFound(st.status())) {
      problems.push_back(StrCat(info.data_files[i], ": data file missing; values cannot be read"));
      if (first_problem->ok()) {
        *first_problem = Locate(absl::NotFoundError("data file missing"), "files.missing-data", info.data_files[i], "", -1);
      }
    } else if (!st.ok()) {
      problems.push_back(StrCat(st.status().message(), "; values cannot be read"));
      if (first_problem->ok()) *first_problem = st.status();
    } else if (st->size < need[i]) {
      problems.push_back(StrCat(info.data_files[i], ": ", st->size, " bytes, but the index needs ", need[i],
                                " (truncated?)"));
    }
  }
  return problems;
}

absl::StatusOr<InspectReport> InspectRun(const InspectRequest& r) {
  if (r.ckpt.empty()) return absl::InvalidArgumentError("CKPT is required");
  if (r.all_values && r.tensors.empty()) return absl::InvalidArgumentError("--all-values needs --tensor");
  if (r.tree && (r.stats || !r.tensors.empty())) {
    return absl::InvalidArgumentError("--tree excludes --stats and --tensor");
  }
  std::optional<Regex> filter;
  if (!r.filter.empty()) {
    TFCKPT_ASSIGN_OR_RETURN(filter, Regex::Compile(r.filter, "--filter"));
  }
  TFCKPT_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> opened, OpenCheckpoint(r.ckpt));
  InspectReport report;
  report.checkpoint = std::move(opened);
  const Checkpoint& c = *report.checkpoint;
  const CheckpointInfo& info = c.info();
  for (const std::string& name : r.tensors) {
    const TensorEntry* t = c.Find(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(StrCat(info.prefix, ": no tensor named \"", PrintableKey(name), "\""));
    }
    report.tensors.push_back({t, std::nullopt, std::nullopt});
  }
  if (r.tensors.empty()) {
    for (const auto& t : c.tensors()) {
      if (!filter || filter->Search(t.name)) report.tensors.push_back({&t, std::nullopt, std::nullopt});
    }
  }
  for (const auto& t : c.tensors()) report.total_bytes += t.bytes;
  // Listings check that the data files hold what the index describes (values and statistics
  // read the bytes and fail on their own).
  absl::Status first_problem;
  if (info.format == Format::kV2 && !r.index_only && r.tensors.empty() && !r.stats) {
    report.data_file_problems = DataFileProblems(c, &first_problem);
  }
  if (!report.data_file_problems.empty()) {
    const size_t more = report.data_file_problems.size() - 1;
    const std::string message =
        StrCat(report.data_file_problems[0], more ? StrCat(" (and ", Count(more, "more data file problem"), ")") : "",
               "; --index-only lists without checking data files");
    // A missing data file is not-found (check id files.missing-data), as for the other
    // commands; a short one corrupt.
    report.problem = first_problem.ok() ? absl::DataLossError(message) : absl::Status(first_problem.code(), message);
    if (!first_problem.ok()) {
      first_problem.ForEachPayload([&](absl::string_view type, const absl::Cord& payload) {
        report.problem.SetPayload(type, payload);
      });
    }
  }
  if (r.stats) {
    for (InspectedTensor& t : report.tensors) {
      TFCKPT_RETURN_IF_ERROR(CheckStop());
      TFCKPT_ASSIGN_OR_RETURN(TensorStats st, ComputeStats(c, *t.tensor, RunJobs()));
      if (st.numeric) t.stats = st;
    }
  }
  if (!r.tensors.empty()) {
    PrintOptions po;
    po.all_values = r.all_values;
    po.json = r.json_values;
    for (InspectedTensor& t : report.tensors) {
      TFCKPT_ASSIGN_OR_RETURN(t.values, FormatValues(c, *t.tensor, po));
    }
  }
  if (r.tree) {
    report.tree = true;
    TFCKPT_ASSIGN_OR_RETURN(std::optional<pb::TrackableObjectGraph> g, LoadObjectGraph(c));
    report.has_graph = g.has_value();
    if (g) {
      report.graph = GraphNodes(*g);
      report.tree_text = FormatObjectTree(c, *g);
    }
  }
  return report;
}

}  // namespace

absl::StatusOr<InspectReport> Inspect(const InspectRequest& request, const RunOptions& run) {
  return AsRun<InspectReport>(run, [&] { return InspectRun(request); });
}

}  // namespace tfckpt
