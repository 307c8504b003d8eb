// Scale-out resharding (docs/SCALE_OUT.md): plan once, run each output data file as an
// independent task on any batch engine, finalize with MergeV2 semantics — TensorFlow's own
// shape (one writer per task, then MergeV2Checkpoints), offline.
//
// The plan (JSON, deterministic: same inputs give the same bytes) is self-contained:
//   source   the checkpoint's identity: every file's path, size and mtime, and the index
//            file's CRC-32C (a task or finalize refuses a source that changed);
//   output   OUT, its temporary directory OUT_temp, the number of data files;
//   tasks    per task I: its part OUT_temp/part-IIIII-of-NNNNN (TF's layout, docs/FORMAT.md §e.2)
//            and, in write order, each index entry it produces (name, slice, dtype,
//            shape, offset, size) with the copy operations that fill it: source data
//            file, the stored slice's offset and region, the region copied, and its
//            byte range when that is one contiguous run.
// Task I writes exactly what the single-process reshard writes into data file I, so the
// finalized checkpoint is byte-identical to `tfckpt reshard` with the same options.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "copy/copy.h"

namespace tfckpt {

struct TaskPlanOptions {
  std::string out;                      // output prefix
  std::vector<std::string> partitions;  // --partition rules as given (recorded)
  std::string policy;                   // --policy as given (recorded)
  int64_t bytes_per_string = 16;
  bool overwrite = false;               // finalize may replace an existing OUT
  bool verify = true;                   // finalize compares OUT with the source
  // --server-side of the planning command: tasks whose source and OUT are in one s3://
  // store copy what moves unchanged inside it (recorded; plans without it: auto).
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

// The plan document for `plan` (made by PlanReshard on `c`). REQUIRES: c is V2.
absl::StatusOr<std::string> MakeTaskPlan(const Checkpoint& c, const WritePlan& plan, const TaskPlanOptions& o);

struct TaskReport {
  int task = 0, num_tasks = 0;
  std::string source, out;  // the plan's source and output prefixes
  std::string part;   // the part prefix written
  int64_t entries = 0;
  uint64_t bytes = 0;
};

// Runs task `task` of the plan in `plan_path`: checks the source is unchanged, writes the
// part (atomically; a re-run replaces it with the same bytes) and checks its entries are
// the planned ones. Errors: InvalidArgument for a bad task number or a changed source.
absl::StatusOr<TaskReport> ExecuteTask(const std::string& plan_path, int task, std::atomic<uint64_t>* progress);

// The task a batch engine assigned to this process: SLURM_ARRAY_TASK_ID, then
// JOB_COMPLETION_INDEX (Kubernetes indexed jobs), then TASK_INDEX.
absl::StatusOr<int> TaskFromEnvironment();

struct FinalizeReport {
  std::string out;
  int num_tasks = 0;
  int64_t entries = 0;
  bool verified = false;
};

// Checks that every task finished (naming those that did not), that the source is
// unchanged and every part holds its planned entries; merges the parts into OUT (data
// files renamed, index last), compares OUT with the source when the plan says so
// (removing OUT when it does not match: DataLoss), and removes OUT_temp.
absl::StatusOr<FinalizeReport> FinalizeTasks(const std::string& plan_path);

}  // namespace tfckpt
