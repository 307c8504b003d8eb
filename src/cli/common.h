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

// Adds "-j,--jobs N" to `sub`, the same in every command: a whole number of threads,
// 0 (the default) meaning one per core; anything else is a usage error with one message.
CLI::Option* AddJobsOption(CLI::App* sub, int* jobs, const std::string& help);

// Adds "--connections N" to `sub`, the same in every command that reads checkpoints:
// concurrent transfers of each object store read (RunOptions::connections), 1 to 256.
// Adds the object store options with it (AddObjectStoreOptions): every command that
// takes --connections takes them too.
CLI::Option* AddConnectionsOption(CLI::App* sub);

// The object store options, spelled as the AWS CLI spells them (man tfckpt, OBJECT
// STORES), passed to the call as RunOptions::object_store (CommandRun):
//   --endpoint-url URL   s3:// endpoint (overrides AWS_ENDPOINT_URL_S3 and the config files)
//   --profile NAME       AWS profile (the environment's AWS_ACCESS_KEY_ID is then not used)
//   --region REGION      AWS region
//   --no-sign-request    unsigned requests (public buckets), s3:// and gs://
// Each burst of object store retries prints one line on stderr (the run's notes,
// CommandRun), "tfckpt COMMAND: GET s3://…: HTTP 503 …; retrying (up to N times)".
void AddObjectStoreOptions(CLI::App* sub);

// The options several commands share, declared once here so that their names and wording
// agree (their man pages say the same sentences). Where a command says more, `detail`
// follows the shared sentence.
//   -o,--output OUT   "Output DETAIL; OUT.index also names a TF prefix; not a directory"
//   --force           "Replace an existing output (an output that is one of the inputs is
//                      always refused)"
//   --json            "One JSON document on stdout (man tfckpt-CMD), also on failure:
//                      {"ok": false, "error": {...}}"
//   --no-verify       "Do not verify the output (DETAIL)"
//   -q,--quiet        "No progress bar (on a terminal it appears when the work takes more
//                      than a second)"
//   --dry-run         "Print the plan and write nothing (DETAIL)"
CLI::Option* AddOutputOption(CLI::App* sub, std::string* out, const std::string& detail);
CLI::Option* AddForceOption(CLI::App* sub, bool* force);
CLI::Option* AddJsonOption(CLI::App* sub, bool* json, const std::string& detail = "");
CLI::Option* AddNoVerifyOption(CLI::App* sub, bool* no_verify, const std::string& detail);
CLI::Option* AddQuietOption(CLI::App* sub, bool* quiet, const std::string& detail = "");
// --server-side auto|never|always (reshard, merge, convert): copies inside the object store.
CLI::Option* AddServerSideOption(CLI::App* sub, ServerSideCopy* mode);
// The line "transfer: X copied inside the store, Y uploaded, Z downloaded" (stdout) when an
// object store was involved.
void PrintTransfer(const TransferReport& t);
CLI::Option* AddDryRunOption(CLI::App* sub, bool* dry_run, const std::string& detail);
// --include REGEX, --exclude REGEX, --rename REGEX=REPLACEMENT (NameRules), in `group`
// when not empty.
void AddNameRuleOptions(CLI::App* sub, std::vector<std::string>* include, std::vector<std::string>* exclude,
                        std::vector<std::string>* renames, const std::string& group = "");

// A validator for whole-number options: accepts LO..HI, refuses anything else with
// "VALUE: not a whole number from LO to HI" (or ">= LO" when HI is INT64_MAX).
CLI::Validator WholeNumber(int64_t lo, int64_t hi = INT64_MAX);
void Warn(std::string_view command, std::string_view message);

// "1.5 KiB", "3.0 GiB"; bytes below 1 KiB print as "512 B".
std::string HumanBytes(uint64_t bytes);

// The RunOptions of `command` (tfckpt/run.h): the stop the first signal requests
// (interrupts.h), the test hook (run/fault_hook.h), `jobs`, the --connections and object
// store options given, the run's notes one line each on stderr, and, when `show_progress`
// and stderr is a terminal, a progress bar per phase of the run (its line ended when the run
// ends its last phase, before the call returns).
RunOptions CommandRun(std::string_view command, bool show_progress, int jobs);

// The exit code of a failed command call, after its one error line (ReportError): 1 when
// the output it wrote did not verify (check id output.mismatch: nothing was published).
int ReportWriteError(std::string_view command, const absl::Status& s);

// Terminal columns `s` takes: glibc's wcwidth of each UTF-8 character under C.UTF-8 (CJK
// and emoji 2, combining marks 0); a byte that is not UTF-8 counts 1.
size_t DisplayWidth(std::string_view s);

// `s` followed by spaces up to `width` display columns (table cells with non-ASCII names).
std::string PadRight(std::string_view s, size_t width);

}  // namespace tfckpt::cli
