#include "run/left_behind.h"

#include <algorithm>
#include <memory>
#include <mutex>

namespace tfckpt {
namespace {

struct LeftList {
  std::mutex mu;
  std::vector<std::string> names;  // guarded by mu
};

const char kKey = 0;  // the run's resource key (its address)

std::shared_ptr<LeftList> ListOf(Run& run) {
  return std::static_pointer_cast<LeftList>(
      run.Resource(&kKey, [] { return std::static_pointer_cast<void>(std::make_shared<LeftList>()); }));
}

}  // namespace

bool NoteLeftBehind(std::string what) {
  Run* run = CurrentRun();
  if (run == nullptr) return false;
  std::shared_ptr<LeftList> list = ListOf(*run);
  std::lock_guard<std::mutex> lock(list->mu);
  if (std::find(list->names.begin(), list->names.end(), what) == list->names.end()) {
    list->names.push_back(std::move(what));
  }
  return true;
}

std::vector<std::string> LeftBehind(Run& run) {
  std::shared_ptr<LeftList> list = ListOf(run);
  std::lock_guard<std::mutex> lock(list->mu);
  return list->names;
}

absl::Status WithLeftBehind(const absl::Status& s, Run& run) {
  if (s.ok()) return s;
  const std::vector<std::string> left = LeftBehind(run);
  if (left.empty()) return s;
  std::string message(s.message());
  message += kLeftBehindMarker;
  for (size_t i = 0; i < left.size() && i < kShownLeftBehind; ++i) {
    if (i > 0) message += ", ";
    message += left[i];
  }
  if (left.size() > kShownLeftBehind) message += " and " + std::to_string(left.size() - kShownLeftBehind) + " more";
  absl::Status out(s.code(), message);
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace tfckpt
