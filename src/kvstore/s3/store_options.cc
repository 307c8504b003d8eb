#include "kvstore/s3/store_options.h"

#include "run/run.h"

namespace tfckpt {
namespace s3 {

ObjectStoreOptions CurrentObjectStoreOptions() {
  const Run* run = CurrentRun();
  return run != nullptr ? run->object_store() : ObjectStoreOptions{};
}

void ReportRetry(const std::string& line) {
  if (const Run* run = CurrentRun()) run->Note(line);
}

}  // namespace s3
}  // namespace tfckpt
