#include "ops/noise.h"

#include <algorithm>
#include <array>
#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/rng.h"

namespace gnnrt::ops {

template <typename T>
void normal_forward(const DropoutKey& key, int64_t cols, std::span<const int64_t> global_rows, std::span<T> out) {
  constexpr std::string_view op = "normal";
  expect_non_negative(op, "cols", cols);
  const auto rows = static_cast<int64_t>(global_rows.size());
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  for (int64_t r = 0; r < rows; ++r) {
    if (global_rows[static_cast<size_t>(r)] < 0) {
      throw OpError(op, "global_rows[" + std::to_string(r) + "] = " +
                            std::to_string(global_rows[static_cast<size_t>(r)]) + " is negative");
    }
  }
#pragma omp parallel for schedule(static) if (rows * cols > 4096)
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = static_cast<uint64_t>(global_rows[static_cast<size_t>(r)]);
    for (int64_t c = 0; c < cols; c += 4) {
      const std::array<double, 4> z =
          normals(philox(key.seed, kNoiseStream, {key.step, key.op, row, static_cast<uint64_t>(c / 4)}));
      for (int64_t k = c; k < std::min(cols, c + 4); ++k) {
        out[static_cast<size_t>(r * cols + k)] = static_cast<T>(z[static_cast<size_t>(k - c)]);
      }
    }
  }
}

#define GNNRT_INSTANTIATE(T) \
  template void normal_forward<T>(const DropoutKey&, int64_t, std::span<const int64_t>, std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
