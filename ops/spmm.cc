#include "ops/spmm.h"

#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

// Heads implied by the weight's length: 1 for no weight or one per edge.
template <typename I>
int64_t weight_heads(std::string_view op, const Adjacency<I>& adj, int64_t features,
                     std::size_t weight_size) {
  const int64_t E = adj.num_edges();
  if (weight_size == 0 || E == 0) {
    if (weight_size != 0) expect_size(op, "weight", weight_size, 0, "E");
    return 1;
  }
  const int64_t heads = static_cast<int64_t>(weight_size) / E;
  if (heads * E != static_cast<int64_t>(weight_size) || heads == 0 ||
      (features > 0 && features % heads != 0) || (features == 0 && heads != 1)) {
    throw OpError(op, "weight has " + std::to_string(weight_size) +
                          " elements; expected E = " + std::to_string(E) +
                          " or E*H with H dividing F = " + std::to_string(features));
  }
  return heads;
}

template <typename I>
void check_shapes(std::string_view op, Reduce reduce, const Adjacency<I>& adj, int64_t features,
                  std::size_t x_size, std::size_t arg_size) {
  expect_non_negative(op, "features", features);
  expect_size(op, "x", x_size, adj.num_src_nodes() * features, "N_src*F");
  if (has_arg(reduce)) expect_size(op, "arg", arg_size, adj.num_dst_nodes() * features, "N_dst*F");
}

}  // namespace

template <typename T, typename I>
void spmm_forward(Reduce reduce, const Adjacency<I>& adj, int64_t features, std::span<const T> x,
                  std::span<const T> weight, std::span<T> out, std::span<I> arg) {
  constexpr std::string_view op = "spmm";
  check_shapes(op, reduce, adj, features, x.size(), arg.size());
  const int64_t heads = weight_heads(op, adj, features, weight.size());
  expect_size(op, "out", out.size(), adj.num_dst_nodes() * features, "N_dst*F");
  detail::segment_reduce<T, I>(reduce, {.csr = &adj.by_dst,
                                        .source = adj.by_dst.col().data(),
                                        .x = x.data(),
                                        .features = features,
                                        .x_rows = adj.num_src_nodes(),
                                        .weight = weight.empty() ? nullptr : weight.data(),
                                        .heads = heads,
                                        .out = out.data(),
                                        .arg = arg.data()});
}

template <typename T, typename I>
void spmm_backward(Reduce reduce, const Adjacency<I>& adj, int64_t features,
                   std::span<const T> x, std::span<const T> weight, std::span<const T> grad_out,
                   std::span<const I> arg, std::span<T> grad_x, std::span<T> grad_weight) {
  constexpr std::string_view op = "spmm_backward";
  check_shapes(op, reduce, adj, features, x.size(), arg.size());
  const int64_t heads = weight_heads(op, adj, features, weight.size());
  expect_size(op, "grad_out", grad_out.size(), adj.num_dst_nodes() * features, "N_dst*F");
  if (!grad_x.empty() || adj.num_src_nodes() * features == 0) {
    expect_size(op, "grad_x", grad_x.size(), adj.num_src_nodes() * features, "N_src*F");
  }
  if (!grad_weight.empty()) {
    expect_size(op, "grad_weight", grad_weight.size(), static_cast<int64_t>(weight.size()),
                "len(weight)");
  }
  const bool mean = reduce == Reduce::kMean;
  const I* winner = has_arg(reduce) ? arg.data() : nullptr;

  // grad_x[u] = sum over u's out-edges e -> v of w_e * grad_out[v] (/ deg v for
  // mean; only where e won, for max/min), reduced per source without atomics.
  if (!grad_x.empty()) {
    detail::segment_reduce<T, I>(Reduce::kSum,
                               {.csr = &adj.by_src,
                                .source = adj.by_src.col().data(),
                                .x = grad_out.data(),
                                .features = features,
                                .x_rows = adj.num_dst_nodes(),
                                .weight = weight.empty() ? nullptr : weight.data(),
                                .heads = heads,
                                .source_rowptr = mean ? adj.by_dst.rowptr().data() : nullptr,
                                .winner = winner,
                                .out = grad_x.data()});
  }
  // grad_w[e, h] = <grad_out[v], x[u]> over head h's features (same scaling/mask).
  if (!grad_weight.empty()) {
    detail::edge_dot(adj.by_dst, features, heads, x.data(), grad_out.data(), mean, winner,
                     grad_weight.data());
  }
}

#define GNNRT_INSTANTIATE(T, I)                                                                \
  template void spmm_forward<T, I>(Reduce, const Adjacency<I>&, int64_t, std::span<const T>,  \
                                   std::span<const T>, std::span<T>, std::span<I>);           \
  template void spmm_backward<T, I>(Reduce, const Adjacency<I>&, int64_t, std::span<const T>, \
                                    std::span<const T>, std::span<const T>,                   \
                                    std::span<const I>, std::span<T>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
