// What a run's clean-up could not remove (docs/RELIABILITY.md): undo work whose removal
// fails (an object store refusing DELETE: credentials without s3:DeleteObject) names what it
// leaves, and the run's error says so instead of leaving it silently.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "run/run.h"
#include "tfckpt/status.h"

namespace tfckpt {

// Notes `what` (a URL, a path) as left behind by the current run's clean-up; false outside
// a run (nobody to tell). Thread-safe; a name noted twice is listed once.
bool NoteLeftBehind(std::string what);

// What `run`'s clean-up noted, in the order noted.
std::vector<std::string> LeftBehind(Run& run);

// The first kShownLeftBehind names are listed, then a count.
inline constexpr size_t kShownLeftBehind = 8;

// `s` (an error, or the stopped error) with what `run`'s clean-up left behind added to its
// message: "MESSAGE; left behind (could not be removed): URL, URL, ... and N more"; its code
// and payloads kept. `s` itself when it is OK or nothing was left behind.
absl::Status WithLeftBehind(const absl::Status& s, Run& run);

// (The text WithLeftBehind adds begins with kLeftBehindMarker, tfckpt/status.h.)

}  // namespace tfckpt
