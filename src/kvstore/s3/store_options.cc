#include "kvstore/s3/store_options.h"

#include <atomic>

#include "run/run.h"

namespace tfckpt {
namespace {

std::atomic<bool> disabled{false};

}  // namespace

void DisableObjectStores() { disabled = true; }

namespace s3 {

bool ObjectStoresDisabled() { return disabled; }

ObjectStoreOptions CurrentObjectStoreOptions() {
  const Run* run = CurrentRun();
  return run != nullptr ? run->object_store() : ObjectStoreOptions{};
}

void ReportRetry(const std::string& line) {
  if (const Run* run = CurrentRun()) run->Note(line);
}

}  // namespace s3
}  // namespace tfckpt
