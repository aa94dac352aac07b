// ops::blas_kernels and blas_kernels_warning: when OpenBLAS's kernel set
// leaves the CPU's AVX2 and FMA idle (Debian's 0.3.21 picks Prescott on
// some AVX-512 CPUs: docs/benchmarks.md), gnnrt says so and names the
// setting; otherwise it stays quiet.
#include <gtest/gtest.h>

#include <string>

#include "ops/dense.h"

namespace gnnrt::ops {
namespace {

TEST(BlasKernels, NamesTheSetOpenBlasReportsInItsConfiguration) {
  // A DYNAMIC_ARCH build's configuration string names the set it picked.
  const std::string config = blas_config();
  if (config.find("DYNAMIC_ARCH") == std::string::npos) GTEST_SKIP() << config;
  std::string word = " ";
  word += blas_kernels();
  word += ' ';
  EXPECT_NE(config.find(word), std::string::npos) << blas_kernels() << " vs " << config;
}

TEST(BlasKernels, WarnsWhenAnSse3SetRunsOnAnAvx2Cpu) {
  const auto warning = blas_kernels_warning("Prescott", /*avx2_fma=*/true, /*selectable=*/true);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("Prescott"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << *warning;
}

TEST(BlasKernels, NamesNoSettingThatABuildForOneSetIgnores) {
  const auto warning = blas_kernels_warning("NEHALEM", true, /*selectable=*/false);
  ASSERT_TRUE(warning.has_value());
  EXPECT_EQ(warning->find("OPENBLAS_CORETYPE"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("DYNAMIC_ARCH"), std::string::npos) << *warning;
}

TEST(BlasKernels, QuietWhenTheKernelsUseAvx2OrTheCpuLacksIt) {
  for (const char* wide : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Excavator",
                           "HASWELL", "SKYLAKEX", "ZEN"}) {
    EXPECT_FALSE(blas_kernels_warning(wide, true, true).has_value()) << wide;
  }
  EXPECT_FALSE(blas_kernels_warning("Prescott", false, true).has_value());
}

}  // namespace
}  // namespace gnnrt::ops
