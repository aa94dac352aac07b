// GCN's symmetric normalisation of an edge list (Kipf & Welling; PyG's
// gcn_norm with unit edge weights): weight[e] = deg^-1/2[src(e)] *
// deg^-1/2[dst(e)], deg = in-degree (edges into a node, self loops included
// as given), and deg^-1/2 = 0 for a node without in-edges. The source and
// destination sides are one node set (N_src = N_dst).
//
// degree: the in-degree of each node [N] (on a rank of a partitioned graph,
// the global in-degree of its local vertices, so that a vertex's replicas
// normalise alike); empty: counted from `adj` itself.
// Layout: weight [E] by edge id, overwritten. T is float or double. Bad
// sizes, N_src != N_dst or a negative degree throw OpError. Deterministic.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void gcn_norm(const Adjacency<I>& adj, std::span<const int64_t> degree, std::span<T> weight);

}  // namespace gnnrt::ops
