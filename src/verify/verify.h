// One verification policy for every command that writes a checkpoint (reshard, reshard
// --finalize, merge, convert to TensorFlow, safetensors or .npz): the output is read back
// and checked against where its values came from, and an output that fails is not left:
// where the writer can read its files before publishing them (BeforeCommit in
// publish/publication.h), it checks them then and publishes nothing when they fail (so --force
// leaves the checkpoint it would have replaced as it was); otherwise after the commit, and
// the output is removed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "format/bundle/bundle_writer.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/storage.h"

namespace tfckpt {

// Where (some of) an output's tensors came from.
struct VerifySource {
  const Checkpoint* input = nullptr;
  // Output tensor -> the tensor of `input` its values came from (after a rename). Without
  // it: every tensor of the output by its own name, and every tensor of `input` expected
  // in the output.
  std::optional<std::map<std::string, std::string>> names = {};
};

struct VerifyOptions {
  int jobs = 0;  // threads; 0 = one per core
  bool cast = false;  // the command cast dtypes: a source's values are compared cast to the output's dtype
  // The output's format when its name may not say it (convert --to): kSafetensors or
  // kNpz; otherwise the output is opened as a CKPT argument (OpenCheckpoint).
  std::optional<Format> format;
  // The output is a TF bundle not yet committed (BeforeCommit, publish/publication.h): its files
  // are read through written->open, by their final names, and the pieces the writer read
  // back (written->read_back) are compared by their CRCs alone where those prove it
  // (CompareOptions::crc_holds), against a source without stored CRCs by the CRCs its
  // copy took as it read it (written->source_crc: CompareOptions::source_crc). The messages
  // end "; nothing was written" (the writer abandons the output).
  const WrittenOutput* written = nullptr;
};

struct VerifyReport {
  int64_t tensors = 0;          // tensors of the output
  uint64_t bytes_compared = 0;  // payload bytes compared with a source
};

// Verifies the output at `out` (anything OpenCheckpoint reads: a TF prefix, a
// .safetensors file or set, or an .npz file with options.format) against `sources`:
//  - it opens without damage; no tensor has a defect; partitioned tensors' slices tile
//    them (CheckSliceLayout);
//  - every tensor a source names has the source tensor's dtype (or, with options.cast,
//    a dtype it casts to), shape and values (CompareTensorValues: bitwise; with
//    options.cast the source's values cast first), and every CRC on both sides holds;
//  - every other output tensor (averaged, a rewritten object graph, a slice of a tensor
//    no single source holds whole) has every CRC holding.
// Within a run (run/run.h) it is the run's "verifying" phase, begun once the output is
// open, whose total is the output's payload bytes (every tensor is checked, local or
// remote, before or after a commit) and whose counter advances as each tensor is done.
// It removes nothing: an output not yet committed (options.written) is abandoned by its
// writer, and one verified after its commit is removed, or kept, by its publication
// (Publication::CheckCommitted, publish/publication.h), which ends the message. A mismatch
// is DataLoss with the check id "output.mismatch", its file and tensor as payloads, and the
// one-line message
//   FILE: "TENSOR": CHECK: WHAT                 (before a commit: + "; nothing was written")
// where FILE is the output file (its final name) and TENSOR the key. An output or input
// that cannot be read is its own error, with the same ending.
absl::StatusOr<VerifyReport> VerifyWritten(const std::string& out, const std::vector<VerifySource>& sources,
                                           const VerifyOptions& options);

// Opens `specs` (OpenCheckpoint) for VerifySources.
absl::StatusOr<std::vector<std::unique_ptr<Checkpoint>>> OpenSources(const std::vector<std::string>& specs);

// The sources of an output merged from `inputs` as they are (MergeBundles): every tensor
// an input holds whole (no defect) is compared with the first such input; the others
// (slices spread over several inputs) are checked by their CRCs.
std::vector<VerifySource> MergedSources(const std::vector<std::unique_ptr<Checkpoint>>& inputs);


}  // namespace tfckpt
