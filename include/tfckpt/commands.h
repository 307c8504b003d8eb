// The five commands as library calls: a request in, a report out. The command line
// (src/cli/) and the Python package (python/) are thin front ends over these; a C++
// program calls them the same way (docs/LIBRARY.md).
//
// Every call takes RunOptions (run.h): a stop request (the call unwinds, leaving nothing
// behind, and returns Cancelled), progress and notes callbacks, threads and connections.
// A call prints nothing and installs no signal handler; two calls may run at once on two
// threads. Requests hold what a user gives, as text where the command line takes text
// ("fixed:3", "float32=bfloat16", "5G"): the call parses and checks it, and a bad value is
// InvalidArgument naming the option. Errors carry a check id and where they were found
// (status.h: ErrorInfoOf); ToJson(report) is the document `--json` prints, and ErrorJson
// the "error" object of a failure's document.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/reports.h"
#include "tfckpt/run.h"
#include "tfckpt/status.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// ---------------------------------------------------------------------------------------
// inspect

struct InspectRequest {
  std::string ckpt;                  // any CKPT (a prefix, its .index, a directory, a URL, ...)
  std::string filter;                // RE2 pattern: only tensors whose name has a match ("": all)
  std::vector<std::string> tensors;  // these tensors, with their values (then `filter` is not used)
  bool all_values = false;           // values: never summarise
  bool json_values = false;          // values as JSON text (else numpy-style text)
  bool stats = false;                // statistics of every numeric tensor listed
  bool tree = false;                 // the TF2 object graph
  bool index_only = false;           // do not check that the data files hold what the index says
};

struct InspectedTensor {
  const TensorEntry* tensor = nullptr;   // in InspectReport::checkpoint
  std::optional<TensorStats> stats;      // `stats`, numeric tensors
  std::optional<std::string> values;     // `tensors`: the values as text or JSON
};

struct InspectReport {
  std::shared_ptr<const Checkpoint> checkpoint;  // what the tensors point into
  std::vector<InspectedTensor> tensors;          // the ones asked for, in order
  uint64_t total_bytes = 0;                      // of every tensor of the checkpoint
  // Listings (no values, no statistics, not index_only) of a V2 checkpoint: data files that
  // are missing or shorter than the index says. The listing is complete all the same;
  // `problem` is then the error the command fails with (after printing it).
  std::vector<std::string> data_file_problems;
  absl::Status problem;
  bool tree = false;                              // the request asked for the object graph
  bool has_graph = false;                         // `tree`: the checkpoint has an object graph
  std::vector<ObjectGraphNode> graph;             // `tree`: its nodes, by id
  std::string tree_text;                          // `tree`: the graph drawn as a tree
};

absl::StatusOr<InspectReport> Inspect(const InspectRequest& request, const RunOptions& run = {});

// ---------------------------------------------------------------------------------------
// validate

struct ValidateRequest {
  std::string ckpt;
  std::string against;                 // compare with this checkpoint instead ("": check CKPT)
  bool strict = false;                 // warnings count as errors
  bool quick = false;                  // metadata only: no data read, no tensor checksums
  bool report = false;                 // with `against`: the numbers of each differing tensor
  bool abort_uploads = false;          // first abort the uploads in progress under CKPT (a store)
  int64_t older_than_seconds = 3600;   // abort_uploads: only those started this long ago or more
  std::optional<double> tolerance;     // with `against`: absolute tolerance of floats
};

struct ValidateCommandReport {
  std::string path;              // the checkpoint checked (resolved)
  std::string against;           // as asked
  bool strict = false, with_differences = false;
  int64_t tensors = 0;
  uint64_t bytes_checked = 0;
  std::vector<Finding> findings;  // severities as reported (strict: warnings are errors)
  std::vector<ValueDifference> differences;  // with_differences
  std::vector<std::string> aborted_uploads;  // abort_uploads: the names whose uploads were aborted
  size_t errors = 0, warnings = 0, notes = 0;
  bool ok() const { return errors == 0; }
};

