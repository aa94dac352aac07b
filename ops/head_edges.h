// Per-head products of edge rows that every head shares with node rows
// split into heads: the attention's edge-feature terms without per-edge
// projections. With a [N_dst, H*K] (K columns per head), r [E, K] and
// w [E, H], indexed by each edge's destination:
//   edge_head_dot: out [E, H],     out[e, h]   = Σ_k a[dst(e), hK + k] r[e, k]
//   head_scatter:  out [N_dst, HK], out[n, hK+k] = Σ_{e: dst(e) = n} w[e, h] r[e, k]
//   head_gather:   out [E, K],     out[e, k]   = Σ_h w[e, h] a[dst(e), hK + k]
// Each one's gradients are the other two (runtime/autodiff.cc). Outputs are
// overwritten. head_scatter sums a row's edges in ascending edge id, so every
// result is bitwise the same for any thread count; no atomics. Blocking;
// OpenMP inside. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void edge_head_dot(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> a,
                   std::span<const T> r, std::span<T> out);

template <typename T, typename I>
void head_scatter(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> w,
                  std::span<const T> r, std::span<T> out);

template <typename T, typename I>
void head_gather(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> w,
                 std::span<const T> a, std::span<T> out);

}  // namespace gnnrt::ops
