// The order of a bundle's commits (docs/RELIABILITY.md, "Crash-safe outputs"; object stores:
// "The index is the commit"), internal to Publication (publish/publication.h): which data
// file goes in place when, when an old checkpoint's index goes, how a failure keeps it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// The files of an existing checkpoint at `prefix`: PREFIX.index (if there) and every
// PREFIX.data-* a listing finds (temporaries aside).
std::vector<std::string> ExistingBundleFiles(const Location& prefix);

// Publishes a bundle written under temporary names (or, on an object store, as uploads not
// yet completed): `commit_data_file(i)` puts data_files[i] in place, `commit_index` the
// index. With `overwrite`, a checkpoint already at `prefix` is replaced so that no reader
// ever pairs its index with new data files and a failure keeps it where that can be done:
// the new data files under names it does not use are committed first; the old index is
// removed right before the first new data file that takes one of its data files' names
// (the same number of data files), else right before the new index; a failure before any
// of its data files was replaced puts its index back, whole; its data files the new one
// does not use are removed last. A failure after one was replaced leaves neither (what is
// left of both is removed). `check_data`, when given, runs between the data's commits and
// the index's (an object store, whose uploads cannot be read before they are complete:
// WritableFile::ReadableBeforeCommit); a failure there is a failure as above.
// `replace_in_place`, when given (a store whose commit replaces an object in one step: an
// object store's PUT), is set before check_data runs: true when the old index is to be
// replaced by the new one in that one step instead of removed first (overwrite, an old
// index, and no new data file under one of its data files' names), so that a reader finds
// the old checkpoint or the new one at every moment; commit_index must then replace
// (kIndexReplace). A commit that fails, or whose outcome cannot be told, leaves the old
// index (put back in the second case). On such a store, where new data files do take the
// old ones' names (the same count), the old checkpoint is first copied inside the store to
// a backup, PREFIX + kOldCheckpointInfix + 8 hex digits (its data files, then its index),
// before its index is removed; a failure or a stop up to the new index's commit puts it
// back from there (the data files replaced, then the index; `keep_data_file(i)` is called
// for a new data file whose name the old one takes back, so that the run's undo leaves
// it) and removes the backup; once the new index is up the backup goes, with any that a
// killed run left. A restore that fails keeps the backup and its error names it.
absl::Status PublishBundle(const Location& prefix, bool overwrite, const std::vector<std::string>& data_files,
                           const std::function<absl::Status(size_t)>& commit_data_file,
                           const std::function<absl::Status()>& commit_index,
                           const std::function<absl::Status()>& check_data = nullptr,
                           bool* replace_in_place = nullptr,
                           const std::function<void(size_t)>& keep_data_file = nullptr);

}  // namespace tfckpt
