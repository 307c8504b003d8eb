#include "progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common.h"

namespace tfckpt::cli {

Progress::Progress(uint64_t total, bool enabled, std::string_view phase, const std::atomic<uint64_t>* done)
    : total_(total), phase_(phase), done_(done), start_(std::chrono::steady_clock::now()) {
  // TFCKPT_PROGRESS_DELAY_MS (default 1000): how long the work runs before the bar shows.
  if (const char* d = std::getenv("TFCKPT_PROGRESS_DELAY_MS")) delay_ = std::atof(d) / 1000.0;
  if (enabled && ::isatty(STDERR_FILENO)) thread_ = std::thread([this] { Run(); });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Progress::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(delay_ < 0.2 ? 10 : 200), [this] { return stop_; })) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (t >= delay_) Draw(t, false);
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (shown_ || t >= delay_) Draw(t, true);
}

void Progress::Draw(double seconds, bool final) {
  shown_ = true;
  const uint64_t done = std::min(done_->load(), total_);
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int width = 30, filled = static_cast<int>(frac * width);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  std::fprintf(stderr, "\r%-9s [%s%s] %s / %s  %s/s  ETA %.0fs   ", phase_.c_str(), std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), HumanBytes(done).c_str(), HumanBytes(total_).c_str(),
               HumanBytes(static_cast<uint64_t>(rate)).c_str(), eta);
  if (final) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace tfckpt::cli