// A checkpoint that cannot be read at all is an error; damage is reported as findings (the
// command's exit status 1 is `!report.ok()`).
absl::StatusOr<ValidateCommandReport> ValidateCommand(const ValidateRequest& request, const RunOptions& run = {});

// ---------------------------------------------------------------------------------------
// reshard

// Bytes the object stores of a command's run moved (TransferStats, storage.h): copied inside
// the store, sent, received. All 0 for a local run.
struct TransferReport {
  uint64_t copied_in_store = 0, uploaded = 0, downloaded = 0;
  bool object_store = false;  // an object store was involved (the human output says so)
};

// The words a --partition SPEC and a --policy begin with, as their parsers take them
// (reshard/partition.cc, reshard/reshard.cc): for completion and front ends.
const std::vector<std::string>& PartitionSpecWords();
const std::vector<std::string>& PolicyWords();
// The casts convert --cast takes ("float32=bfloat16", ...), as its parser checks them.
const std::vector<std::string>& CastWords();
// The values of ConvertRequest::to ("tf", "safetensors", "npz"), MergeRequest::on_conflict
// ("error", "first", "last") and MergeRequest::collapse_parallel ("check", "first"), as
// their commands check them: the options' choices (--to, --on-conflict, --collapse-parallel).
const std::vector<std::string>& ConvertFormatWords();
const std::vector<std::string>& ConflictWords();
const std::vector<std::string>& CollapseParallelWords();

