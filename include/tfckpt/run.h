// How a library call runs: how it is stopped, and what it tells its caller besides its result.
// Every call that writes or reads a whole checkpoint takes these options (docs/LIBRARY.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <string_view>

namespace tfckpt {

// What the caller says about object stores, spelled as the AWS CLI spells it; each empty
// field leaves the setting to the environment and the config files (man tfckpt, OBJECT
// STORES). Read when the run first talks to a store.
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
};

}  // namespace tfckpt
