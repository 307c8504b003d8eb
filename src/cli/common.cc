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

void PrintTransfer(const TransferReport& t) {
  if (!t.object_store) return;
  std::cout << "transfer: " << HumanBytes(t.copied_in_store) << " copied inside the store, " << HumanBytes(t.uploaded)
            << " uploaded, " << HumanBytes(t.downloaded) << " downloaded\n";
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

RunOptions CommandRun(std::string_view command, bool show_progress) {
  RunOptions o;
  o.stop = InterruptToken();
  TestHooksFromEnvironment(&o);
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
