// GCN's symmetric normalisation of an edge list (Kipf & Welling; PyG's
// gcn_norm with unit edge weights): weight[e] = deg^-1/2[src(e)] *
// deg^-1/2[dst(e)], deg = in-degree (edges into a node, self loops
// included as given), and deg^-1/2 = 0 for a node without in-edges.
// Layout: weight [E] by edge id, overwritten. Deterministic.
#pragma once

#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename I>
void gcn_norm(const Adjacency<I>& adj, std::span<float> weight);

}  // namespace gnnrt::ops
