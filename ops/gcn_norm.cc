#include "ops/gcn_norm.h"

#include <cmath>
#include <string>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"

namespace gnnrt::ops {

template <typename T, typename I>
void gcn_norm(const Adjacency<I>& adj, std::span<const int64_t> degree, std::span<T> weight) {
  constexpr std::string_view op = "gcn_norm";
  expect_size(op, "weight", weight.size(), adj.num_edges(), "E");
  const int64_t n = adj.num_dst_nodes();
  if (adj.num_src_nodes() != n) {
    throw OpError(op, "the graph has " + std::to_string(adj.num_src_nodes()) + " source and " +
                          std::to_string(n) + " destination nodes; GCN needs one node set");
  }
  if (!degree.empty()) expect_size(op, "degree", degree.size(), n, "N");
  std::vector<T> inv_sqrt(static_cast<size_t>(n), T(0));
  for (int64_t v = 0; v < n; ++v) {
    const int64_t d = degree.empty() ? adj.by_dst.degree(v) : degree[static_cast<size_t>(v)];
    if (d < 0) {
      throw OpError(op, "degree[" + std::to_string(v) + "] = " + std::to_string(d) + " is negative");
    }
    // As float: 1 / sqrt in the value type, the arithmetic PyG runs.
    const auto deg = static_cast<T>(d);
    inv_sqrt[static_cast<size_t>(v)] = d > 0 ? T(1) / std::sqrt(deg) : T(0);
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

#define GNNRT_INSTANTIATE(T, I) \
  template void gcn_norm<T, I>(const Adjacency<I>&, std::span<const int64_t>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
