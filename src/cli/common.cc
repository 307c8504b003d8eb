#include "common.h"

#include <locale.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cwchar>
#include <iostream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "tfckpt/path.h"
#include "tfckpt/storage.h"
#include "tfckpt/status.h"
#include "tfckpt/file.h"
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
void NoteJsonPrinted() {
  json_printed = true;
  SetInterruptDocument("");  // stdout has (the start of) a document: an interrupt adds none
}

std::string ErrorId(const absl::Status& s) {
  const ErrorInfo e = ErrorInfoOf(s);
  if (!e.check.empty()) return e.check;
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return "usage";
    case absl::StatusCode::kAlreadyExists: return "exists";
    case absl::StatusCode::kNotFound: return "not-found";
    case absl::StatusCode::kPermissionDenied: return "permission-denied";
    case absl::StatusCode::kResourceExhausted: return "no-space";
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOutOfRange: return "corrupt";
    case absl::StatusCode::kFailedPrecondition: return "unsupported";
    case absl::StatusCode::kCancelled: return "interrupted";
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown: return "internal";
    default: return "io";
  }
}

nlohmann::ordered_json ErrorJson(const absl::Status& s) {
  const ErrorInfo e = ErrorInfoOf(s);
  auto opt = [](const std::string& v) -> nlohmann::ordered_json { return v.empty() ? nullptr : nlohmann::ordered_json(v); };
  return {{"id", ErrorId(s)},
          {"message", OneLine(SV(s.message()))},
          {"file", opt(e.file)},
          {"key", opt(e.key)},
          {"offset", e.offset >= 0 ? nlohmann::ordered_json(e.offset) : nlohmann::ordered_json(nullptr)}};
}

std::string JsonDocument(const nlohmann::ordered_json& doc, bool ok) {
  nlohmann::ordered_json out{{"ok", ok}};
  for (const auto& [key, value] : doc.items()) {
    if (key != "ok") out[key] = value;
  }
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void PrintJson(const nlohmann::ordered_json& doc, bool ok) {
  std::cout << JsonDocument(doc, ok) << std::flush;
  NoteJsonPrinted();
}

int ReportError(std::string_view command, const absl::Status& s) {
  std::cerr << "tfckpt" << (command.empty() ? "" : " ") << command << ": error: " << OneLine(SV(s.message()))
            << std::endl;
  if (json_output && !json_printed) PrintJson({{"error", ErrorJson(s)}}, false);
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

CLI::Option* AddConnectionsOption(CLI::App* sub) {
  CLI::Option* option =
      sub->add_option_function<int>("--connections", [](const int& n) { SetObjectStoreConnections(n); },
                                    "Concurrent transfers of each s3:// or gs:// read (default 8, or "
                                    "TFCKPT_S3_CONNECTIONS), e.g. --connections 32 on a cloud VM")
          ->check(WholeNumber(1, 256));
  AddObjectStoreOptions(sub);
  return option;
}

void AddObjectStoreOptions(CLI::App* sub) {
  const std::string group = "Object stores (s3://, gs://; man tfckpt, OBJECT STORES)";
  auto set = [](auto field) {
    return [field](const std::string& value) {
      ObjectStoreFlags flags = GetObjectStoreFlags();
      flags.*field = value;
      SetObjectStoreFlags(flags);
    };
  };
  sub->add_option_function<std::string>("--endpoint-url", set(&ObjectStoreFlags::endpoint_url),
                                        "s3:// endpoint, http(s)://HOST[:PORT] (else AWS_ENDPOINT_URL_S3, "
                                        "AWS_ENDPOINT_URL, the profile's, AWS itself)")
      ->group(group);
  sub->add_option_function<std::string>("--profile", set(&ObjectStoreFlags::profile),
                                        "AWS profile of ~/.aws/config and ~/.aws/credentials (else AWS_PROFILE); "
                                        "AWS_ACCESS_KEY_ID is then not used")
      ->group(group);
  sub->add_option_function<std::string>("--region", set(&ObjectStoreFlags::region),
                                        "AWS region (else AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1)")
      ->group(group);
  sub->add_flag_function(
         "--no-sign-request",
         [](int64_t) {
           ObjectStoreFlags flags = GetObjectStoreFlags();
           flags.no_sign_request = true;
           SetObjectStoreFlags(flags);
         },
         "Send s3:// and gs:// requests unsigned (public buckets; also AWS_NO_SIGN_REQUEST=true)")
      ->group(group);
  // Before the command's own options: a run starts without flags of an earlier one (the
  // Python package runs commands in one process) and reports its retries under its name.
  sub->preparse_callback([name = sub->get_name()](size_t) {
    SetObjectStoreFlags({});
    SetObjectStoreRetryReporter([name, tty = isatty(STDERR_FILENO) == 1](const std::string& line) {
      // One write, so that lines of several threads do not interleave.
      const std::string text = StrCat(tty ? "\r\033[K" : "", "tfckpt ", name, ": ", line, "\n");
      std::fwrite(text.data(), 1, text.size(), stderr);
      std::fflush(stderr);
    });
  });
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
std::vector<std::shared_ptr<const void>>& Kept() {
  static auto* kept = new std::vector<std::shared_ptr<const void>>();  // never freed
  return *kept;
}
}  // namespace

void KeepUntilExit(std::shared_ptr<const void> object) { Kept().push_back(std::move(object)); }

void ReleaseKept() { Kept().clear(); }

absl::StatusOr<std::string> OutputName(std::string_view option, const std::string& out, bool tf_prefix) {
  // An object store is asked once before any work (bucket, credentials, endpoint): a run
  // must not copy everything to find at the end that it cannot write.
  if (IsUrl(out)) {
    TFCKPT_RETURN_IF_ERROR(Storage::For(out).CheckAccess(out));
    HandleInterruptsOnOwnThread();  // (its interrupt work makes requests: file.h)
  }
  std::string name = out;
  if (tf_prefix && absl::EndsWith(name, ".index")) name.resize(name.size() - 6);
  const size_t slash = name.find_last_of('/');
  const std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
  if (base.empty() || base == "." || base == ".." || IsDirectory(name)) {
    std::string dir = name.empty() ? "." : name;
    if (!absl::EndsWith(dir, "/")) dir += "/";
    return absl::InvalidArgumentError(
        StrCat(option, " ", out, ": is a directory; give the output a name inside it (e.g. ", dir, "model)"));
  }
  return name;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c >> 5) == 6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 14) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 30) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const unsigned char cc = s[i + k];
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    const uint32_t min[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

absl::Status VerifyBeforeCommit(const std::string& out, const WrittenOutput& written,
                                const std::vector<VerifySource>& sources, VerifyOptions options, uint64_t total,
                                bool show_progress, std::unique_ptr<Progress>* copying, bool* verified) {
  if (copying != nullptr) copying->reset();
  Progress progress(total, show_progress, "verifying");
  options.progress = progress.counter();
  options.written = &written;
  TFCKPT_RETURN_IF_ERROR(VerifyWritten(out, {}, sources, options).status());
  *verified = true;
  return absl::OkStatus();
}

int ReportWriteError(std::string_view command, const absl::Status& s) {
  const int code = ReportError(command, s);
  return ErrorInfoOf(s).check == "output.mismatch" ? kExitCheckFailed : code;
}

int VerifyOutput(std::string_view command, const std::string& out, const std::vector<std::string>& files,
                 const std::vector<VerifySource>& sources, const VerifyOptions& options) {
  auto v = VerifyWritten(out, files, sources, options);
  return v.ok() ? kExitOk : ReportWriteError(command, v.status());
}

}  // namespace tfckpt::cli
