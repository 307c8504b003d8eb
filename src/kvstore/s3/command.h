// Runs a command for its output: the AWS config's credential_process. No shell: the
// command line is split into words (ShellSplit, aws_config.h) and the program found on
// PATH, as botocore runs it. Its stdin is ours (a process may prompt on the terminal);
// stdout and stderr are captured.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tfckpt::s3 {

struct CommandResult {
  int exit_code = 0;  // 128 + N when killed by signal N
  std::string out, err;
};

// Runs argv[0] (looked up on PATH) with `argv` and waits for it. NotFound when it cannot
// be started; ResourceExhausted when it writes more than 1 MiB to stdout or stderr (it is
// killed). REQUIRES: !argv.empty().
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv);

}  // namespace tfckpt::s3
