// Errors raised by the kernels on bad input. Every check names the op, the
// argument and, for index arrays, the first bad position, so a user can find
// the bad row without a debugger. Checks run before any output is written.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gnnrt::ops {

class OpError : public std::invalid_argument {
 public:
  OpError(std::string_view op, const std::string& what)
      : std::invalid_argument(std::string(op) + ": " + what) {}
};

// `arg` must hold `expected` elements; `shape` spells the expectation ("E*F").
void expect_size(std::string_view op, std::string_view arg, std::size_t actual,
                 int64_t expected, std::string_view shape);

// A size or count must not be negative.
void expect_non_negative(std::string_view op, std::string_view what, int64_t value);

// Every index[i] must lie in [0, bound).
template <typename I>
void expect_indices_in_range(std::string_view op, std::string_view arg,
                             std::span<const I> index, int64_t bound);

}  // namespace gnnrt::ops
