// What the object store code reads of the run it works for (run/run.h: the caller's object
// store options, its notes).
#pragma once

#include <string>

#include "tfckpt/run.h"
#include "tfckpt/storage.h"

namespace tfckpt::s3 {

// The current run's object store options (none outside a run).
ObjectStoreOptions CurrentObjectStoreOptions();

// Tells the current run `line` (RunOptions::note): a burst of retries.
void ReportRetry(const std::string& line);

}  // namespace tfckpt::s3
