// What the command calls (commands.h) share: naming the output, and verifying a written
// output the one way (verify.h) with its progress phase.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "copy/copy.h"
#include "run/left_behind.h"
#include "run/run.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/commands.h"
#include "tfckpt/run.h"
#include "verify/verify.h"

namespace tfckpt {

// Runs `body` as one run of `options` (run/run.h), on this thread: what it creates is kept
// when it succeeds and undone when it fails or is stopped; a run that was asked to stop and
// did not finish returns the stopped error (Cancelled), whatever error its unwinding met.
template <typename Report>
absl::StatusOr<Report> AsRun(const RunOptions& options, const std::function<absl::StatusOr<Report>()>& body) {
  auto run = std::make_shared<Run>(options);  // (threads that outlive the call's frame keep it)
  RunScope scope(run.get());
  absl::StatusOr<Report> result = body();
  if (result.ok()) {
    run->Keep();
    return result;
  }
  run->Undo();
  // (What the undo could not remove is named: a store refusing DELETE.)
  if (run->StopRequested()) return WithLeftBehind(StoppedError(), *run);
  return WithLeftBehind(result.status(), *run);
}

// An output argument (`option`: "-o", "--plan") checked and normalised: refuses a directory
// (OUT/, ., .., an existing directory: the output needs a name) and, for TensorFlow
// prefixes (`tf_prefix`), takes OUT.index as the prefix OUT, as CKPT does (an object URL
// likewise: a key ending in "/" or with objects under "KEY/" is a directory).
// InvalidArgument naming the option; for a URL, first the store's CheckAccess error
// (storage.h) when it cannot be reached: a run must not copy everything to find at the end
// that it cannot write.
absl::StatusOr<std::string> OutputName(std::string_view option, const std::string& out, bool tf_prefix);

// Verification of a TF bundle before its commit (a writer's BeforeCommit, bundle_writer.h):
// the bundle at `out` read through `written`, compared with `sources` (VerifyWritten: the
// run's "verifying" phase). Sets *verified when it held.
absl::Status VerifyBeforeCommit(const std::string& out, const WrittenOutput& written,
                                const std::vector<VerifySource>& sources, VerifyOptions options, bool* verified);

// Writes `plan` of `c` as the TF checkpoint `out` (ExecutePlan; --force: `overwrite`;
// --server-side: `server_side`), as
// the run's `phase` ("copying", "writing") of the plan's bytes, and, unless `sources` is
// nullopt (--no-verify), verifies it against them before its commit (VerifyBeforeCommit;
// every piece read back as it is written). Sets *verified when that held. The bytes
// written (the plan's data files).
absl::StatusOr<uint64_t> ExecuteVerified(const Checkpoint& c, const WritePlan& plan, const std::string& out,
                                         bool overwrite, ServerSideCopy server_side, std::string_view phase,
                                         std::optional<std::vector<VerifySource>> sources, bool* verified);

// --server-side always: InvalidArgument (one line) when the run cannot copy inside the
// store: a local output or input, a gs:// store (its XML API has no ranged part copy), or
// input and output in different stores. OK for the other modes.
absl::Status CheckServerSide(ServerSideCopy mode, const std::vector<std::string>& inputs, const std::string& out);

// Adds what the run's stores holding `paths` moved (each store once: Storage::Transfers)
// to *report, and their notes to *notes.
void AddTransfers(const std::vector<std::string>& paths, TransferReport* report, std::vector<std::string>* notes);

// Verification of an output after its commit (safetensors, .npz, merge --move): the check
// a writer hands its publication (Publication::CheckCommitted, which removes or keeps an
// output that fails it), VerifyWritten: the run's "verifying" phase. Sets *verified when it
// held.
absl::Status VerifyCommitted(const std::string& out, const std::vector<VerifySource>& sources, VerifyOptions options,
                             bool* verified);

}  // namespace tfckpt
