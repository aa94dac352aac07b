#include "ops/sparse_matmul.h"


#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

template <typename I>
void check_sizes(std::string_view op, const Adjacency<I>& x, std::size_t values_size, int64_t m,
                 std::size_t b_size, std::size_t out_size, std::string_view out_name) {
  expect_non_negative(op, "m", m);
  expect_size(op, "values", values_size, x.num_edges(), "E (stored values of X)");
  expect_size(op, "b", b_size, x.num_src_nodes() * m, "K*M");
  expect_size(op, out_name, out_size, x.num_dst_nodes() * m, "N*M");
}

}  // namespace

template <typename T, typename I>
void sparse_matmul_forward(const Adjacency<I>& x, std::span<const T> values, std::span<const T> b,
                           int64_t m, bool trans_b, std::span<T> workspace, std::span<T> out) {
  constexpr std::string_view op = "sparse_matmul";
  check_sizes(op, x, values.size(), m, b.size(), out.size(), "out");
  const int64_t K = x.num_src_nodes();
  expect_size(op, "workspace", workspace.size(), trans_b ? K * m : 0, trans_b ? "K*M" : "0");
  const T* bt = b.data();
  if (trans_b) {  // workspace [K, M] = b [M, K] transposed
    T* w = workspace.data();
#pragma omp parallel for schedule(static) if (K * m > detail::kParallelWork)
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < m; ++j) w[k * m + j] = b[static_cast<std::size_t>(j * K + k)];
    }
    bt = w;
  }
  // out[r] = sum over row r's stored entries of value * row col of op(b): a
  // weighted aggregation (ops/segment_reduce.h) with the values as weights.
  detail::segment_reduce<T, I>(Reduce::kSum, {.csr = &x.by_dst,
                                              .source = x.by_dst.col().data(),
                                              .x = bt,
                                              .features = m,
                                              .x_rows = K,
                                              .weight = values.data(),
                                              .out = out.data()});
}

template <typename T, typename I>
void sparse_matmul_backward_b(const Adjacency<I>& x, std::span<const T> values,
                              std::span<const T> grad_out, int64_t m, bool trans_b,
                              std::span<T> grad_b) {
  constexpr std::string_view op = "sparse_matmul_backward_b";
  check_sizes(op, x, values.size(), m, grad_b.size(), grad_out.size(), "grad_out");
  // Row k of Xᵀ G: the rows of G that column k of X touches, in ascending
  // row order; stored as row k of grad_b, or as its column k (trans_b).
  detail::segment_reduce<T, I>(Reduce::kSum, {.csr = &x.by_src,
                                              .source = x.by_src.col().data(),
                                              .x = grad_out.data(),
                                              .features = m,
                                              .x_rows = x.num_dst_nodes(),
                                              .weight = values.data(),
                                              .out = grad_b.data(),
                                              .transposed_out = trans_b});
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sparse_matmul_forward<T, I>(const Adjacency<I>&, std::span<const T>,         \
                                            std::span<const T>, int64_t, bool, std::span<T>, \
                                            std::span<T>);                                   \
  template void sparse_matmul_backward_b<T, I>(const Adjacency<I>&, std::span<const T>,      \
                                               std::span<const T>, int64_t, bool,            \
                                               std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
