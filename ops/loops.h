// Loop helpers the kernels share (internal to ops/; include only from kernel
// .cc files): blocks of a range spread over OpenMP threads, and the choice of
// a compile-time width from a run-time one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

namespace gnnrt::ops::detail {

// Element-wise work below this many elements runs on the calling thread.
inline constexpr int64_t kParallelElements = 1 << 15;

// Calls fn(begin, end) for the blocks [0, block), [block, 2 block), ... of
// [0, count), spread over OpenMP threads when `parallel`. fn's loop over
// raw pointers is what vectorises: a per-element lambda inside `omp parallel
// for` did not (GCC 12 kept one branch per element, mispredicting on the
// sign; docs/kernels.md). Each thread runs a
// private copy of fn: the outlined region would otherwise reach fn's
// pointers through memory the loop writes, and reload them per element
// instead of vectorising.
template <typename Fn>
void for_blocks(int64_t count, int64_t block, bool parallel, const Fn& fn) {
  const int64_t blocks = (count + block - 1) / block;
  if (!parallel) {
    for (int64_t b = 0; b < blocks; ++b) fn(b * block, std::min(count, (b + 1) * block));
    return;
  }
#pragma omp parallel
  {
    const Fn local = fn;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) local(b * block, std::min(count, (b + 1) * block));
  }
}

// fn.template operator()<k>() for the k in [kFirst, kFirst + kCount) equal
// to value; false, calling nothing, when none is. Kernels use it to unroll
// loops over a width known only at run time (a head's channels, a row's
// last columns) when it is small.
template <int kFirst, int kCount, typename Fn>
bool with_constant(int64_t value, Fn&& fn) {
  return [&]<int... kIs>(std::integer_sequence<int, kIs...>) {
    return ((value == kFirst + kIs ? (fn.template operator()<kFirst + kIs>(), true) : false) || ...);
  }(std::make_integer_sequence<int, kCount>());
}

}  // namespace gnnrt::ops::detail
