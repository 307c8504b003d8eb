// Tracking what a run creates, and the interrupt handlers (file.h).
#include "tfckpt/file.h"

#include "tfckpt/path.h"
#include "tfckpt/strings.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tfckpt/status.h"

namespace tfckpt {

absl::Status ErrnoError(std::string_view path, std::string_view what, int err) {
  std::string why = StrCat(what, ": ", std::strerror(err));
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  switch (err) {
    case ENOENT:
      code = absl::StatusCode::kNotFound;
      break;
    case ENOSPC:
    case EDQUOT:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case EFBIG:
      code = absl::StatusCode::kResourceExhausted;
      StrAppend(&why, " (no space: the file size limit is reached)");
      break;
    case EACCES:
    case EPERM:
      code = absl::StatusCode::kPermissionDenied;
      break;
  }
  return AtFile(absl::Status(code, StrCat(path, ": ", why)), path, why);
}

// ---------------------------------------------------------------------------------------
// Tracking what a run creates, and the interrupt handler (docs/RELIABILITY.md).
//
// The handler must only make async-signal-safe calls, and must not read the list while a
// thread changes it. Every change happens inside an InterruptShield, which holds the
// signals off its own thread and counts itself in `g_in_flight`; the handler first sets
// `g_exiting` (shields that start after that never return), then waits until no shield is
// open: from then on it alone reads the list, with unlink/rmdir/getdents64 and _exit.

namespace {

struct Tracked {
  uint64_t id;
  TrackKind kind;
  std::string path;  // kFilesStartingWith: the directory
  std::string name;  // kFilesStartingWith: the name prefix
};

std::mutex g_tracked_mu;                                // taken only inside shields
std::vector<Tracked>& TrackedList() {
  static auto* list = new std::vector<Tracked>();  // never destroyed: the handler may read it at exit
  return *list;
}
std::atomic<uint64_t> g_next_track_id{1};
std::atomic<int> g_in_flight{0};
std::atomic<bool> g_exiting{false};
std::atomic<bool> g_track_outputs{false};
char g_interrupt_line[160] = "tfckpt: interrupted\n";
size_t g_interrupt_line_size = std::strlen(g_interrupt_line);
char g_interrupt_document[1024];
size_t g_interrupt_document_size = 0;
thread_local int t_shield_depth = 0;
thread_local sigset_t t_shield_saved;

sigset_t InterruptSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

// Async-signal-safe: unlinks every file of `dir` whose name starts with `prefix`.
void UnlinkStartingWith(const char* dir, const char* prefix) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) static char buf[16384];
  const size_t n = std::strlen(prefix);
  for (;;) {
    const long got = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      const auto* d = reinterpret_cast<const struct dirent64*>(buf + at);
      if (std::strncmp(d->d_name, prefix, n) == 0) ::unlinkat(fd, d->d_name, 0);
      at += d->d_reclen;
    }
  }
  ::close(fd);
}

// Removes everything tracked, newest first. REQUIRES: no other thread changes the list
// (the handler after waiting, or the caller inside a shield holding g_tracked_mu).
void RemoveTrackedNoLock() {
  const std::vector<Tracked>& list = TrackedList();
  for (size_t i = list.size(); i-- > 0;) {
    const Tracked& t = list[i];
    switch (t.kind) {
      case TrackKind::kFile: ::unlink(t.path.c_str()); break;
      case TrackKind::kDirectory: ::rmdir(t.path.c_str()); break;
      case TrackKind::kFilesStartingWith: UnlinkStartingWith(t.path.c_str(), t.name.c_str()); break;
    }
  }
}

// AtInterrupt: the work, and the pipe through which the handler wakes its thread.
struct Work {
  std::function<void()> fn;
  InterruptWorkOrder order;
};
std::mutex g_work_mu;  // taken only inside shields (never by the handler)
std::map<uint64_t, Work>& InterruptWork() {
  static auto* work = new std::map<uint64_t, Work>();
  return *work;
}
std::atomic<int> g_work_pipe{-1};  // write end, once the thread runs
std::atomic<bool> g_work_done{false};
std::atomic<int> g_late_work{0};  // AtInterrupt work running on its own thread after an interrupt

// The AtInterrupt work, newest first, and none left. REQUIRES: g_work_mu held.
std::vector<Work> TakeInterruptWork() {
  std::vector<Work> todo;
  for (auto it = InterruptWork().rbegin(); it != InterruptWork().rend(); ++it) todo.push_back(std::move(it->second));
  InterruptWork().clear();
  return todo;
}

