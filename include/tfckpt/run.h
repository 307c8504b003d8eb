// How a library call runs: how it is stopped, and what it tells its caller besides its result.
// Every call that writes or reads a whole checkpoint takes these options (docs/LIBRARY.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

namespace tfckpt {

// What the caller says about object stores, spelled as the AWS CLI spells it; each empty
// field leaves the setting to the environment and the config files (man tfckpt, OBJECT
// STORES). Read when the run first talks to a store.
class Storage;  // (storage.h)

struct ObjectStoreOptions {
  std::string endpoint_url;       // s3://: the endpoint, http(s)://HOST[:PORT]
  std::string profile;            // s3://: the AWS profile (the environment's keys are then not used)
  std::string region;             // s3://: the AWS region
  bool no_sign_request = false;   // s3:// and gs://: unsigned requests (public buckets)
};

struct RunOptions {
  // A stop request makes the call unwind: what it created is removed (temporaries, object
  // store uploads, objects it completed), nothing is left under its output's names, and it
  // returns a Cancelled status, within about half a second wherever it is (copies,
  // verification, requests to an object store and the waits between their retries). Once it
  // has begun to publish its output (docs/RELIABILITY.md: the point of no return), it
  // finishes instead and the stop is only reported (a note).
  std::stop_token stop;

  // Threads that copy, check and compare (0: one per core).
  int jobs = 0;
  // Concurrent transfers of each object store read (0: TFCKPT_S3_CONNECTIONS, else 8).
  int connections = 0;
  ObjectStoreOptions object_store;
  // The run's stores, by the scheme of the paths each serves ("s3", "gs", "mem"): a store
  // given here serves that scheme's paths in this run instead of the one the library would
  // make, as LevelDB's Options::env does. A test or an embedder hands in its own
  // (NewMemoryStorage(), storage.h: s3:// paths kept in memory, no network); a hermetic
  // program NewRefusingStorage() (every path an error at once, never a request). Schemes
  // not given get the library's stores; local paths are always the local file system.
  std::map<std::string, std::shared_ptr<Storage>, std::less<>> stores;

  // Progress: called when the run begins a phase of its work ("copying", "verifying",
  // "writing", "uploading") with the phase's size in bytes and the counter of bytes done,
  // which the run advances from then on. Read the counter from any thread; it is valid
  // until the next call of `progress`. Once a phase has begun, the call ends with one more
  // call, before it returns: `progress("", 0, nullptr)` — the last phase is over (its
  // counter no longer valid).
  std::function<void(std::string_view phase, uint64_t total, const std::atomic<uint64_t>* done)> progress;

  // Called with each note of the run, something to tell the user while it runs (a burst of
  // retries of an object store's requests, one line each), on any of its threads, one at
  // a time, never with a secret.
  std::function<void(std::string_view note)> note;

  // For tests: called on the thread that reaches each named point of the run (the points
  // are listed in docs/RELIABILITY.md, "Fault points"), before the run goes on. The run
  // checks for a stop request right after it returns, so a hook that waits for the stop
  // (as the command line's TFCKPT_FAULT_PAUSE_AT does) stops the run exactly there.
  std::function<void(std::string_view point)> at_point;
  // For tests of the verification: damage planted at the fault point "output-written" (a
  // file of the output has its bytes and is neither verified nor committed: a bundle's
  // first data file, a safetensors or .npz file), as a failing disk or copy would: the lowest
  // bit of its byte `flip_output_byte` flipped (in a bundle's first data file as soon as the
  // piece holding that byte is written). -1: none.
  int64_t flip_output_byte = -1;
};

class Run;       // (run/run.h)
class RunScope;  // (run/run.h)

// The run of the calls that take no RunOptions (OpenCheckpoint, ResolveCheckpoint,
// ReadTensor, ReadStrings, a Checkpoint's reads, Storage::For(path)'s requests): while a
// RunContext::Scope is alive on a thread, those calls on it (and the threads they start)
// use the context's options: its object store settings and connections, its stop token (a
// read then ends with Cancelled, "interrupted"), its notes and at_point. Without a scope
// they use the defaults and the environment. Reads create nothing: nothing is undone when
// the context ends. A Checkpoint opened in a context may be read in another (after a stop,
// a fresh context for the reads that come next).
//
//   tfckpt::RunContext context({.object_store = {.endpoint_url = "http://127.0.0.1:9000"}});
//   tfckpt::RunContext::Scope scope(context);
//   auto c = tfckpt::OpenCheckpoint("s3://bucket/model.ckpt");   // open.h
//
// Thread-safe: any number of scopes of one context may be alive on several threads.
class RunContext {
 public:
  explicit RunContext(RunOptions options = {});
  ~RunContext();
  RunContext(const RunContext&) = delete;
  RunContext& operator=(const RunContext&) = delete;

  // The calls this thread makes while alive run in `context`; the scope before is restored
  // at its end. REQUIRES: `context` outlives the scope.
  class Scope {
   public:
    explicit Scope(const RunContext& context);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::unique_ptr<RunScope> scope_;
  };

 private:
  std::shared_ptr<Run> run_;
};

// For the front ends' tests (the command line's and Python's; the library itself never
// reads these variables): sets `options`' test hooks as the environment asks, and says
// whether it asked for any. RunOptions::flip_output_byte from TFCKPT_FAULT_FLIP_OUTPUT_BYTE=N.
// RunOptions::at_point from TFCKPT_FAULT_PAUSE_AT=POINT (or POINT#N, the Nth time it is
// reached; points in docs/RELIABILITY.md): the run stops at that point, says so on file
// descriptor TFCKPT_FAULT_NOTIFY_FD (one line: POINT) and waits there until options->stop
// is requested (a signal) -- then the run goes on from that exact point: unwinding, or, past
// its point of no return, finishing. A test thus sends its signal or SIGKILL at a named
// point instead of guessing one by timing. With TFCKPT_FAULT_PAUSE_UNTIL=exit it stays there
// whatever comes, and says "stop requested" on the descriptor when the stop comes (a test of
// what a second signal does while a run unwinds). Waits 10 minutes at most.
// REQUIRES: options->stop is the token the run will have.
bool TestHooksFromEnvironment(RunOptions* options);

}  // namespace tfckpt
