// The `checkpoint` state file (text-format CheckpointState, docs/FORMAT.md §g) and how a
// directory argument is resolved through it. Input: the state file. Hermetic: object
// store URLs in it are errors (fuzz_util.h: refusing stores), never requests.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "tfckpt/checkpoint.h"
#include "tfckpt/open.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A state file may name s3://… or gs://…: resolving it must not reach for the network
  // (fuzz_util.h's context refuses them).
  const std::string dir = tfckpt::fuzz::ScratchDir();
  tfckpt::fuzz::WriteFile(dir + "/checkpoint", {reinterpret_cast<const char*>(data), size});
  std::vector<std::string> notes;
  (void)tfckpt::ReadCheckpointState(dir, &notes);
  (void)tfckpt::ResolveCheckpoint(dir);
  return 0;
}
