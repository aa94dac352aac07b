// `gnnrt selfcheck`: checks this build's kernels on this machine in seconds.
// Each fused kernel must give exactly the bits of the unfused composition it
// replaces (spmm = gather -> scale -> scatter, forward and backward), every
// kernel the same bits on 1 and N threads, softmax rows must sum to 1 and
// matmul must match a float64 triple loop. Prints one line per check with
// its time and effective bandwidth; returns false if any check failed.
#pragma once

#include <cstdint>

namespace gnnrt::launch {

struct SelfcheckOptions {
  int64_t edges = 1000000;
  int64_t features = 64;
  int threads = 0;  // 0: OpenMP's default
  uint64_t seed = 1;
};

bool run_selfcheck(const SelfcheckOptions& options);

}  // namespace gnnrt::launch
