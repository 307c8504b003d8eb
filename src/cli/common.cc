#include "common.h"

#include <locale.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cwchar>
#include <iostream>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "tfckpt/run.h"
#include "tfckpt/storage.h"
#include "tfckpt/status.h"
#include "interrupts.h"
#include "tfckpt/commands.h"
#include "tfckpt/strings.h"
#include "absl/strings/str_format.h"

namespace tfckpt::cli {

size_t DisplayWidth(std::string_view s) {
  // glibc's own table (the terminal's libc agrees with it) rather than one of our own; C.UTF-8
  // is built into glibc, and uselocale changes this thread only.
  static const locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", nullptr);
  if (utf8 == nullptr) return s.size();
  const locale_t previous = uselocale(utf8);
  std::mbstate_t state{};
  size_t width = 0;
  for (size_t i = 0; i < s.size();) {
    wchar_t wc;
    const size_t n = std::mbrtowc(&wc, s.data() + i, s.size() - i, &state);
    if (n == static_cast<size_t>(-1) || n == static_cast<size_t>(-2)) {
      state = {};
      ++width;
      ++i;
      continue;
    }
    const int w = ::wcwidth(wc);
    width += w < 0 ? 1 : static_cast<size_t>(w);
    i += n == 0 ? 1 : n;
  }
  uselocale(previous);
  return width;
}

std::string PadRight(std::string_view s, size_t width) {
  std::string out(s);
  const size_t w = DisplayWidth(s);
  if (w < width) out.append(width - w, ' ');
  return out;
}

int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
      return kExitUsage;
    default:
      return kExitBadInput;
  }
}

namespace {

bool json_output = false;
bool json_printed = false;

std::string OneLine(std::string_view text) {
  std::string msg(text);
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  return msg;
}

}  // namespace

void SetJsonOutput(bool on) {
  json_output = on;
  json_printed = false;
}
bool JsonOutput() { return json_output; }
void NoteJsonPrinted() { json_printed = true; }

void PrintJson(std::string_view document) {
  std::cout << document << std::flush;
  NoteJsonPrinted();
}

int ReportInterrupted(std::string_view command, std::string_view detail) {
  const absl::Status s = absl::CancelledError(StrCat("interrupted", detail));
  std::cerr << "tfckpt " << command << ": " << OneLine(SV(s.message())) << std::endl;
  if (json_output && !json_printed) PrintJson(ErrorDocument(s));
  return 128 + InterruptSignal();
}

int ReportError(std::string_view command, const absl::Status& s) {
  // A run asked to stop ends with whatever error its unwinding gave: it was interrupted.
  if (InterruptSignal() != 0) {
    // (What its clean-up could not remove is still said: LeftBehindError, run/run.h.)
    const std::string_view message = SV(s.message());
    const size_t left = message.find(kLeftBehindMarker);
    return ReportInterrupted(command, left == std::string_view::npos ? "" : message.substr(left));
  }
  std::cerr << "tfckpt" << (command.empty() ? "" : " ") << command << ": error: " << OneLine(SV(s.message()))
            << std::endl;
  if (json_output && !json_printed) PrintJson(ErrorDocument(s));
  return ExitCodeFor(s);
}

CLI::Validator WholeNumber(int64_t lo, int64_t hi) {
  const std::string range = hi == INT64_MAX ? StrCat(">= ", lo) : StrCat("from ", lo, " to ", hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        int64_t v = 0;
        if (absl::SimpleAtoi(text, &v) && v >= lo && v <= hi) return "";
        return StrCat(text, ": not a whole number ", range);
      },
      "", "");
}

namespace {
int connections = 0;              // --connections (0: not given)
ObjectStoreOptions object_store;  // --endpoint-url, --profile, --region, --no-sign-request
}  // namespace

CLI::Option* AddConnectionsOption(CLI::App* sub) {
  CLI::Option* option = sub->add_option_function<int>("--connections", [](const int& n) { connections = n; },
                                                      "Concurrent transfers of each s3:// or gs:// read (default 8, or "
                                                      "TFCKPT_S3_CONNECTIONS), e.g. --connections 32 on a cloud VM")
                            ->check(WholeNumber(1, 256));
  AddObjectStoreOptions(sub);
  return option;
}

void AddObjectStoreOptions(CLI::App* sub) {
  const std::string group = "Object stores (s3://, gs://; man tfckpt, OBJECT STORES)";
  sub->add_option("--endpoint-url", object_store.endpoint_url,
                  "s3:// endpoint, http(s)://HOST[:PORT] (else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's, "
                  "AWS itself)")
      ->group(group);
  sub->add_option("--profile", object_store.profile,
                  "AWS profile of ~/.aws/config and ~/.aws/credentials (else AWS_PROFILE); AWS_ACCESS_KEY_ID is then "
                  "not used")
      ->group(group);
  sub->add_option("--region", object_store.region,
                  "AWS region (else AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)")
      ->group(group);
  sub->add_flag("--no-sign-request", object_store.no_sign_request,
                "Send s3:// and gs:// requests unsigned (public buckets; also AWS_NO_SIGN_REQUEST=true)")
      ->group(group);
}

CLI::Option* AddJobsOption(CLI::App* sub, int* jobs, const std::string& help) {
  return sub->add_option("-j,--jobs", *jobs, StrCat(help, " (default 0: one per core)"))->check(WholeNumber(0, 1024));
}

