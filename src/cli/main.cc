// tfckpt: TensorFlow checkpoints without TensorFlow.
#include <malloc.h>

#include <csignal>

#include "app.h"
#include "interrupts.h"

int main(int argc, char** argv) {
  // Under a file-size limit (ulimit -f), a write past it fails with EFBIG, reported as
  // "no space", instead of the default SIGXFSZ killing us mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  // Buffers of a few MiB (object store windows and upload parts, copy chunks) come and go
  // on many threads. glibc raises its mmap threshold to the size of each such buffer freed,
  // after which they are carved from per-thread arenas that keep the memory: a reshard
  // between object stores peaked at 333 MiB instead of 190. A fixed threshold keeps them
  // mapped and unmapped whole.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  // Ctrl-C, SIGTERM, SIGHUP: the run stops, removing what it made; exit 128 + signal.
  tfckpt::cli::InstallInterruptHandling();
  return tfckpt::cli::RunTfckpt(argc, argv);
}
