#include "interrupts.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>

namespace tfckpt::cli {
namespace {

std::stop_source g_stop;  // (the process's one command line)
std::atomic<bool> g_installed{false};
std::atomic<int> g_signal{0};
// The line a second signal writes: set before the run starts, read by the signal thread.
char g_line[160] = "tfckpt: interrupted\n";
std::atomic<size_t> g_line_size{std::strlen(g_line)};

void TakeSignals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) != 0) continue;
    int none = 0;
    if (g_signal.compare_exchange_strong(none, sig)) {
      g_stop.request_stop();  // the run unwinds; the command exits 128 + sig
      continue;
    }
    // A second signal: the user will not wait for the run to unwind.
    (void)!::write(STDERR_FILENO, g_line, g_line_size.load());
    ::_exit(128 + g_signal.load());
  }
}

}  // namespace

void InstallInterruptHandling() {
  if (g_installed.exchange(true)) return;
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) sigaddset(&set, sig);  // an ignored one stays ignored
  }
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(TakeSignals, set).detach();  // (lives until the process ends; touches no library state)
}

std::stop_token InterruptToken() { return g_installed.load() ? g_stop.get_token() : std::stop_token(); }

int InterruptSignal() { return g_signal.load(); }

void SetInterruptedCommand(std::string_view command) {
  const std::string line = "tfckpt " + std::string(command) + ": interrupted again: exiting at once\n";
  const size_t n = std::min(line.size(), sizeof(g_line));
  std::memcpy(g_line, line.data(), n);
  g_line_size = n;
}

}  // namespace tfckpt::cli
