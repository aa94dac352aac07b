#include "ops/head_edges.h"

#include <algorithm>
#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

void check(std::string_view op, int64_t heads, int64_t k) {
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
  expect_non_negative(op, "k", k);
}

}  // namespace

template <typename T, typename I>
void edge_head_dot(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> a,
                   std::span<const T> r, std::span<T> out) {
  constexpr std::string_view op = "edge_head_dot";
  check(op, heads, k);
  const int64_t E = adj.num_edges(), H = heads, K = k;
  expect_size(op, "a", a.size(), adj.num_dst_nodes() * H * K, "N_dst*H*K");
  expect_size(op, "r", r.size(), E * K, "E*K");
  expect_size(op, "out", out.size(), E * H, "E*H");
  const I* dst = adj.by_dst.row_of_edge().data();
  const T* __restrict ap = a.data();
  const T* __restrict rp = r.data();
  T* __restrict o = out.data();
#pragma omp parallel for schedule(static) if (E * H * K > detail::kParallelWork)
  for (int64_t e = 0; e < E; ++e) {
    const T* an = ap + static_cast<int64_t>(dst[e]) * H * K;
    const T* re = rp + e * K;
    for (int64_t h = 0; h < H; ++h) {
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < K; ++j) sum += an[h * K + j] * re[j];
      o[e * H + h] = sum;
    }
  }
}

template <typename T, typename I>
void head_scatter(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> w,
                  std::span<const T> r, std::span<T> out) {
  constexpr std::string_view op = "head_scatter";
  check(op, heads, k);
  const int64_t E = adj.num_edges(), N = adj.num_dst_nodes(), H = heads, K = k;
  expect_size(op, "w", w.size(), E * H, "E*H");
  expect_size(op, "r", r.size(), E * K, "E*K");
  expect_size(op, "out", out.size(), N * H * K, "N_dst*H*K");
  const Csr<I>& csr = adj.by_dst;
  const int64_t* rowptr = csr.rowptr().data();
  const I* edge = csr.edge().data();
  const T* __restrict wp = w.data();
  const T* __restrict rp = r.data();
  T* __restrict o = out.data();
#pragma omp parallel for schedule(static) if ((E + N) * H * K > detail::kParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    T* on = o + n * H * K;
    std::fill(on, on + H * K, T(0));
    for (int64_t p = rowptr[n]; p < rowptr[n + 1]; ++p) {
      const int64_t e = edge[p];
      const T* re = rp + e * K;
      for (int64_t h = 0; h < H; ++h) {
        const T weight = wp[e * H + h];
#pragma omp simd
        for (int64_t j = 0; j < K; ++j) on[h * K + j] += weight * re[j];
      }
    }
  }
}

template <typename T, typename I>
void head_gather(const Adjacency<I>& adj, int64_t heads, int64_t k, std::span<const T> w,
                 std::span<const T> a, std::span<T> out) {
  constexpr std::string_view op = "head_gather";
  check(op, heads, k);
  const int64_t E = adj.num_edges(), H = heads, K = k;
  expect_size(op, "w", w.size(), E * H, "E*H");
  expect_size(op, "a", a.size(), adj.num_dst_nodes() * H * K, "N_dst*H*K");
  expect_size(op, "out", out.size(), E * K, "E*K");
  const I* dst = adj.by_dst.row_of_edge().data();
  const T* __restrict wp = w.data();
  const T* __restrict ap = a.data();
  T* __restrict o = out.data();
#pragma omp parallel for schedule(static) if (E * H * K > detail::kParallelWork)
  for (int64_t e = 0; e < E; ++e) {
    const T* an = ap + static_cast<int64_t>(dst[e]) * H * K;
    T* oe = o + e * K;
    std::fill(oe, oe + K, T(0));
    for (int64_t h = 0; h < H; ++h) {
      const T weight = wp[e * H + h];
#pragma omp simd
      for (int64_t j = 0; j < K; ++j) oe[j] += weight * an[h * K + j];
    }
  }
}

#define GNNRT_INSTANTIATE(T, I)                                                                          \
  template void edge_head_dot<T, I>(const Adjacency<I>&, int64_t, int64_t, std::span<const T>,          \
                                    std::span<const T>, std::span<T>);                                  \
  template void head_scatter<T, I>(const Adjacency<I>&, int64_t, int64_t, std::span<const T>,           \
                                   std::span<const T>, std::span<T>);                                   \
  template void head_gather<T, I>(const Adjacency<I>&, int64_t, int64_t, std::span<const T>,            \
                                  std::span<const T>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
