// doctest entry point shared by the test executables. Tests that read the real
// checkpoints find them through TFCKPT_TESTDATA (set by meson). When that directory is
// missing the executable is skipped (exit 77), except under CI=true, where it fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "test_util.h"

int main(int argc, char** argv) {
  if (tfckpt::testing::NeedsTestData()) {
    const std::string dir = tfckpt::testing::TestDataDir();
    if (dir.empty()) {
      const char* ci = std::getenv("CI");
      if (ci != nullptr && std::strcmp(ci, "true") == 0) {
        std::cerr << "FAIL: ../shared/testdata/tf is missing (TFCKPT_TESTDATA unset or not a directory)\n";
        return 1;
      }
      std::cerr << "SKIP: ../shared/testdata/tf is missing\n";
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
