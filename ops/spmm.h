// spmm: the fused aggregation of message passing,
//   out[v] = reduce_{e : dst(e) = v} w_e * x[src(e)]
// gathered, scaled and reduced in one pass over each destination's edges; the
// [E, F] message tensor is never built. reduce = sum (the sparse-dense
// matmul A.x), mean (sum / in-degree), max or min (SAGE/GIN-style; same tie
// and empty-row rules as scatter: lowest edge id wins, empty rows give 0 and
// arg = E).
//
// Layout (row-major): x [N_src, F], out [N_dst, F], arg [N_dst, F] (max/min
// only, else empty). weight: empty (every w_e = 1), [E] (one per edge) or
// [E, H] (one per edge and head: feature f belongs to head f / (F / H); GAT's
// attention). Edge e is the e-th entry of the edge list given to
// Adjacency::build. Outputs are overwritten. Blocking; OpenMP inside; no
// atomics (the backward into x walks adj.by_src), so results are bitwise
// deterministic for any thread count. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"
#include "ops/reduce.h"

namespace gnnrt::ops {

template <typename T, typename I>
void spmm_forward(Reduce reduce, const Adjacency<I>& adj, int64_t features, std::span<const T> x,
                  std::span<const T> weight, std::span<T> out, std::span<I> arg);

// grad_x [N_src, F] and grad_weight (weight's shape) are overwritten; pass
// either empty to skip that gradient (grad_weight also when weight is empty).
template <typename T, typename I>
void spmm_backward(Reduce reduce, const Adjacency<I>& adj, int64_t features,
                   std::span<const T> x, std::span<const T> weight, std::span<const T> grad_out,
                   std::span<const I> arg, std::span<T> grad_x, std::span<T> grad_weight);

}  // namespace gnnrt::ops
