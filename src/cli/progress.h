// A progress line on stderr for long-running work, naming its phase ("copying   [###   ]
// 1.0 MiB / 2.0 MiB ..."): shown only when stderr is a terminal and the phase has taken
// more than a second.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace tfckpt::cli {

class Progress {
 public:
  // `total` bytes of work in the phase `phase` ("copying", "verifying"), of which `done`
  // (the run's counter, RunOptions::progress) are done; `enabled` false (--quiet) shows
  // nothing.
  Progress(uint64_t total, bool enabled, std::string_view phase, const std::atomic<uint64_t>* done);
  ~Progress();  // stops the display and ends its line

 private:
  void Run();
  void Draw(double seconds, bool final);

  uint64_t total_;
  std::string phase_;
  double delay_ = 1.0;  // seconds before the bar shows
  const std::atomic<uint64_t>* done_;
  bool shown_ = false;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tfckpt::cli
