// Tests that read ../shared/datasets: without it they skip on a developer's
// machine, but fail under CI=true, where a missing dataset means the suite
// would silently test less than it claims.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace gnnrt::testing {

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace gnnrt::testing

// Use at the top of a test body: `dir` must hold a NumPy dataset folder.
#define GNNRT_REQUIRE_DATASET(dir)                                                            \
  do {                                                                                        \
    if (!std::filesystem::exists(std::filesystem::path(dir) / "x.npy")) {                     \
      if (::gnnrt::testing::in_ci()) {                                                        \
        FAIL() << (dir) << " is missing, and CI=true: the datasets are required in CI";       \
      }                                                                                       \
      GTEST_SKIP() << (dir) << " is not present";                                             \
    }                                                                                         \
  } while (false)
