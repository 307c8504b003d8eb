// The process-wide object store options storage.h lets a program set (the command line's
// flags, the retry reporter, DisableObjectStores), as the object store code reads them.
#pragma once

#include <string>

#include "tfckpt/storage.h"

namespace tfckpt::s3 {

// True after DisableObjectStores().
bool ObjectStoresDisabled();

// Hands `line` to the reporter SetObjectStoreRetryReporter set, if any.
void ReportRetry(const std::string& line);

}  // namespace tfckpt::s3
