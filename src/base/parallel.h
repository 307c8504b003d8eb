// A minimal parallel loop for independent work items.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "run/run.h"

namespace tfckpt {

// The number of threads to use for `requested` (0 = number of cores).
inline int Jobs(int requested) {
  if (requested > 0) return requested;
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Runs fn(i) for every i in [0, n) on up to `jobs` threads (the caller's included), all of
// them working for the caller's run (run/run.h), all joined before it returns.
inline void ParallelFor(size_t n, int jobs, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> threads;
  const int extra = static_cast<int>(std::min<size_t>(static_cast<size_t>(jobs), n)) - 1;
  for (int t = 0; t < extra; ++t) {
    threads.push_back(StartThread(worker));
  }
  worker();
  for (auto& t : threads) t.join();
}

// Runs fn(i, stop) for every i in [0, n) like ParallelFor and returns the first error.
// After an error, items not yet started are skipped and `stop` (polled by long items
// between steps) turns true. The run stopping (run/run.h) is an error of the item that
// would start next.
inline absl::Status ParallelForStatus(size_t n, int jobs,
                                      const std::function<absl::Status(size_t, const std::atomic<bool>& stop)>& fn) {
  std::mutex mu;
  absl::Status first;
  std::atomic<bool> stop{false};
  ParallelFor(n, jobs, [&](size_t i) {
    if (stop) return;
    absl::Status s = CheckStop();
    if (s.ok()) s = fn(i, stop);
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (first.ok()) first = std::move(s);
    stop = true;
  });
  return first;
}

}  // namespace tfckpt
