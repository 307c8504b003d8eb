// The whole tfckpt command line behind one call.
#pragma once

#include <span>

#include "tfckpt/options.h"

namespace tfckpt::cli {

// Parses `argv` (argv[0] is the program name), runs the chosen subcommand and returns
// its exit code (see ExitCode in common.h). Writes to stdout and stderr. The commands'
// options are the rows of `table` (tests add a row of their own).
int RunTfckpt(int argc, char** argv, std::span<const OptionSpec> table = OptionTable());

}  // namespace tfckpt::cli
