// sddmm: per-edge scores from the features of both endpoints.
//   sddmm_dot: out[e, h] = sum_d a[src(e), h, d] * b[dst(e), h, d]
//   sddmm_add: out[e, h] = a[src(e), h] + b[dst(e), h]   (GAT's logits)
//
// Layout (row-major): a [N_src, F], b [N_dst, F] with F = heads * D (for
// sddmm_add D = 1, F = heads), out [E, heads], indexed by edge id. Outputs
// overwritten; backward gradients overwrite grad_a and grad_b (skip one by
// passing it empty; grad_a reads only b and grad_b only a, so the input only
// a skipped gradient would read may be empty too). Blocking; OpenMP inside;
// no atomics (grad_a walks adj.by_src, grad_b adj.by_dst), deterministic.
// Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void sddmm_dot_forward(const Adjacency<I>& adj, int64_t features, int64_t heads,
                       std::span<const T> a, std::span<const T> b, std::span<T> out);

template <typename T, typename I>
void sddmm_dot_backward(const Adjacency<I>& adj, int64_t features, int64_t heads,
                        std::span<const T> a, std::span<const T> b, std::span<const T> grad_out,
                        std::span<T> grad_a, std::span<T> grad_b);

template <typename T, typename I>
void sddmm_add_forward(const Adjacency<I>& adj, int64_t heads, std::span<const T> a,
                       std::span<const T> b, std::span<T> out);

template <typename T, typename I>
void sddmm_add_backward(const Adjacency<I>& adj, int64_t heads, std::span<const T> grad_out,
                        std::span<T> grad_a, std::span<T> grad_b);

}  // namespace gnnrt::ops
