// segment_softmax: softmax of per-edge scores over the edges of each
// destination (GAT's attention normalisation), per head:
//   alpha[e, h] = exp(s[e, h] - m[v, h]) / sum_{e' -> v} exp(s[e', h] - m[v, h])
// with m[v, h] the segment's max (stable). A segment whose scores are all
// -inf gives alpha = 0 and zero gradient instead of NaN; a single -inf score
// in a segment gets alpha = 0. Matches PyG's torch_geometric.utils.softmax
// (which adds 1e-16 to the denominator) to within float rounding.
//
// Layout (row-major): score, alpha, grad_alpha, grad_score [E, heads], by
// edge id. seg groups edges by destination (Adjacency::by_dst). Outputs
// overwritten. Blocking; OpenMP inside; deterministic. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void segment_softmax_forward(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                             std::span<T> alpha);

// grad_score[e] = alpha[e] * (grad_alpha[e] - sum_{e' in seg} alpha[e'] * grad_alpha[e'])
template <typename T, typename I>
void segment_softmax_backward(const Csr<I>& seg, int64_t heads, std::span<const T> alpha,
                              std::span<const T> grad_alpha, std::span<T> grad_score);

}  // namespace gnnrt::ops
