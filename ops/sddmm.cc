#include "ops/sddmm.h"

#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

template <typename I>
void check_shapes(std::string_view op, const Adjacency<I>& adj, int64_t features, int64_t heads,
                  std::size_t a_size, std::size_t b_size) {
  expect_non_negative(op, "features", features);
  if (heads <= 0 || features % heads != 0) {
    throw OpError(op, "heads = " + std::to_string(heads) + " must be positive and divide F = " +
                          std::to_string(features));
  }
  expect_size(op, "a", a_size, adj.num_src_nodes() * features, "N_src*F");
  expect_size(op, "b", b_size, adj.num_dst_nodes() * features, "N_dst*F");
}

// grad[r] = sum over the csr row's edges of grad_out[e, h] * x[col][h-th block]:
// the per-head weighted aggregation that both sddmm backwards reduce to.
template <typename T, typename I>
void aggregate_by(const Csr<I>& csr, const I* source, int64_t features, int64_t heads,
                  const T* x, int64_t x_rows, const T* weight, T* out) {
  detail::segment_reduce<T, I>(Reduce::kSum, {.csr = &csr,
                                              .source = source,
                                              .x = x,
                                              .features = features,
                                              .x_rows = x_rows,
                                              .weight = weight,
                                              .heads = heads,
                                              .out = out});
}

}  // namespace

template <typename T, typename I>
void sddmm_dot_forward(const Adjacency<I>& adj, int64_t features, int64_t heads,
                       std::span<const T> a, std::span<const T> b, std::span<T> out) {
  constexpr std::string_view op = "sddmm_dot";
  check_shapes(op, adj, features, heads, a.size(), b.size());
  expect_size(op, "out", out.size(), adj.num_edges() * heads, "E*H");
  detail::edge_dot<T, I>(adj.by_dst, features, heads, a.data(), b.data(), false, nullptr,
                         out.data());
}

template <typename T, typename I>
void sddmm_dot_backward(const Adjacency<I>& adj, int64_t features, int64_t heads,
                        std::span<const T> a, std::span<const T> b, std::span<const T> grad_out,
                        std::span<T> grad_a, std::span<T> grad_b) {
  constexpr std::string_view op = "sddmm_dot_backward";
  // a is read only for grad_b, b only for grad_a: the unread one may be empty.
  check_shapes(op, adj, features, heads,
               grad_b.empty() && a.empty() ? adj.num_src_nodes() * features : a.size(),
               grad_a.empty() && b.empty() ? adj.num_dst_nodes() * features : b.size());
  expect_size(op, "grad_out", grad_out.size(), adj.num_edges() * heads, "E*H");
  if (!grad_a.empty()) {
    expect_size(op, "grad_a", grad_a.size(), adj.num_src_nodes() * features, "N_src*F");
    aggregate_by(adj.by_src, adj.by_src.col().data(), features, heads, b.data(),
                 adj.num_dst_nodes(), grad_out.data(), grad_a.data());
  }
  if (!grad_b.empty()) {
    expect_size(op, "grad_b", grad_b.size(), adj.num_dst_nodes() * features, "N_dst*F");
    aggregate_by(adj.by_dst, adj.by_dst.col().data(), features, heads, a.data(),
                 adj.num_src_nodes(), grad_out.data(), grad_b.data());
  }
}

template <typename T, typename I>
void sddmm_add_forward(const Adjacency<I>& adj, int64_t heads, std::span<const T> a,
                       std::span<const T> b, std::span<T> out) {
  constexpr std::string_view op = "sddmm_add";
  check_shapes(op, adj, heads, heads, a.size(), b.size());
  expect_size(op, "out", out.size(), adj.num_edges() * heads, "E*H");
  // In edge-id order: sequential writes, each edge's two rows read by its
  // endpoints (each output element is one addition, so no order matters).
  const int64_t H = heads, E = adj.num_edges();
  const I* src = adj.by_src.row_of_edge().data();
  const I* dst = adj.by_dst.row_of_edge().data();
  const T* __restrict ap = a.data();
  const T* __restrict bp = b.data();
  T* __restrict o = out.data();
  // kH: the heads when 1..16, so an edge's row is one fixed-width vector
  // addition (one head: a gather per operand across edges); 0: run time,
  // which is slower (docs/kernels.md).
  const auto rows = [&]<int kH>() {
#pragma omp parallel if (E * H > detail::kParallelWork)
    {
      // Rows read out of order: ops/segment_reduce.h, Pull.
      detail::pull_shared({detail::pull_of(ap, adj.num_src_nodes(), H),
                           detail::pull_of(bp, adj.num_dst_nodes(), H)});
      if constexpr (kH == 1) {
#pragma omp for simd schedule(static)
        for (int64_t e = 0; e < E; ++e) o[e] = ap[src[e]] + bp[dst[e]];
      } else {
        const int64_t width = kH > 0 ? kH : H;
#pragma omp for schedule(static)
        for (int64_t e = 0; e < E; ++e) {
          const T* au = ap + static_cast<int64_t>(src[e]) * width;
          const T* bv = bp + static_cast<int64_t>(dst[e]) * width;
#pragma omp simd
          for (int64_t h = 0; h < width; ++h) o[e * width + h] = au[h] + bv[h];
        }
      }
    }
  };
  if (!detail::with_constant<1, 16>(H, rows)) rows.template operator()<0>();
}

template <typename T, typename I>
void sddmm_add_backward(const Adjacency<I>& adj, int64_t heads, std::span<const T> grad_out,
                        std::span<T> grad_a, std::span<T> grad_b) {
  constexpr std::string_view op = "sddmm_add_backward";
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
  expect_size(op, "grad_out", grad_out.size(), adj.num_edges() * heads, "E*H");
  if (!grad_a.empty()) {
    expect_size(op, "grad_a", grad_a.size(), adj.num_src_nodes() * heads, "N_src*H");
    aggregate_by(adj.by_src, adj.by_src.edge().data(), heads, 1, grad_out.data(),
                 adj.num_edges(), static_cast<const T*>(nullptr), grad_a.data());
  }
  if (!grad_b.empty()) {
    expect_size(op, "grad_b", grad_b.size(), adj.num_dst_nodes() * heads, "N_dst*H");
    aggregate_by(adj.by_dst, adj.by_dst.edge().data(), heads, 1, grad_out.data(),
                 adj.num_edges(), static_cast<const T*>(nullptr), grad_b.data());
  }
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sddmm_dot_forward<T, I>(const Adjacency<I>&, int64_t, int64_t,              \
                                        std::span<const T>, std::span<const T>,             \
                                        std::span<T>);                                       \
  template void sddmm_dot_backward<T, I>(const Adjacency<I>&, int64_t, int64_t,             \
                                         std::span<const T>, std::span<const T>,            \
                                         std::span<const T>, std::span<T>, std::span<T>);   \
  template void sddmm_add_forward<T, I>(const Adjacency<I>&, int64_t, std::span<const T>,   \
                                        std::span<const T>, std::span<T>);                  \
  template void sddmm_add_backward<T, I>(const Adjacency<I>&, int64_t, std::span<const T>,  \
                                         std::span<T>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