struct ReshardRequest {
  std::string ckpt, out;
  std::vector<std::string> partitions;  // [REGEX=]SPEC rules (man tfckpt-reshard)
  std::string policy = "by-task";
  bool dry_run = false;                 // plan only
  bool force = false;
  bool no_verify = false;
  int64_t bytes_per_string = 16;
  bool allow_any_dtype = false;         // also cut dtypes TF cannot read back from slices
  // Scale-out (docs/SCALE_OUT.md): at most one of these.
  std::string plan_out;                 // write the plan to this file instead of the output
  std::string execute;                  // run one task of this plan ...
  std::string task;                     // ... this one ("auto": from the batch engine's variables)
  std::string finalize;                 // merge the tasks' parts of this plan into its output
  // Copies inside the object store where input and output are in the same one.
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

struct ReshardPiece {
  std::string spec;  // the slice string it is stored under
  Shape start, shape;  // the region of the tensor it holds
  int32_t file = -1;   // output data file (new pieces), input shard (old pieces; -1 for V1)
  uint64_t bytes = 0;  // new pieces
  // New pieces under policy by-task: the task it is placed on (as a sharding callback sees
  // it, its device's); -1 otherwise.
  int64_t task = -1;
};

struct ReshardTensor {
  std::string name;    // in the output
  std::string source;  // the input's name, when it differs (a renamed TF1 slot)
  int32_t dtype = 0;
  Shape shape;
  bool resliced = false;
  std::vector<ReshardPiece> old_pieces, new_pieces;
  std::string rule, note;
};

struct ReshardReport {
  enum class Mode { kReshard, kDryRun, kPlan, kExecute, kFinalize };
  Mode mode = Mode::kReshard;
  std::string input, output, policy;
  int32_t num_files = 0;
  std::vector<ReshardTensor> tensors;  // kReshard, kDryRun
  std::vector<uint64_t> file_bytes;    // kReshard, kDryRun: per output data file
  std::vector<std::string> data_files; // kReshard, kDryRun: their paths (OUTPUT.data-NNNNN-of-MMMMM)
  std::vector<std::string> notes;
  bool verified = false;               // kReshard, kFinalize
  // kPlan
  std::string plan;
  // kExecute
  int task = 0, num_tasks = 0;         // (num_tasks also kPlan, kFinalize)
  std::string part;
  int64_t entries = 0;                 // kExecute, kFinalize
  uint64_t bytes = 0;                  // kExecute, kPlan
  TransferReport transfer;             // kReshard, kExecute, kFinalize
};

absl::StatusOr<ReshardReport> Reshard(const ReshardRequest& request, const RunOptions& run = {});

// ---------------------------------------------------------------------------------------
// merge

struct MergeRequest {
  std::vector<std::string> inputs;  // with recover: the one prefix to finish
  std::string out;                  // "" with recover: the prefix itself
  bool recover = false, allow_missing = false, move = false, force = false, no_verify = false;
  // Combining (any of these rewrites the data).
  std::string on_conflict;          // "" or one of ConflictWords(): "error", "first", "last"
  std::vector<std::string> include, exclude, renames;
  bool drop_optimizer = false, average = false, collapse_replicas = false, no_check = false, dry_run = false;
  std::string collapse_parallel;    // "" or one of CollapseParallelWords(): "check", "first"
  std::optional<int> expand_parallel;
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

struct MergedTensor {
  std::string name;
  int32_t dtype = 0;
  Shape shape;
  int32_t file = 0;
  uint64_t bytes = 0;
  std::string from;  // "" when copied as stored (a plain merge)
};

struct MergeCommandReport {
  std::string output;
  bool dry_run = false, combined = false;
  std::vector<std::string> inputs, skipped, found_parts;  // found_parts: recover
  int32_t num_files = 0;
  int64_t entries = 0;  // index entries written (a plain merge)
  uint64_t bytes = 0;
  int64_t dropped_filtered = 0, dropped_optimizer = 0, collapsed = 0, averaged = 0, expanded = 0;
  uint64_t bytes_dropped_filtered = 0, bytes_dropped_optimizer = 0, bytes_collapsed = 0;
  int64_t graph_attributes_removed = 0, graph_attributes_renamed = 0, graph_slots_removed = 0;
  bool verified = false;
  std::vector<std::string> notes;
  std::vector<MergedTensor> tensors;
  // Parallel components or replicas that differ: nothing was written (exit status 1).
  std::vector<Finding> mismatches;
  TransferReport transfer;
};

absl::StatusOr<MergeCommandReport> Merge(const MergeRequest& request, const RunOptions& run = {});

// ---------------------------------------------------------------------------------------
// convert

struct ConvertRequest {
  std::string src, out;
  std::string to;                        // ConvertFormatWords(): "tf", "safetensors", "npz"; "": from out's name
  std::vector<std::string> casts;        // FROM=TO
  std::vector<std::string> include, exclude, renames;
  std::string max_file_size;             // safetensors: BYTES (K/M/G/T suffixes)
  std::vector<std::string> partitions;   // TF output: reshard's rules
  bool strict = false, force = false, no_verify = false;
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

struct ConvertCommandReport {
  std::string output, format;
  std::vector<std::string> files;
  int64_t tensors = 0;
  uint64_t bytes = 0;
  std::vector<std::string> skipped, notes;
  bool verified = false;
  TransferReport transfer;
};

absl::StatusOr<ConvertCommandReport> Convert(const ConvertRequest& request, const RunOptions& run = {});

// ---------------------------------------------------------------------------------------
// The documents `--json` prints (man tfckpt-COMMAND), with "ok" first; one serializer for
// the command line and Python. Text that is not UTF-8 becomes U+FFFD (inspect adds
// "name_hex" beside such a name).

std::string ToJson(const ValidateCommandReport& report);
std::string ToJson(const ReshardReport& report);
std::string ToJson(const MergeCommandReport& report);
std::string ToJson(const ConvertCommandReport& report);
// Inspect's document, written in pieces as it is made (a listing of a million tensors
// stays small in memory): `write` gets consecutive pieces of the text.
void WriteJson(const InspectReport& report, const std::function<void(std::string_view)>& write);

// The document of a failed call: {"ok": false, "error": ErrorJson(status)}.
std::string ErrorDocument(const absl::Status& status);
// The "error" object: {"id", "message", "file", "key", "offset"} (man tfckpt, JSON OUTPUT):
// "id" is the check id the error carries, else one for its code ("usage", "not-found",
// "interrupted", ...; ErrorId).
std::string ErrorJson(const absl::Status& status);
std::string ErrorId(const absl::Status& status);

}  // namespace tfckpt
