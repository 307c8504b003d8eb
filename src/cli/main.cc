// tfckpt: TensorFlow checkpoints without TensorFlow.
#include <csignal>

#include "app.h"

int main(int argc, char** argv) {
  // Under a file-size limit (ulimit -f), a write past it fails with EFBIG, reported as
  // "no space", instead of the default SIGXFSZ killing us mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  return tfckpt::cli::RunTfckpt(argc, argv);
}
