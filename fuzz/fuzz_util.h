// Shared by the fuzz targets: a private scratch directory and whole-file writes, for
// parsers whose entry point is a path (they map the file, as on real input).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tfckpt/run.h"
#include "tfckpt/storage.h"

namespace tfckpt::fuzz {

// Every fuzz target is hermetic: an input that names s3://… or gs://… (a state file, a
// CKPT path) gets an error, never a request over the network: the target's calls (on the
// one thread that calls LLVMFuzzerTestOneInput, and the threads they start) run in a
// context whose object stores refuse every path (RunOptions::stores, run.h).
inline const RunContext kHermetic(RunOptions{.stores = {{"s3", NewRefusingStorage()}, {"gs", NewRefusingStorage()}}});
inline const RunContext::Scope kHermeticScope(kHermetic);

// A directory of this process, created on first use, e.g. /tmp/tfckpt-fuzz-1234, and
// removed with what it holds when the process exits normally (a crash leaves it for a look).
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = "/tmp/tfckpt-fuzz-" + std::to_string(::getpid());
    std::string cmd = "mkdir -p " + d;
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d;
  }();
  // Registered once `dir` is complete, so it runs before `dir` is destroyed.
  [[maybe_unused]] static const bool cleanup = std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }) == 0;
  return dir;
}

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Splits `data` at the first occurrence of `sep` (the rest is empty when absent).
inline std::pair<std::string_view, std::string_view> SplitOnce(std::string_view data, char sep) {
  size_t at = data.find(sep);
  if (at == std::string_view::npos) return {data, {}};
  return {data.substr(0, at), data.substr(at + 1)};
}

}  // namespace tfckpt::fuzz
