// Shared by the subcommands: exit codes, error reporting, small formatting helpers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "progress.h"
#include "tfckpt/commands.h"
#include "tfckpt/run.h"

namespace tfckpt::cli {

// Documented in man tfckpt (man/tfckpt.1.in); the same for every subcommand.
enum ExitCode : int {
  kExitOk = 0,           // success
  kExitCheckFailed = 1,  // the command ran and a check failed
  kExitUsage = 2,        // bad arguments, refused request
  kExitBadInput = 3,     // unreadable or corrupt input, I/O failure
};

// The exit code for a failed library call.
int ExitCodeFor(const absl::Status& s);

// Prints "tfckpt COMMAND: error: MESSAGE" on one line to stderr and returns the exit code;
// after a signal asked the run to stop, ReportInterrupted instead.
// With --json (see SetJsonOutput), also prints the error document on stdout unless the
// command already printed its document: {"ok": false, "error": ErrorJson(s)}.
int ReportError(std::string_view command, const absl::Status& s);

// Prints "tfckpt COMMAND: interrupted" on stderr (with --json, the error document with id
// "interrupted" on stdout unless one is out) and returns 128 + the signal that stopped the
// run (interrupts.h). `detail` follows "interrupted" in both (what the clean-up left
// behind: "; left behind (could not be removed): URL, ...").
int ReportInterrupted(std::string_view command, std::string_view detail = "");

// --json was asked for. RunTfckpt sets this from argv before parsing, so that usage
// errors of every command also answer with a JSON document.
void SetJsonOutput(bool on);
bool JsonOutput();

// Prints a command's JSON document (commands.h: ToJson, WriteJson) on stdout; ReportError
// prints no second document after it.
void PrintJson(std::string_view document);
// For documents printed in pieces: tells ReportError a document is out.
void NoteJsonPrinted();

// The line "transfer: X copied inside the store, Y uploaded, Z downloaded" (stdout) when an
// object store was involved.
void PrintTransfer(const TransferReport& t);
void Warn(std::string_view command, std::string_view message);

// "1.5 KiB", "3.0 GiB"; bytes below 1 KiB print as "512 B".
std::string HumanBytes(uint64_t bytes);

// The RunOptions of `command` (tfckpt/run.h): the stop the first signal requests
// (interrupts.h), the test hooks (TestHooksFromEnvironment), the run's notes one line each
// on stderr, and, when `show_progress` and stderr is a terminal, a progress bar per phase of
// the run (its line ended when the run ends its last phase, before the call returns).
// FillRequest adds -j, --connections and the object store options given.
RunOptions CommandRun(std::string_view command, bool show_progress);

// The exit code of a failed command call, after its one error line (ReportError): 1 when
// the output it wrote did not verify (check id output.mismatch: nothing was published).
int ReportWriteError(std::string_view command, const absl::Status& s);

// Terminal columns `s` takes: glibc's wcwidth of each UTF-8 character under C.UTF-8 (CJK
// and emoji 2, combining marks 0); a byte that is not UTF-8 counts 1.
size_t DisplayWidth(std::string_view s);

// `s` followed by spaces up to `width` display columns (table cells with non-ASCII names).
std::string PadRight(std::string_view s, size_t width);

}  // namespace tfckpt::cli