// Runs `todo` (newest first): each kIndependent item on a thread of its own, the
// kNewestFirst ones in order on this thread; returns when all are done. The threads hold
// the interrupt signals off from their first instruction (created with them blocked).
void RunWork(std::vector<Work>& todo) {
  std::vector<std::thread> threads;
  {
    const sigset_t set = InterruptSignals();
    sigset_t saved;
    ::pthread_sigmask(SIG_BLOCK, &set, &saved);
    for (Work& w : todo) {
      if (w.order == InterruptWorkOrder::kIndependent) threads.emplace_back(std::move(w.fn));
    }
    ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  }
  for (Work& w : todo) {
    if (w.order == InterruptWorkOrder::kNewestFirst) w.fn();
  }
  for (std::thread& t : threads) t.join();
}

void RunInterruptWork(int read_end) {
  HoldInterruptsInThisThread();
  char byte;
  while (::read(read_end, &byte, 1) < 0 && errno == EINTR) {
  }
  std::vector<Work> todo;
  {
    std::lock_guard<std::mutex> lock(g_work_mu);
    todo = TakeInterruptWork();
  }
  RunWork(todo);
  g_work_done = true;
}

// Async-signal-safe: wakes the AtInterrupt thread and waits for it (bounded).
void DoInterruptWork() {
  const int fd = g_work_pipe.load();
  if (fd < 0) return;
  (void)!::write(fd, "x", 1);
  for (int waited_ms = 0; (!g_work_done.load() || g_late_work.load() > 0) && waited_ms < kInterruptWorkSeconds * 1000;
       waited_ms += 10) {
    const struct timespec wait = {0, 10000000};
    ::nanosleep(&wait, nullptr);
  }
}

void OnInterrupt(int sig) {
  if (g_exiting.exchange(true)) {
    for (;;) ::pause();  // another thread is handling an interrupt and exits the process
  }
  while (g_in_flight.load() > 0) {
    const struct timespec wait = {0, 1000000};
    ::nanosleep(&wait, nullptr);
  }
  RemoveTrackedNoLock();
  DoInterruptWork();
  (void)!::write(STDERR_FILENO, g_interrupt_line, g_interrupt_line_size);
  (void)!::write(STDOUT_FILENO, g_interrupt_document, g_interrupt_document_size);
  ::_exit(128 + sig);
}

}  // namespace

InterruptShield::InterruptShield() {
  if (t_shield_depth++ > 0) return;
  const sigset_t set = InterruptSignals();
  ::pthread_sigmask(SIG_BLOCK, &set, &t_shield_saved);
  g_in_flight.fetch_add(1);
  if (g_exiting.load()) {
    g_in_flight.fetch_sub(1);
    for (;;) ::pause();  // the process is exiting: do not create anything more
  }
}

InterruptShield::~InterruptShield() {
  if (--t_shield_depth > 0) return;
  g_in_flight.fetch_sub(1);
  ::pthread_sigmask(SIG_SETMASK, &t_shield_saved, nullptr);
}

bool DropPendingInterrupts() {
  const sigset_t set = InterruptSignals();
  bool any = false;
  const struct timespec now = {0, 0};
  // Each pending signal is taken (it is blocked here, so sigtimedwait consumes it).
  while (::sigtimedwait(&set, nullptr, &now) > 0) any = true;
  // One arriving from now on would be delivered when the shield ends, after this check and
  // before the run's outputs are kept (ForgetAllCreated): the handler would remove a
  // finished output and exit 128 + SIG. The signals stay held off this thread instead
  // (the run is done; one that comes late is dropped at exit).
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&t_shield_saved, sig);
  return any;
}

bool InterruptWaitsForThisThread() { return t_shield_depth > 0 && g_exiting.load(); }

uint64_t TrackCreated(const std::string& path, TrackKind kind) {
  InterruptShield shield;
  Tracked t{g_next_track_id++, kind, path, ""};
  if (kind == TrackKind::kFilesStartingWith) {
    t.path = DirectoryOf(path);
    t.name = Basename(path);
  }
  std::lock_guard<std::mutex> lock(g_tracked_mu);
  TrackedList().push_back(std::move(t));
  return TrackedList().back().id;
}

void ForgetCreated(uint64_t id) {
  if (id == 0) return;
  InterruptShield shield;
  std::lock_guard<std::mutex> lock(g_tracked_mu);
  auto& list = TrackedList();
  for (size_t i = list.size(); i-- > 0;) {
    if (list[i].id == id) {
      list.erase(list.begin() + static_cast<ptrdiff_t>(i));
      return;
    }
  }
}

absl::Status MoveIntoPlace(const std::string& from, uint64_t from_id, const std::string& to, uint64_t* to_id_out) {
  InterruptShield shield;
  uint64_t to_id = TrackCreated(to);
  struct stat a, b;
  if (::stat(from.c_str(), &a) == 0 && ::stat(to.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    // Two links to one file (a data file linked again over the output of an earlier merge
    // of the same input): rename() would succeed doing nothing and leave `from` behind.
    if (::unlink(from.c_str()) != 0) {
      const int err = errno;
      ForgetCreated(to_id);
      return ErrnoError(from, "cannot remove (already linked as the output)", err);
    }
  } else if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    ForgetCreated(to_id);
    return ErrnoError(to, "cannot rename into place", err);
  }
  ForgetCreated(from_id);
  if (!g_track_outputs.load()) {
    ForgetCreated(to_id);
    to_id = 0;
  }
  if (to_id_out != nullptr) *to_id_out = to_id;
  return absl::OkStatus();
}

