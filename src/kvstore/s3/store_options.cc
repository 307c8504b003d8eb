#include "kvstore/s3/store_options.h"

#include <atomic>
#include <mutex>

namespace tfckpt {
namespace {

std::mutex mu;
ObjectStoreFlags& Flags() {
  static auto* flags = new ObjectStoreFlags();  // never destroyed: read until exit
  return *flags;
}
std::shared_ptr<const std::function<void(const std::string&)>>& Reporter() {
  static auto* reporter = new std::shared_ptr<const std::function<void(const std::string&)>>();
  return *reporter;
}
std::atomic<bool> disabled{false};

}  // namespace

void SetObjectStoreFlags(const ObjectStoreFlags& flags) {
  std::lock_guard<std::mutex> lock(mu);
  Flags() = flags;
}

ObjectStoreFlags GetObjectStoreFlags() {
  std::lock_guard<std::mutex> lock(mu);
  return Flags();
}

void SetObjectStoreRetryReporter(std::function<void(const std::string& line)> reporter) {
  std::lock_guard<std::mutex> lock(mu);
  Reporter() = reporter ? std::make_shared<const std::function<void(const std::string&)>>(std::move(reporter)) : nullptr;
}

void DisableObjectStores() { disabled = true; }

namespace s3 {

bool ObjectStoresDisabled() { return disabled; }

void ReportRetry(const std::string& line) {
  std::shared_ptr<const std::function<void(const std::string&)>> reporter;
  {
    std::lock_guard<std::mutex> lock(mu);
    reporter = Reporter();
  }
  if (reporter) (*reporter)(line);
}

}  // namespace s3
}  // namespace tfckpt
