// Local files a run creates, tracked on the current run (run/run.h) so that a run that fails
// or is stopped removes them: temporaries until they are renamed into place or removed, and
// outputs renamed into place until the run succeeds. Used by the local storage, and by the
// two writers that still create local files themselves (merge's links, the .npz temporary).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tfckpt {

// A name for a temporary that becomes `final_path`: FINAL.tmp-tfckpt-PID-N (unique in this
// process; RemoveStaleTemporaries recognises it once PID is gone).
std::string TemporaryName(const std::string& final_path);

enum class TrackKind {
  kFile,               // removed (unlink)
  kDirectory,          // removed when empty (rmdir)
  kFilesStartingWith,  // every file in path's directory whose name starts with path's name
};

// Records `path` as created by the current run (call just before creating it); 0 and nothing
// recorded outside a run. Returns an id for ForgetCreated.
uint64_t TrackCreated(const std::string& path, TrackKind kind = TrackKind::kFile);
void ForgetCreated(uint64_t id);  // no-op for 0

// Renames `from` (tracked as `from_id`) to `to`; `to` is then tracked in its place, as an
// output of the run (its id in *to_id), and `from` forgotten. When both names are already
// one file (hard links), `from` is removed instead. With `if_absent`, an existing `to` is
// left as it is and the move refused (AlreadyExists; renameat2's RENAME_NOREPLACE: no
// window in which another writer's file could be replaced).
absl::Status MoveIntoPlace(const std::string& from, uint64_t from_id, const std::string& to,
                           uint64_t* to_id = nullptr, bool if_absent = false);

}  // namespace tfckpt