void TrackOutputsUntilDone() { g_track_outputs = true; }
bool TrackingOutputs() { return g_track_outputs.load(); }

void ForgetAllCreated() {
  InterruptShield shield;
  std::lock_guard<std::mutex> lock(g_tracked_mu);
  TrackedList().clear();
  std::lock_guard<std::mutex> work_lock(g_work_mu);
  InterruptWork().clear();
}

void RemoveAllCreated() {
  std::vector<Work> todo;
  {
    InterruptShield shield;
    std::lock_guard<std::mutex> lock(g_tracked_mu);
    RemoveTrackedNoLock();
    TrackedList().clear();
    std::lock_guard<std::mutex> work_lock(g_work_mu);
    todo = TakeInterruptWork();
  }
  RunWork(todo);  // (unlocked: network requests)
}

void SetInterruptCommand(std::string_view command) {
  InterruptShield shield;  // the handler reads the line
  const std::string line = StrCat("tfckpt ", command, ": interrupted\n");
  const size_t n = std::min(line.size(), sizeof(g_interrupt_line));
  std::memcpy(g_interrupt_line, line.data(), n);
  g_interrupt_line_size = n;
}

void SetInterruptDocument(std::string_view text) {
  InterruptShield shield;  // the handler reads the document
  const size_t n = std::min(text.size(), sizeof(g_interrupt_document));
  std::memcpy(g_interrupt_document, text.data(), n);
  g_interrupt_document_size = n;
}

std::atomic<bool> g_handlers_installed{false};

void InstallInterruptHandlers() {
  g_handlers_installed = true;
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sa.sa_mask = InterruptSignals();  // one handler at a time on a thread
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // nohup, a background job: stays ignored
    ::sigaction(sig, &sa, nullptr);
  }
}

void HandleInterruptsOnOwnThread() {
  if (!g_handlers_installed.load()) return;  // (a library user's process: its signals are its own)
  if (::getpid() != static_cast<pid_t>(::syscall(SYS_gettid))) return;  // only the main thread can
  if (t_shield_depth > 0) return;  // (a run-long shield defers interrupts to its end: keep it so)
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = InterruptSignals();
    // This thread, and every thread it creates from now on, holds the signals off; workers
    // made earlier already do (HoldInterruptsInThisThread). Ignored ones (nohup) stay ignored:
    // a blocked signal that is ignored is discarded, never waited for.
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      int sig = 0;
      while (::sigwait(&set, &sig) != 0) {
      }
      OnInterrupt(sig);  // (not in a signal handler here, but the same steps; never returns)
    }).detach();
  });
}

void HoldInterruptsInThisThread() {
  const sigset_t set = InterruptSignals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

uint64_t AtInterrupt(std::function<void()> fn, InterruptWorkOrder order) {
  static std::once_flag started;
  std::call_once(started, [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;  // then interrupts simply do not run the work
    std::thread(RunInterruptWork, fds[0]).detach();
    g_work_pipe = fds[1];
  });
  // As in an InterruptShield (the handler's helper takes the lock: never hold it into the
  // handler), except when an interrupt is already being handled: worker threads go on
  // meanwhile, and one may have just begun what `fn` undoes (an upload whose creation
  // was answered after the handler took the work). Then `fn` runs here at once, counted in
  // g_late_work before this thread leaves g_in_flight, so that the handler waits for it
  // (within its bound), and this thread stops as a shield would.
  const sigset_t set = InterruptSignals();
  sigset_t saved;
  ::pthread_sigmask(SIG_BLOCK, &set, &saved);
  g_in_flight.fetch_add(1);
  // (Inside a shield, the handler waits for this thread to leave it, and takes the work then.)
  if (t_shield_depth == 0 && g_exiting.load()) {
    g_late_work.fetch_add(1);
    g_in_flight.fetch_sub(1);
    fn();
    g_late_work.fetch_sub(1);
    for (;;) ::pause();
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(g_work_mu);
    id = g_next_track_id.fetch_add(1);
    InterruptWork().emplace(id, Work{std::move(fn), order});
  }
  g_in_flight.fetch_sub(1);
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return id;
}

void ForgetAtInterrupt(uint64_t id) {
  if (id == 0) return;
  InterruptShield shield;
  std::lock_guard<std::mutex> lock(g_work_mu);
  InterruptWork().erase(id);
}

}  // namespace tfckpt
