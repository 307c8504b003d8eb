#include "kvstore/s3/retry_bursts.h"

#include "tfckpt/strings.h"

namespace tfckpt::s3 {

std::string RetryNotice::Line() const {
  return StrCat(status.message(), "; retrying (up to ", max_retries, max_retries == 1 ? " time)" : " times)");
}

RetryBursts::Request::~Request() {
  if (!counted_) return;
  std::lock_guard<std::mutex> lock(bursts_->mu_);
  --bursts_->retrying_;
}

void RetryBursts::Request::Retrying(const RetryNotice& notice) {
  if (counted_) return;
  counted_ = true;
  bool starts = false;
  {
    std::lock_guard<std::mutex> lock(bursts_->mu_);
    starts = bursts_->retrying_++ == 0;
    if (starts) ++bursts_->bursts_;
  }
  if (starts && bursts_->report_) bursts_->report_(notice);
}

int RetryBursts::bursts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bursts_;
}

}  // namespace tfckpt::s3
