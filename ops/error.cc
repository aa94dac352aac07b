#include "ops/error.h"

#include <fmt/format.h>

namespace gnnrt::ops {

void expect_size(std::string_view op, std::string_view arg, std::size_t actual,
                 int64_t expected, std::string_view shape) {
  if (expected < 0 || static_cast<int64_t>(actual) != expected) {
    throw OpError(op, fmt::format("{} has {} elements, expected {} = {}", arg, actual,
                                  shape, expected));
  }
}

void expect_non_negative(std::string_view op, std::string_view what, int64_t value) {
  if (value < 0) throw OpError(op, fmt::format("{} is negative ({})", what, value));
}

template <typename I>
void expect_indices_in_range(std::string_view op, std::string_view arg,
                             std::span<const I> index, int64_t bound) {
  for (std::size_t i = 0; i < index.size(); ++i) {
    const int64_t v = index[i];
    if (v < 0 || v >= bound) {
      throw OpError(op, fmt::format("{}[{}] = {} is outside [0, {})", arg, i, v, bound));
    }
  }
}

template void expect_indices_in_range<int32_t>(std::string_view, std::string_view,
                                               std::span<const int32_t>, int64_t);
template void expect_indices_in_range<int64_t>(std::string_view, std::string_view,
                                               std::span<const int64_t>, int64_t);

}  // namespace gnnrt::ops
