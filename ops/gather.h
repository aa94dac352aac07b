// gather: index_select of rows, out[e] = x[index[e]], and its backward, a
// scatter-add of grad_out into grad_x (deterministic: no atomics).
//
// Layout (row-major): x [N, F], out [E, F]. seg = Csr::build(index, N).
// Outputs are overwritten. Blocking; OpenMP inside. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void gather_forward(const Csr<I>& seg, int64_t features, std::span<const T> x, std::span<T> out);

template <typename T, typename I>
void gather_backward(const Csr<I>& seg, int64_t features, std::span<const T> grad_out,
                     std::span<T> grad_x);

}  // namespace gnnrt::ops
