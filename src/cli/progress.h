// A progress line on stderr for long-running writes: shown only when stderr is a
// terminal and the work has taken more than a second.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace tfckpt::cli {

class Progress {
 public:
  // `total` bytes of work; `enabled` false (--quiet) shows nothing.
  Progress(uint64_t total, bool enabled);
  ~Progress();  // stops the display and ends its line

  std::atomic<uint64_t>* counter() { return &done_; }

 private:
  void Run();
  void Draw(double seconds, bool final);

  uint64_t total_;
  double delay_ = 1.0;  // seconds before the bar shows
  std::atomic<uint64_t> done_{0};
  bool shown_ = false;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tfckpt::cli
