// The state of one library call while it runs (RunOptions in tfckpt/run.h): its stop
// request, its point of no return, its test hook, and what it has created so far, so that a
// call that fails or is stopped leaves nothing behind (docs/RELIABILITY.md).
//
// A call makes one Run and installs it on its thread (RunScope); the threads the library
// starts for it carry it along (StartThread, ParallelFor), so that code deep below (a copy
// loop, an object store request, a file being created) finds it with CurrentRun() without
// every signature passing it down. Nothing here is process-wide: two calls on two threads
// have two Runs. Code that runs outside any Run (a checkpoint opened to be read, a test)
// sees CurrentRun() == nullptr: nothing is tracked and nothing stops it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "tfckpt/run.h"

namespace tfckpt {

// Undo work: removing a file the run created, aborting an object store's upload, deleting an
// object it completed. kNewestFirst work runs one at a time, newest first (an index removed
// before the data files it names, a directory after the files in it); kIndependent work
// depends on nothing (aborting an upload nobody can see) and each runs on a thread of its
// own from the start, so a slow store costs the longest request, not the sum of them.
enum class UndoOrder { kNewestFirst, kIndependent };

// Made with std::make_shared where threads of the library may outlive the call's own frame
// (a read-ahead still on its way when the call returns): StartThread's threads then keep it
// alive. A Run on the stack works as well; its threads must then be joined before it ends.
class Run : public std::enable_shared_from_this<Run> {
 public:
  explicit Run(RunOptions options = {});
  // A Run neither kept nor undone is undone: a failure path cannot leave its files behind.
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // ---- Stopping
  // A stop was requested (whether or not the run still honours it).
  bool StopRequested() const { return options_.stop.stop_requested(); }
  // A stop was requested and the run honours it: it is not past its point of no return.
  bool Stopping() const { return StopRequested() && !past_no_return_.load(); }
  // Cancelled ("interrupted") when Stopping(), else OK.
  absl::Status CheckStop() const;
  // From here on the run finishes whatever happens (it has begun to change what is under
  // its output's names: removed an old index, moved consumed inputs). A stop requested
  // before this call still counts: the caller checks CheckStop() just before calling it.
  void PassPointOfNoReturn() { past_no_return_ = true; }
  bool PastPointOfNoReturn() const { return past_no_return_.load(); }
  // Waits `d`, or until a stop that counts is requested (a retry's backoff): false then.
  bool SleepUnlessStopped(std::chrono::nanoseconds d) const;
  const std::stop_token& stop_token() const { return options_.stop; }

  // ---- What the caller is told
  int jobs() const { return options_.jobs; }
  int64_t flip_output_byte() const { return options_.flip_output_byte; }
  int connections() const { return options_.connections; }
  const ObjectStoreOptions& object_store() const { return options_.object_store; }
  // The store the caller gave for `scheme` (RunOptions::stores), or null.
  std::shared_ptr<Storage> GivenStore(std::string_view scheme) const {
    const auto it = options_.stores.find(scheme);
    return it == options_.stores.end() ? nullptr : it->second;
  }
  // Begins a phase of the run's work (RunOptions::progress): the counter to advance, the
  // run's own (valid until the run ends).
  std::atomic<uint64_t>* StartPhase(std::string_view phase, uint64_t total);
  void Note(std::string_view note) const;
  // Calls the test hook (RunOptions::at_point) for `point`, then CheckStop().
  absl::Status Reached(std::string_view point) const;

  // ---- What the run uses
  // The run's resource `key` (the object store it talks to), made by `make` on first use
  // and kept until the run ends; every later call returns the same one. Thread-safe.
  std::shared_ptr<void> Resource(const void* key, const std::function<std::shared_ptr<void>()>& make);

  // ---- What the run creates
  // Records how to undo something the run is about to create (a file: record it just before
  // creating it; the run checks for a stop only at its own points, so nothing falls between
  // the two). Returns an id for Forget. Thread-safe, as is everything below.
  uint64_t OnUndo(std::function<void()> fn, UndoOrder order);
  void Forget(uint64_t id);  // it needs no undoing after all (no-op for 0)
  // The run succeeded: everything it created stays.
  void Keep();
  // The run failed or was stopped: removes what it created, newest first, and runs the undo
  // work; returns when all of it is done. Requests made meanwhile on this run's behalf are
  // never cancelled (Undoing()).
  void Undo();
  bool Undoing() const { return undoing_.load(); }

 private:
  struct Item {
    std::function<void()> undo;
    UndoOrder order = UndoOrder::kNewestFirst;
  };
  RunOptions options_;
  std::mutex phase_mu_;
  std::deque<std::atomic<uint64_t>> phases_;  // guarded by phase_mu_; elements never move
  std::atomic<bool> past_no_return_{false};
  std::atomic<bool> undoing_{false};
  mutable std::mutex note_mu_;
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Item> items_;  // guarded by mu_
  std::mutex resources_mu_;
  std::map<const void*, std::shared_ptr<void>> resources_;  // guarded by resources_mu_
  bool done_ = false;               // Keep() or Undo() called
};

// The run the calling thread works for, or nullptr.
Run* CurrentRun();

// Installs `run` as the calling thread's run while alive (nullptr: none), and restores the
// one before.
class RunScope {
 public:
  explicit RunScope(Run* run);
  ~RunScope();
  RunScope(const RunScope&) = delete;
  RunScope& operator=(const RunScope&) = delete;

 private:
  Run* previous_;
};

// A thread that runs `fn` for the caller's run (CurrentRun), which it keeps alive when the
// run is owned by a shared_ptr. REQUIRES: joined (every thread the library starts is).
std::thread StartThread(std::function<void()> fn);

// While alive, the requests this thread makes are not cancelled by a stop (CancellableNow):
// the clean-up of a stopped run (aborting an upload, deleting an object) must still go out.
class NotCancellable {
 public:
  NotCancellable();
  ~NotCancellable();
  NotCancellable(const NotCancellable&) = delete;
  NotCancellable& operator=(const NotCancellable&) = delete;

 private:
  bool previous_;
};

// ---- On the current run; each does nothing (or returns OK / 0 / false) outside a run.
absl::Status CheckStop();
bool Stopping();  // a request this thread makes now should be cut short (NotCancellable aside)
// This thread cleans up after a stop (NotCancellable, in a run whose stop was requested): its
// requests go out, on a short budget of retries.
bool CleaningUpAfterStop();
absl::Status Reached(std::string_view point);
uint64_t AtUndo(std::function<void()> fn, UndoOrder order = UndoOrder::kNewestFirst);
void ForgetAtUndo(uint64_t id);
// Run::StartPhase on the current run; nullptr outside a run.
std::atomic<uint64_t>* StartPhase(std::string_view phase, uint64_t total);
// The current run's threads (RunOptions::jobs), 0 outside a run (0: one per core).
int RunJobs();
// The current run's RunOptions::flip_output_byte (a test's fault), -1 outside a run.
int64_t FlipOutputByte();
// Waits `d`, or less when the current run is stopping: false then (a retry's backoff).
bool SleepUnlessStopped(std::chrono::nanoseconds d);

// The status of a stopped run: Cancelled("interrupted").
absl::Status StoppedError();

}  // namespace tfckpt
