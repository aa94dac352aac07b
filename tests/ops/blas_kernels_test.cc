// ops::blas_kernels_warning: when OpenBLAS's kernel set leaves the CPU's
// AVX2 and FMA idle (Debian's 0.3.21 picks Prescott on cores it does not
// know), gnnrt says so and names the setting; otherwise it stays quiet.
#include <gtest/gtest.h>

#include <string>

#include "ops/dense.h"

namespace gnnrt::ops {
namespace {

TEST(BlasKernels, NamesTheLoadedKernelSet) { EXPECT_FALSE(blas_kernels().empty()); }

TEST(BlasKernels, WarnsWhenAnSse3SetRunsOnAnAvx2Cpu) {
  const auto warning = blas_kernels_warning("Prescott", /*avx2_fma=*/true, /*avx512=*/false);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("Prescott"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << *warning;
  EXPECT_EQ(warning->find("SkylakeX"), std::string::npos) << *warning;
}

TEST(BlasKernels, OffersTheAvx512SetWhereTheCpuHasIt) {
  const auto warning = blas_kernels_warning("Nehalem", true, true);
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("AVX-512"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("SkylakeX"), std::string::npos) << *warning;
}

TEST(BlasKernels, QuietWhenTheKernelsUseAvx2OrTheCpuLacksIt) {
  for (const char* wide : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    EXPECT_FALSE(blas_kernels_warning(wide, true, true).has_value()) << wide;
  }
  EXPECT_FALSE(blas_kernels_warning("Prescott", false, false).has_value());
}

}  // namespace
}  // namespace gnnrt::ops
