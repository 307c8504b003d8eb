// Reports retries by bursts: a burst starts when a request of a client fails and is
// retried while no other request of that client is being retried, and ends when no
// request is being retried any more. Each start is reported once (ClientOptions::
// on_retry_burst), so that many requests failing together (a 503 storm, an endpoint
// restarting) make one line, not one per request and attempt.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace tfckpt::s3 {

struct RetryNotice {
  absl::Status status;  // the failure that starts the burst (names the request and URL)
  int max_retries = 0;  // the retries each request may make
  // "GET s3://bkt/k: HTTP 503 SlowDown: …; retrying (up to 10 times)".
  std::string Line() const;
};

class RetryBursts {
 public:
  // REQUIRES: `report` (may be empty) is thread-safe.
  explicit RetryBursts(std::function<void(const RetryNotice&)> report) : report_(std::move(report)) {}

  // One request, from its first attempt to its outcome.
  class Request {
   public:
    explicit Request(RetryBursts* bursts) : bursts_(bursts) {}
    ~Request();
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;
    // Before each wait for a retry of this request.
    void Retrying(const RetryNotice& notice);

   private:
    RetryBursts* bursts_;
    bool counted_ = false;
  };

  // Bursts started so far (tests).
  int bursts() const;

 private:
  std::function<void(const RetryNotice&)> report_;
  mutable std::mutex mu_;
  int retrying_ = 0;  // requests between a retryable failure and their outcome
  int bursts_ = 0;
};

}  // namespace tfckpt::s3
