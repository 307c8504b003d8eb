// Combining checkpoints (tfckpt merge with edits): several inputs into one output, with
// name filters and renames, conflict rules, optimizer-state removal, checkpoint
// averaging, and the seeds' multi-device variables (parallel-device components, TPU
// replicas). Unlike MergeBundles, data is rewritten (copied in-kernel where it moves
// unchanged), so inputs may be any checkpoint `tfckpt` reads, V1 included.
//
// The object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`) is not a tensor for these rules: the
// graph of one input (the first that has one; the last with on-conflict=last) is kept and
// rewritten to match the output: attributes of dropped tensors removed, renamed keys
// updated, slot-variable references to nodes left without values removed, attributes
// added for expanded parallel components. Only an --exclude matching its key drops it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "model/name_rules.h"
#include "verify/verify.h"

namespace tfckpt {

struct CombineReport;

struct CombineOptions {
  enum class Conflict { kError, kFirst, kLast };
  Conflict on_conflict = Conflict::kError;  // the same logical tensor in several inputs, values differing
  std::vector<std::string> include, exclude;
  std::vector<RenameRule> renames;          // applied in order
  std::map<int32_t, int32_t> casts;         // dtype -> dtype (CastSupported); not for averaged tensors
  bool drop_optimizer = false;
  bool average = false;                     // element-wise mean of float tensors present in every input
  enum class Parallel { kKeep, kCheck, kFirst };
  Parallel collapse_parallel = Parallel::kKeep;
  std::optional<int> expand_parallel;       // N: add parallel_component_1 .. N-1 (REQUIRES: N >= 2, else an error)
  bool collapse_replicas = false;
  bool check_replicas = true;
  bool overwrite = false;
  bool dry_run = false;                     // plan only; write nothing
  int jobs = 0;                             // threads writing; 0 = one per core (the output does not depend on it)
  // BundleWriterOptions::read_back for the averaged tensors and those copied uncast whose
  // stored slices are all cut on axis 0 (the verification then proves them by CRCs alone).
  bool read_back = false;
  // Pieces copied unchanged between objects of one store are copied inside it.
  ServerSideCopy server_side = ServerSideCopy::kAuto;
  // Called once the plan is made, before writing, with the bytes to write; returns the
  // counter to advance (or nullptr).
  std::function<std::atomic<uint64_t>*(uint64_t total)> start_progress;
  // Called before anything is published, as a BeforeCommit (publish/publication.h) that also
  // gets the plan's report (which inputs, which tensors from where): e.g. verification.
  std::function<absl::Status(const WrittenOutput& written, const CombineReport& report)> before_commit;
};

struct CombinedTensor {
  std::string name;    // in the output
  std::string origin;  // "input 2 \"old/name\"", "mean of 3 inputs", ...
  int32_t dtype = 0;   // in the output (after a cast)
  Shape shape;
  int32_t file = 0;    // output data file of its first piece
  uint64_t bytes = 0;
  // The tensor its values are copied from (cast when CombineOptions::casts says so):
  // index in CombineReport::inputs and name there; -1 when they are computed (a mean, a
  // rewritten object graph).
  int source_input = -1;
  std::string source_name;
};

struct CombineReport {
  std::vector<std::string> inputs;
  std::vector<CombinedTensor> tensors;  // the output, by name
  int32_t num_files = 0;
  uint64_t bytes = 0;                   // payload bytes of the output
  int64_t dropped_filtered = 0, dropped_optimizer = 0, collapsed = 0, expanded = 0, averaged = 0;
  uint64_t bytes_dropped_filtered = 0, bytes_dropped_optimizer = 0, bytes_collapsed = 0;
  int64_t graph_attributes_removed = 0, graph_attributes_renamed = 0, graph_slots_removed = 0;
  std::vector<std::string> notes;
  // Checks that failed (parallel components or replicas that differ); when not empty,
  // nothing was written.
  std::vector<Finding> mismatches;
};

// A tensor of one input that an output tensor is made from.
struct CombineSource {
  size_t input = 0;                    // index into CombinePlan::inputs
  const TensorEntry* tensor = nullptr; // owned by that input
};

// One output tensor of a plan: what CombinedTensor reports, and how to write it.
struct PlannedTensor : CombinedTensor {
  enum class Kind {
    kCopy,     // the one source, its stored pieces copied as they are (cast if asked)
    kAverage,  // element-wise mean of every source (one per input, same slicing)
    kGraph,    // the object graph of sources[0]'s input, rewritten: graph_payload
  };
  Kind kind = Kind::kCopy;
  std::vector<CombineSource> sources;
  // The output data file of each stored slice of sources.back() (kGraph: one).
  std::vector<int32_t> files;
  std::string graph_payload;  // kGraph: the encoded string tensor to write
};

// What PlanCombine decided; WriteCombined executes it. Holds the opened inputs, which
// `tensors` point into.
struct CombinePlan {
  std::vector<std::shared_ptr<const Checkpoint>> inputs;  // in order
  std::vector<PlannedTensor> tensors;                     // the output, by name
  // Counters, notes and mismatches found while planning; `tensors` and the totals
  // describe the output. When `report.mismatches` is not empty, nothing may be written.
  CombineReport report;
};

// Opens `inputs` and plans their combination into `out`: name rules, conflicts (a tensor
// in two inputs: options.on_conflict chooses; under kError it is an error), averaging,
// parallel components and replicas (compared with CompareTensorValues unless the options
// skip the check; differences become report.mismatches), the object graph rewritten to
// match, and each output piece's data file (input data files in order of first use, as
// MergeV2). Reads the inputs' object graphs, and values only for those comparisons.
// Errors: a tensor in two inputs under kError, a rename collision, an invalid regex, an
// existing output without overwrite (unless dry_run), an output that is one of the
// inputs, unreadable or damaged inputs.
absl::StatusOr<CombinePlan> PlanCombine(const std::vector<std::string>& inputs, const std::string& out,
                                        const CombineOptions& options);

// Writes `plan` to `out`: every output data file laid out first (pieces in plan order),
// then its pieces written positionally by options.jobs threads (RunUnits, copy.h), so the
// bytes do not depend on the number of threads: unchanged pieces through PieceCopier
// (casts applied, stored CRCs checked against the bytes that moved), averaged ones
// streamed through a double-precision accumulator, every input piece read once, front to
// back, with its CRC checked on the way. Atomic (BundleWriter); options.overwrite
// replaces an existing checkpoint.
// REQUIRES: plan.report.mismatches is empty.
absl::Status WriteCombined(const CombinePlan& plan, const std::string& out, const CombineOptions& options);

// PlanCombine, then (unless dry_run or the plan has mismatches) WriteCombined; returns
// the plan's report.
absl::StatusOr<CombineReport> CombineCheckpoints(const std::vector<std::string>& inputs, const std::string& out,
                                                 const CombineOptions& options);

// The sources of a CombineCheckpoints output, from its report (CombinedTensor::
// source_input / source_name); `inputs` opened from CombineReport::inputs.
std::vector<VerifySource> CombinedSources(const CombineReport& report,
                                          const std::vector<std::unique_ptr<Checkpoint>>& inputs);

}  // namespace tfckpt
