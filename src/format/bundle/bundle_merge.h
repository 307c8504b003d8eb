// Merging bundles the way TensorFlow's MergeV2Checkpoints does (docs/FORMAT.md §e.3): a
// bundle-format operation on raw index entries (tensors are never decoded), used by
// `merge` and `reshard --finalize`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/bundle/bundle_writer.h"

namespace tfckpt {

struct MergeOptions {
  bool allow_missing = false;  // skip inputs without an index (at least one must exist)
  // TF's behaviour: rename data files, delete input indexes, remove emptied dirs. Where an
  // input or the output is an object (MovesByCopy: no rename), the data files are copied
  // as without `move` (inside the store where they can be: server_side), the output is
  // checked (before_commit) and committed, and then the inputs' indexes and data files are
  // deleted.
  bool move = false;
  bool overwrite = false;      // replace an existing checkpoint at the output
  bool keep_empty = false;     // an input with no tensors still brings its (empty) data files, in
                               // order (reshard --finalize: output file i is task i's file)
  // The inputs' data files are already the output's: the i-th in order of first use is
  // OUT.data-0000i-of-K (reshard --finalize on an object store, whose tasks wrote their data
  // objects under the final names: there is no rename). Only the index is written.
  bool data_in_place = false;
  // Called before anything is published (publish/publication.h), e.g. verification; not with
  // `move` by rename, whose renames cannot wait.
  BeforeCommit before_commit;
  // The output's check after its commit, where it cannot come before (`move` by rename),
  // e.g. its verification: run once the inputs are consumed (Publication::CheckCommitted:
  // an output that fails it is kept, all that is left of them, but for `temporaries`').
  // Empty: none.
  std::function<absl::Status()> after_commit;
  // The inputs are this run's temporaries, all under this directory (reshard --finalize's
  // OUT_temp; their source stays): removed whole once `move` consumed them, and an output
  // that fails after_commit is removed (PublishOptions::temporaries). Empty: none.
  std::string temporaries;
  // Data files copied between objects of one store are copied inside it
  // (WritableFile::PlanCopies).
  ServerSideCopy server_side = ServerSideCopy::kAuto;
};

struct MergeReport {
  std::vector<std::string> inputs_used;     // in order
  std::vector<std::string> inputs_skipped;  // missing (allow_missing) or without entries
  int32_t num_files = 0;                    // data files of the output
  int64_t entries = 0;                      // index entries written (header excluded)
  std::vector<std::string> notes;
};

// Merges the bundles `inputs` (prefixes, in order) into `out`: headers' num_shards summed,
// endianness and version must agree, entries unioned in input order, data files renumbered
// in order of first use, slices of one partitioned tensor concatenated (dtype and full
// shape must agree), a duplicate unpartitioned key is an error naming both inputs.
// Inputs are left untouched unless `move`: data files are hard-linked into place when on
// the same file system, else copied. The union is this file's; every file of the output
// (links, copies, moves, the index, the inputs --move consumes) goes through a Publication
// (publish/publication.h): atomic, data files first, index last, and an existing
// checkpoint at `out` (its index or a data file) refused without `overwrite`.
// Divergence from TF: an input with no entries is skipped (TF counts its num_shards but
// renames no data file, which leaves an inconsistent checkpoint). Each input index is read
// with the bundle reader's checks, so what OpenCheckpoint refuses (e.g. header.num-shards)
// is refused here with the same DataLoss; so are an entry naming a data file past its
// header's count (entry.shard), num_shards summing to more than 2^20, and slice lists the
// reader would refuse in the output (entry.slices) — all before anything is written.
// Whether MergeBundles' `move` copies and then deletes (an input or the output is an object
// URL: an object store has no rename) rather than renames.
bool MovesByCopy(const std::vector<std::string>& inputs, const std::string& out);

absl::StatusOr<MergeReport> MergeBundles(const std::vector<std::string>& inputs, const std::string& out,
                                         const MergeOptions& options);

}  // namespace tfckpt
