#include "tfckpt/run.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"

namespace tfckpt {
namespace {

std::function<void(std::string_view point)> FaultHookFromEnvironment(std::stop_token stop) {
  const char* at = std::getenv("TFCKPT_FAULT_PAUSE_AT");
  if (at == nullptr || *at == '\0') return nullptr;
  std::string point = at;
  int nth = 1;
  if (const size_t hash = point.find('#'); hash != std::string::npos) {
    if (!absl::SimpleAtoi(point.substr(hash + 1), &nth) || nth < 1) nth = 1;
    point.resize(hash);
  }
  const char* until = std::getenv("TFCKPT_FAULT_PAUSE_UNTIL");
  const bool until_exit = until != nullptr && std::string_view(until) == "exit";
  int fd = -1;
  if (const char* n = std::getenv("TFCKPT_FAULT_NOTIFY_FD"); n != nullptr && !absl::SimpleAtoi(n, &fd)) fd = -1;
  struct State {
    std::mutex mu;
    int seen = 0;
  };
  auto state = std::make_shared<State>();
  return [point, nth, fd, state, stop, until_exit](std::string_view reached) {
    if (reached != point) return;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (++state->seen != nth) return;
    }
    const auto say = [fd](const std::string& line) {
      if (fd >= 0) (void)!::write(fd, line.data(), line.size());
    };
    say(point + "\n");
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
    cv.wait_until(lock, stop, deadline, [] { return false; });
    if (until_exit) {
      if (stop.stop_requested()) say("stop requested\n");
      cv.wait_until(lock, deadline, [] { return false; });
    }
  };
}

}  // namespace

bool TestHooksFromEnvironment(RunOptions* options) {
  options->at_point = FaultHookFromEnvironment(options->stop);
  uint64_t byte = 0;
  const char* flip = std::getenv("TFCKPT_FAULT_FLIP_OUTPUT_BYTE");
  options->flip_output_byte = flip != nullptr && absl::SimpleAtoi(flip, &byte) && byte < (1ull << 62)
                                  ? static_cast<int64_t>(byte) : -1;
  return options->at_point != nullptr || options->flip_output_byte >= 0;
}

}  // namespace tfckpt
