// A run's cleanup: what it creates is tracked so that a failed or interrupted run leaves
// nothing behind, and the interrupt handlers. Implemented with the local storage
// (src/kvstore/local/cleanup.cc); files themselves are read and written through storage.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tfckpt {

// A name for a temporary that becomes `final_path`: FINAL.tmp-tfckpt-PID-N (unique in this
// process; RemoveStaleTemporaries recognises it once PID is gone).
std::string TemporaryName(const std::string& final_path);

// ---------------------------------------------------------------------------------------
// Interrupts and failed runs (docs/RELIABILITY.md). Every file or directory a run creates
// is tracked from just before it exists: temporaries until they are renamed or removed,
// and, once TrackOutputsUntilDone() was called (the CLI does), outputs renamed into place
// until the run calls ForgetAllCreated() (it succeeded) or RemoveAllCreated() (it failed).
// The handlers of InstallInterruptHandlers() remove everything tracked, print
// "tfckpt CMD: interrupted" and _exit(128 + signal).

enum class TrackKind {
  kFile,               // unlink(path)
  kDirectory,          // rmdir(path): only when empty
  kFilesStartingWith,  // every file in path's directory whose name starts with path's name
};

// Holds SIGINT/SIGTERM/SIGHUP off this thread while alive (they are delivered after), so
// that "track a path, then create it" (or "track the new name, rename, forget the old")
// is one step an interrupt cannot split. Cheap; nests. If an interrupt is being handled
// on another thread, the constructor never returns (the process is exiting).
class InterruptShield {
 public:
  InterruptShield();
  ~InterruptShield();
  InterruptShield(const InterruptShield&) = delete;
  InterruptShield& operator=(const InterruptShield&) = delete;
};

// For a run that must not be cut short once it begins to consume its inputs (merge
// --move, reshard --finalize: data files are renamed, not copied), the CLI holds an
// InterruptShield over the whole run. When the run succeeded, this drops the interrupts
// that arrived meanwhile (the run finished; there is nothing to undo) instead of letting
// them be delivered when the shield ends. True when one had arrived. Signals stay held off
// this thread after the shield ends (one arriving after this call is dropped at exit, not
// handled against a finished run). On failure the shield simply ends and the interrupt is
// handled as usual.
// REQUIRES: inside an InterruptShield on this thread.
bool DropPendingInterrupts();

// Returns an id for ForgetCreated. REQUIRES: inside an InterruptShield that also covers
// creating `path`, so that no interrupt falls between the two.
uint64_t TrackCreated(const std::string& path, TrackKind kind = TrackKind::kFile);
void ForgetCreated(uint64_t id);  // no-op for 0

// Renames `from` (tracked as `from_id`) to `to`; `to` stays tracked as an output (when
// TrackOutputsUntilDone() is on; its id in *to_id, else 0) and `from` is forgotten.
absl::Status MoveIntoPlace(const std::string& from, uint64_t from_id, const std::string& to,
                           uint64_t* to_id = nullptr);

void TrackOutputsUntilDone();
bool TrackingOutputs();  // TrackOutputsUntilDone() was called
void ForgetAllCreated();  // the run succeeded: what it made stays
void RemoveAllCreated();  // the run failed: remove what it made, newest first

// True when an interrupt is being handled on another thread and waits for this one to
// leave its InterruptShield: work inside the shield that may stop early should (a request
// that would be retried fails instead), since the process exits once the shield ends.
bool InterruptWaitsForThisThread();

// SIGINT, SIGTERM and SIGHUP: remove everything tracked, print "tfckpt COMMAND:
// interrupted" (SetInterruptCommand) and _exit with 128 + the signal. Worker threads hold
// these signals off (HoldInterruptsInThisThread), so the handler runs on the main thread.
// A signal ignored at startup (nohup) stays ignored.
void InstallInterruptHandlers();
void SetInterruptCommand(std::string_view command);
// Text the handler also writes on standard output before it exits (the CLI's --json error
// document); empty (the default) writes nothing. Text beyond 1 KiB is cut.
void SetInterruptDocument(std::string_view text);
void HoldInterruptsInThisThread();
// From now on an interrupt is handled by a thread of its own that waits for it (sigwait),
// instead of a handler that stops the main thread wherever it is: a run writing to an
// object store calls this, because its interrupt work (AtInterrupt: network requests on
// another thread) needs locks — malloc's, libcurl's, the client's — that a stopped main
// thread may hold, and would then wait out its bound doing nothing. Call it on the main
// thread; elsewhere, or inside a shield (one may be held for a whole run, deferring
// interrupts to its end), it does nothing.
// Does nothing unless InstallInterruptHandlers() was called. Once.
void HandleInterruptsOnOwnThread();

// Work an interrupt must still do that a signal handler cannot (a network request: abort an
// object store's upload in progress, delete an object a run completed before it failed):
// `fn` runs on a helper thread when an interrupt arrives, after the tracked files are
// removed and before the process exits; the handler waits for all of them at most
// kInterruptWorkSeconds. RemoveAllCreated() runs them too (the run failed),
// ForgetAllCreated() drops them (it succeeded). Returns an id for ForgetAtInterrupt.
// Thread-safe.
//
// kNewestFirst work runs one at a time, newest first, as files are removed (an index
// object is deleted before the data objects it names). kIndependent work depends on no
// other (aborting an upload nobody can see) and runs on a thread of its own from the start:
// a store slowed down by load then costs the longest request, not the sum of them.
inline constexpr int kInterruptWorkSeconds = 10;
enum class InterruptWorkOrder { kNewestFirst, kIndependent };
uint64_t AtInterrupt(std::function<void()> fn, InterruptWorkOrder order = InterruptWorkOrder::kNewestFirst);
void ForgetAtInterrupt(uint64_t id);  // no-op for 0

// An errno-based error for `path`: NotFound for ENOENT, ResourceExhausted for ENOSPC,
// otherwise Internal-free codes that the CLI maps to exit code 3.
absl::Status ErrnoError(std::string_view path, std::string_view what, int err);

}  // namespace tfckpt