namespace {

std::string WithDetail(std::string_view sentence, const std::string& detail) {
  return detail.empty() ? std::string(sentence) : StrCat(sentence, " (", detail, ")");
}

}  // namespace

CLI::Option* AddOutputOption(CLI::App* sub, std::string* out, const std::string& detail) {
  return sub->add_option("-o,--output", *out, StrCat("Output ", detail, "; OUT.index also names a TF prefix; not a directory; may be an s3:// or gs:// URL"));
}

CLI::Option* AddForceOption(CLI::App* sub, bool* force) {
  return sub->add_flag("--force", *force,
                       "Replace an existing output (an output that is one of the inputs is always refused)");
}

CLI::Option* AddJsonOption(CLI::App* sub, bool* json, const std::string& detail) {
  return sub->add_flag("--json", *json,
                       StrCat("One JSON document on stdout (man tfckpt-", sub->get_name(),
                              "), also on failure: {\"ok\": false, \"error\": {...}}", detail.empty() ? "" : "; ", detail));
}

CLI::Option* AddNoVerifyOption(CLI::App* sub, bool* no_verify, const std::string& detail) {
  return sub->add_flag("--no-verify", *no_verify, WithDetail("Do not verify the output", detail));
}

CLI::Option* AddQuietOption(CLI::App* sub, bool* quiet, const std::string& detail) {
  return sub->add_flag("-q,--quiet", *quiet,
                       StrCat("No progress bar (on a terminal it appears when the work takes more than a second",
                              detail.empty() ? "" : "; ", detail, ")"));
}

CLI::Option* AddServerSideOption(CLI::App* sub, ServerSideCopy* mode) {
  return sub
      ->add_option_function<std::string>(
          "--server-side", [mode](const std::string& m) { *mode = ParseServerSide(m).value_or(ServerSideCopy::kAuto); },
          "Bytes that move unchanged between objects of one s3:// store (same endpoint and credentials) are "
          "copied inside it (UploadPartCopy), not through this machine: auto (default; client-side where it "
          "cannot, or when the store refuses: a note), never, always (an error when it cannot). gs:// is "
          "always client-side")
      ->check(CLI::IsMember({"auto", "never", "always"}));
}

void PrintTransfer(const TransferReport& t) {
  if (!t.object_store) return;
  std::cout << "transfer: " << HumanBytes(t.copied_in_store) << " copied inside the store, " << HumanBytes(t.uploaded)
            << " uploaded, " << HumanBytes(t.downloaded) << " downloaded\n";
}

CLI::Option* AddDryRunOption(CLI::App* sub, bool* dry_run, const std::string& detail) {
  return sub->add_flag("--dry-run", *dry_run, WithDetail("Print the plan and write nothing", detail));
}

void AddNameRuleOptions(CLI::App* sub, std::vector<std::string>* include, std::vector<std::string>* exclude,
                        std::vector<std::string>* renames, const std::string& group) {
  CLI::Option* options[] = {
      sub->add_option("--include", *include,
                      "Keep only tensors whose name contains a match of REGEX (RE2 syntax; repeatable, any may match)"),
      sub->add_option("--exclude", *exclude, "Drop tensors whose name contains a match of REGEX (repeatable)"),
      sub->add_option("--rename", *renames,
                      "REGEX=REPLACEMENT on tensor names, every match replaced ($1..$9 groups, $& the match, $$ a "
                      "dollar; '=' in REGEX written '\\='); repeatable, applied in order"),
  };
  if (group.empty()) return;
  for (CLI::Option* o : options) o->group(group);
}

void Warn(std::string_view command, std::string_view message) {
  std::cerr << "tfckpt " << command << ": warning: " << message << std::endl;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[u]);
}

namespace {

// The progress bar of the phase under way (RunOptions::progress), from any thread.
std::mutex progress_mu;
std::unique_ptr<Progress> progress;

}  // namespace

RunOptions CommandRun(std::string_view command, bool show_progress, int jobs) {
  RunOptions o;
  o.stop = InterruptToken();
  TestHooksFromEnvironment(&o);
  o.jobs = jobs;
  o.connections = connections;
  o.object_store = object_store;
  // Notes (a burst of object store retries) one line each on stderr, TTY or not; on a
  // terminal the progress line is cleared first; one write, so lines never interleave.
  o.note = [name = std::string(command), tty = ::isatty(STDERR_FILENO) == 1](std::string_view line) {
    const std::string text = StrCat(tty ? "\r\033[K" : "", "tfckpt ", name, ": ", line, "\n");
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  };
  if (show_progress) {
    o.progress = [](std::string_view phase, uint64_t total, const std::atomic<uint64_t>* done) {
      std::lock_guard<std::mutex> lock(progress_mu);
      progress.reset();  // (ends the line of the phase before; its counter goes after this call)
      if (done != nullptr) progress = std::make_unique<Progress>(total, true, phase, done);
    };
  }
  return o;
}

int ReportWriteError(std::string_view command, const absl::Status& s) {
  const int code = ReportError(command, s);
  if (InterruptSignal() != 0) return code;
  return ErrorInfoOf(s).check == "output.mismatch" ? kExitCheckFailed : code;
}

}  // namespace tfckpt::cli
