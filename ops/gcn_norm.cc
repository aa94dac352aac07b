#include "ops/gcn_norm.h"

#include <cmath>
#include <vector>

#include "ops/error.h"

namespace gnnrt::ops {

template <typename I>
void gcn_norm(const Adjacency<I>& adj, std::span<float> weight) {
  expect_size("gcn_norm", "weight", weight.size(), adj.num_edges(), "E");
  // Source and destination sides of a message-passing graph are one node set.
  const int64_t n = std::max(adj.num_src_nodes(), adj.num_dst_nodes());
  std::vector<float> inv_sqrt(static_cast<size_t>(n), 0.0f);
  for (int64_t v = 0; v < adj.num_dst_nodes(); ++v) {
    const auto deg = static_cast<float>(adj.by_dst.degree(v));
    inv_sqrt[static_cast<size_t>(v)] = deg > 0 ? 1.0f / std::sqrt(deg) : 0.0f;
  }
  const auto src = adj.by_src.row_of_edge();
  const auto dst = adj.by_dst.row_of_edge();
  const int64_t edges = adj.num_edges();
#pragma omp parallel for schedule(static) if (edges > (1 << 15))
  for (int64_t e = 0; e < edges; ++e) {
    weight[static_cast<size_t>(e)] =
        inv_sqrt[static_cast<size_t>(src[e])] * inv_sqrt[static_cast<size_t>(dst[e])];
  }
}

template void gcn_norm<int32_t>(const Adjacency<int32_t>&, std::span<float>);
template void gcn_norm<int64_t>(const Adjacency<int64_t>&, std::span<float>);

}  // namespace gnnrt::ops
