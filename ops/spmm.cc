#include "ops/spmm.h"

#include <string>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"
#include "ops/vector_math.h"

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

// [rows, H, D] -> [rows, D, H]: a row's heads side by side per channel.
// GAT's 8 heads of 8 make a row one 8 x 8 block, transposed with vector
// shuffles, faster than element by element (docs/kernels.md).
template <int kH, int kD, typename T>
void heads_last(const T* in, int64_t rows, T* out) {
  constexpr int kF = kH * kD;
#pragma omp for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (kH == 8 && kD == 8) {
      detail::transpose_block8(in + r * kF, kD, out + r * kF, kH);
    } else {
      for (int h = 0; h < kH; ++h) {
        for (int d = 0; d < kD; ++d) out[r * kF + d * kH + h] = in[r * kF + h * kD + d];
      }
    }
  }
}

// grad_w[edge[p], h] = scale(r) * <grad_out[r, h, :], x[col[p], h, :]> for
// kH heads of kD channels (ops/segment_reduce.h edge_dot's sums, the same
// bits): x and grad_out first turned to [rows, D, H], so that each step over
// d is one multiply-add across the heads' lanes, not a chain of short dots
// per edge (docs/kernels.md).
template <int kH, int kD, typename T, typename I>
void edge_dot_heads(const Csr<I>& csr, int64_t x_rows, const T* x, const T* grad_out, bool mean,
                    T* grad_w) {
  constexpr int kF = kH * kD;
  // Host scratch outside the memory plan, per calling thread and per (kH,
  // kD, T): it only grows, to the largest x and grad_out seen (Cora GAT:
  // 2 x 693 KB).
  thread_local std::vector<T> xt, gt;
  const int64_t n = csr.num_rows();
  if (static_cast<int64_t>(xt.size()) < x_rows * kF) xt.resize(static_cast<std::size_t>(x_rows * kF));
  if (static_cast<int64_t>(gt.size()) < n * kF) gt.resize(static_cast<std::size_t>(n * kF));
  T* xw = xt.data();
  T* gw = gt.data();
#pragma omp parallel if ((x_rows + n) * kF > detail::kParallelWork)
  {
    heads_last<kH, kD>(x, x_rows, xw);
    heads_last<kH, kD>(grad_out, n, gw);
  }
  const T* __restrict xs = xw;
  const T* __restrict gs = gw;
  const int64_t* rp = csr.rowptr().data();
  const I* edge = csr.edge().data();
  const I* col = csr.col().data();
  detail::parallel_rows(csr, kF, [&](int64_t r) {
    const T* __restrict gr = gs + r * kF;
    const T scale = mean ? T(1) / T(rp[r + 1] - rp[r]) : T(1);
    for (int64_t p = rp[r]; p < rp[r + 1]; ++p) {
      const T* __restrict xr = xs + static_cast<int64_t>(col[p]) * kF;
      T acc[kH] = {};
      for (int d = 0; d < kD; ++d) {
#pragma omp simd
        for (int h = 0; h < kH; ++h) acc[h] += xr[d * kH + h] * gr[d * kH + h];
      }
      T* __restrict o = grad_w + static_cast<int64_t>(edge[p]) * kH;
      for (int h = 0; h < kH; ++h) o[h] = scale * acc[h];
    }
  }, {detail::pull_of(xs, x_rows, kF)});
}

// Whether edge_dot_heads took the call: several heads of 4, 8 or 16
// channels and no max/min winners.
template <typename T, typename I>
bool try_edge_dot_heads(const Adjacency<I>& adj, int64_t features, int64_t heads, const T* x,
                        const T* grad_out, bool mean, T* grad_w) {
  bool done = false;
  const auto with_channels = [&]<int kH>() {
    const int64_t D = features / kH;
    const auto run = [&]<int kD>() {
      if (D != kD) return;
      edge_dot_heads<kH, kD>(adj.by_dst, adj.num_src_nodes(), x, grad_out, mean, grad_w);
      done = true;
    };
    run.template operator()<4>();
    run.template operator()<8>();
    run.template operator()<16>();
  };
  if (heads == 2) with_channels.template operator()<2>();
  if (heads == 4) with_channels.template operator()<4>();
  if (heads == 8) with_channels.template operator()<8>();
  if (heads == 16) with_channels.template operator()<16>();
  return done;
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
  if (!grad_weight.empty() &&
      (winner != nullptr || !try_edge_dot_heads(adj, features, heads, x.data(), grad_out.data(),
                                                mean, grad_weight.data()))) {
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
