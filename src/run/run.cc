#include "run/run.h"

#include <condition_variable>
#include <vector>

namespace tfckpt {
namespace {

thread_local Run* t_run = nullptr;
thread_local bool t_not_cancellable = false;

}  // namespace

absl::Status StoppedError() { return absl::CancelledError("interrupted"); }

Run::Run(RunOptions options) : options_(std::move(options)) {}

Run::~Run() {
  bool phases;
  {
    std::lock_guard<std::mutex> lock(phase_mu_);
    phases = !phases_.empty();
  }
  // (Before the counters go: RunOptions::progress.)
  if (phases && options_.progress) options_.progress({}, 0, nullptr);
  if (!done_) Undo();
}

absl::Status Run::CheckStop() const { return Stopping() ? StoppedError() : absl::OkStatus(); }

bool Run::SleepUnlessStopped(std::chrono::nanoseconds d) const {
  const auto until = std::chrono::steady_clock::now() + d;
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    if (Stopping()) return false;
    if (std::chrono::steady_clock::now() >= until) return true;
    if (StopRequested()) {
      // Past the point of no return: the stop no longer counts, the wait goes on.
      cv.wait_until(lock, until);
      return true;
    }
    cv.wait_until(lock, options_.stop, until, [] { return false; });
  }
}

std::atomic<uint64_t>* Run::StartPhase(std::string_view phase, uint64_t total) {
  std::atomic<uint64_t>* done;
  {
    std::lock_guard<std::mutex> lock(phase_mu_);
    done = &phases_.emplace_back(0);
  }
  if (options_.progress) options_.progress(phase, total, done);
  return done;
}

void Run::Note(std::string_view note) const {
  if (!options_.note) return;
  std::lock_guard<std::mutex> lock(note_mu_);
  options_.note(note);
}

absl::Status Run::Reached(std::string_view point) const {
  if (options_.at_point) options_.at_point(point);
  return CheckStop();
}

std::shared_ptr<void> Run::Resource(const void* key, const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(resources_mu_);
  std::shared_ptr<void>& r = resources_[key];
  if (!r) r = make();
  return r;
}

void Run::Forget(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  items_.erase(id);
}

uint64_t Run::OnUndo(std::function<void()> fn, UndoOrder order) {
  Item item;
  item.undo = std::move(fn);
  item.order = order;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  items_.emplace(id, std::move(item));
  return id;
}

void Run::Keep() {
  std::lock_guard<std::mutex> lock(mu_);
  items_.clear();
  done_ = true;
}

void Run::Undo() {
  std::map<uint64_t, Item> items;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items.swap(items_);
    done_ = true;
  }
  undoing_ = true;
  RunScope scope(this);
  NotCancellable requests_go_out;
  std::vector<std::thread> independent;
  for (auto& [id, item] : items) {
    if (item.undo && item.order == UndoOrder::kIndependent) independent.push_back(StartThread(std::move(item.undo)));
  }
  for (auto it = items.rbegin(); it != items.rend(); ++it) {
    if (it->second.undo && it->second.order == UndoOrder::kNewestFirst) it->second.undo();
  }
  for (std::thread& t : independent) t.join();
  undoing_ = false;
}

RunContext::RunContext(RunOptions options)
    : run_(new Run(std::move(options)), [](Run* r) {
        r->Keep();  // (reads create nothing to undo)
        delete r;
      }) {}
RunContext::~RunContext() = default;

RunContext::Scope::Scope(const RunContext& context) : scope_(std::make_unique<RunScope>(context.run_.get())) {}
RunContext::Scope::~Scope() = default;

Run* CurrentRun() { return t_run; }

RunScope::RunScope(Run* run) : previous_(t_run) { t_run = run; }
RunScope::~RunScope() { t_run = previous_; }

std::thread StartThread(std::function<void()> fn) {
  Run* run = t_run;
  std::shared_ptr<Run> keep = run != nullptr ? run->weak_from_this().lock() : nullptr;
  const bool not_cancellable = t_not_cancellable;
  return std::thread([run, keep = std::move(keep), not_cancellable, fn = std::move(fn)] {
    RunScope scope(run);
    t_not_cancellable = not_cancellable;
    fn();
  });
}

NotCancellable::NotCancellable() : previous_(t_not_cancellable) { t_not_cancellable = true; }
NotCancellable::~NotCancellable() { t_not_cancellable = previous_; }

absl::Status CheckStop() { return t_run != nullptr ? t_run->CheckStop() : absl::OkStatus(); }

bool Stopping() { return t_run != nullptr && !t_not_cancellable && t_run->Stopping(); }

bool CleaningUpAfterStop() { return t_run != nullptr && t_not_cancellable && t_run->StopRequested(); }

absl::Status Reached(std::string_view point) {
  return t_run != nullptr ? t_run->Reached(point) : absl::OkStatus();
}

uint64_t AtUndo(std::function<void()> fn, UndoOrder order) {
  return t_run != nullptr ? t_run->OnUndo(std::move(fn), order) : 0;
}

void ForgetAtUndo(uint64_t id) {
  if (t_run != nullptr) t_run->Forget(id);
}

std::atomic<uint64_t>* StartPhase(std::string_view phase, uint64_t total) {
  return t_run != nullptr ? t_run->StartPhase(phase, total) : nullptr;
}

int RunJobs() { return t_run != nullptr ? t_run->jobs() : 0; }

int64_t FlipOutputByte() { return t_run != nullptr ? t_run->flip_output_byte() : -1; }

bool SleepUnlessStopped(std::chrono::nanoseconds d) {
  if (t_run == nullptr || t_not_cancellable) {
    std::this_thread::sleep_for(d);
    return true;
  }
  return t_run->SleepUnlessStopped(d);
}

}  // namespace tfckpt
