// The whole tfckpt command line behind one call.
#pragma once

namespace tfckpt::cli {

// Parses `argv` (argv[0] is the program name), runs the chosen subcommand and returns
// its exit code (see ExitCode in common.h). Writes to stdout and stderr.
int RunTfckpt(int argc, char** argv);

}  // namespace tfckpt::cli
