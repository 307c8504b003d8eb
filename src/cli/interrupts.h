// The command line's answer to SIGINT, SIGTERM and SIGHUP (man tfckpt, EXIT STATUS): the
// first asks the run to stop (RunOptions::stop): it unwinds, leaving nothing behind, and the
// command exits 128 + the signal; a second one ends the process at once, with that status
// (what the run had not yet removed is left: temporaries that later runs and validate
// recognise). Signal handling is the command line's alone: the library installs none.
#pragma once

#include <stop_token>
#include <string_view>

namespace tfckpt::cli {

// Holds the three signals off the calling thread, and so off every thread started from now
// on, and starts the thread that takes them (sigwait). Signals ignored at start (nohup, a
// background job) stay ignored. REQUIRES: called once, by main, before any other thread
// starts.
void InstallInterruptHandling();

// The stop requested by the first signal (a token that never stops when
// InstallInterruptHandling was not called: a caller running the command line in-process).
std::stop_token InterruptToken();

// The first signal received, or 0.
int InterruptSignal();

// The command named in what a second signal prints before it ends the process.
void SetInterruptedCommand(std::string_view command);

}  // namespace tfckpt::cli
