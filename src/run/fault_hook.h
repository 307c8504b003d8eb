// The test hook of the front ends, the command line and Python (RunOptions::at_point): with
// TFCKPT_FAULT_PAUSE_AT=POINT
// (or POINT#N, the Nth time it is reached; points in docs/RELIABILITY.md) the run stops at
// that point, says so on file descriptor TFCKPT_FAULT_NOTIFY_FD (one line: POINT) and waits
// there until it is asked to stop (a signal) -- then the run goes on from that exact point:
// unwinding, or, past its point of no return, finishing. A test thus sends its signal or
// SIGKILL at a named point instead of guessing one by timing. With
// TFCKPT_FAULT_PAUSE_UNTIL=exit it stays there whatever comes, and says "stop requested" on
// the descriptor when the stop comes (a test of what a second signal does while a run
// unwinds). Waits 10 minutes at most.
#pragma once

#include <functional>
#include <stop_token>
#include <string_view>

namespace tfckpt {

// The hook the environment asks for, or an empty function. (A front end asks for it; the
// library itself never reads these variables.)
std::function<void(std::string_view point)> FaultHookFromEnvironment(std::stop_token stop);

}  // namespace tfckpt
