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
#include "tfckpt/verify.h"

namespace tfckpt::cli {

// Documented in man/tfckpt.1; the same for every subcommand.
enum ExitCode : int {
  kExitOk = 0,           // success
  kExitCheckFailed = 1,  // the command ran and a check failed
  kExitUsage = 2,        // bad arguments, refused request
  kExitBadInput = 3,     // unreadable or corrupt input, I/O failure
};

// The exit code for a failed library call.
int ExitCodeFor(const absl::Status& s);

// Prints "tfckpt COMMAND: error: MESSAGE" on one line to stderr and returns the exit code.
// With --json (see SetJsonOutput), also prints the error document on stdout unless the
// command already printed its document: {"ok": false, "error": ErrorJson(s)}.
int ReportError(std::string_view command, const absl::Status& s);

// --json was asked for. RunTfckpt sets this from argv before parsing, so that usage
// errors of every command also answer with a JSON document.
void SetJsonOutput(bool on);
bool JsonOutput();

// The "error" object of the JSON documents (man tfckpt): {"id", "message", "file", "key",
// "offset"}, null for the parts the error does not know. "id" is the check id the library
// attached, else one derived from the status code (ErrorId).
nlohmann::ordered_json ErrorJson(const absl::Status& s);
// REQUIRES: !s.ok().
std::string ErrorId(const absl::Status& s);

// Prints a command's one JSON document on stdout, with "ok" as its first field (true
// unless given; a field "ok" already in `doc` is replaced). ReportError prints no second
// document after it.
void PrintJson(const nlohmann::ordered_json& doc, bool ok = true);
// The text PrintJson prints (with its newline).
std::string JsonDocument(const nlohmann::ordered_json& doc, bool ok = true);
// For documents printed by hand (streamed): tells ReportError a document is out.
void NoteJsonPrinted();

// Adds "-j,--jobs N" to `sub`, the same in every command: a whole number of threads,
// 0 (the default) meaning one per core; anything else is a usage error with one message.
CLI::Option* AddJobsOption(CLI::App* sub, int* jobs, const std::string& help);

// Adds "--connections N" to `sub`, the same in every command that reads checkpoints:
// concurrent transfers of each object store read (SetObjectStoreConnections), 1 to 256.
// Adds the object store options with it (AddObjectStoreOptions): every command that
// takes --connections takes them too.
CLI::Option* AddConnectionsOption(CLI::App* sub);

// The object store options, spelled as the AWS CLI spells them (man tfckpt, OBJECT
// STORES), passed to the library's settings (SetObjectStoreFlags, storage.h):
//   --endpoint-url URL   s3:// endpoint (overrides AWS_ENDPOINT_URL_S3 and the config files)
//   --profile NAME       AWS profile (the environment's AWS_ACCESS_KEY_ID is then not used)
//   --region REGION      AWS region
//   --no-sign-request    unsigned requests (public buckets), s3:// and gs://
// When `sub` runs, the flags start empty and each burst of object store retries prints
// one line on stderr, "tfckpt COMMAND: GET s3://…: HTTP 503 …; retrying (up to N times)"
// (SetObjectStoreRetryReporter; on a terminal it first clears a progress line).
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

// Keeps `object` alive until the process exits and never destroys it: a CLI run ends
// right after, and tearing down large parsed checkpoints only costs time.
void KeepUntilExit(std::shared_ptr<const void> object);
// Destroys what KeepUntilExit kept: for callers that run commands in-process and go on
// (the Python package).
void ReleaseKept();

// Verifies an output a command just wrote against its sources (VerifyWritten, which
// removes an output that fails): kExitOk when it verified; otherwise prints the one error
// line and returns the exit code (1 for a mismatch, else that of the error).
int VerifyOutput(std::string_view command, const std::string& out, const std::vector<std::string>& files,
                 const std::vector<VerifySource>& sources, const VerifyOptions& options);

// The same check before the commit (a writer's BeforeCommit, bundle_writer.h): the TF
// bundle at `out` read through `written`, with a "verifying" progress line of `total`
// bytes when `show_progress` (after ending the line of `*copying`, when there is one).
// Sets *verified when it held; its error becomes the writer's (ReportWriteError).
absl::Status VerifyBeforeCommit(const std::string& out, const WrittenOutput& written,
                                const std::vector<VerifySource>& sources, VerifyOptions options, uint64_t total,
                                bool show_progress, std::unique_ptr<Progress>* copying, bool* verified);
// Prints the error line of a write that failed and returns its exit code: 1 when its
// verification before the commit found a mismatch, else ReportError's.
int ReportWriteError(std::string_view command, const absl::Status& s);

// -o of reshard, merge and convert: refuses a directory (OUT/, ., .., an existing
// directory; the output needs a name) and, for TensorFlow prefixes (`tf_prefix`), takes
// OUT.index as the prefix OUT, as CKPT does (an object URL likewise: a key ending in "/"
// or with objects under "KEY/" is a directory). InvalidArgument naming the option; for a
// URL, first the store's CheckAccess error (storage.h) when it cannot be reached.
absl::StatusOr<std::string> OutputName(std::string_view option, const std::string& out, bool tf_prefix);

// True when `s` is valid UTF-8.
bool IsValidUtf8(std::string_view s);

// Terminal columns `s` takes: glibc's wcwidth of each UTF-8 character under C.UTF-8 (CJK
// and emoji 2, combining marks 0); a byte that is not UTF-8 counts 1.
size_t DisplayWidth(std::string_view s);

// `s` followed by spaces up to `width` display columns (table cells with non-ASCII names).
std::string PadRight(std::string_view s, size_t width);

}  // namespace tfckpt::cli
