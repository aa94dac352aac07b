#include "ops/segment_softmax.h"

#include <cmath>
#include <limits>
#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

void check_heads(std::string_view op, int64_t heads) {
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
}

}  // namespace

template <typename T, typename I>
void segment_softmax_forward(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                             std::span<T> alpha) {
  constexpr std::string_view op = "segment_softmax";
  check_heads(op, heads);
  expect_size(op, "score", score.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "alpha", alpha.size(), seg.num_edges() * heads, "E*H");
  const int64_t rows = seg.num_rows();
  const int64_t H = heads;
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const bool parallel = (seg.num_edges() + rows) * H > detail::kParallelWork;
#pragma omp parallel for schedule(dynamic, detail::kRowChunk) if (parallel)
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t h = 0; h < H; ++h) {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
        const T s = score[static_cast<int64_t>(edge[p]) * H + h];
        if (detail::improves<Reduce::kMax>(s, m)) m = s;
      }
      // All -inf: exp(-inf - (-inf)) would be NaN; the softmax of nothing is 0.
      const bool all_neg_inf = m == -std::numeric_limits<T>::infinity();
      T sum = T(0);
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
        const int64_t i = static_cast<int64_t>(edge[p]) * H + h;
        const T a = all_neg_inf ? T(0) : std::exp(score[i] - m);
        alpha[i] = a;
        sum += a;
      }
      if (all_neg_inf) continue;
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) alpha[static_cast<int64_t>(edge[p]) * H + h] /= sum;
    }
  }
}

template <typename T, typename I>
void segment_softmax_backward(const Csr<I>& seg, int64_t heads, std::span<const T> alpha,
                              std::span<const T> grad_alpha, std::span<T> grad_score) {
  constexpr std::string_view op = "segment_softmax_backward";
  check_heads(op, heads);
  expect_size(op, "alpha", alpha.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "grad_alpha", grad_alpha.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "grad_score", grad_score.size(), seg.num_edges() * heads, "E*H");
  const int64_t rows = seg.num_rows();
  const int64_t H = heads;
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const bool parallel = (seg.num_edges() + rows) * H > detail::kParallelWork;
#pragma omp parallel for schedule(dynamic, detail::kRowChunk) if (parallel)
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t h = 0; h < H; ++h) {
      T dot = T(0);
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
        const int64_t i = static_cast<int64_t>(edge[p]) * H + h;
        dot += alpha[i] * grad_alpha[i];
      }
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
        const int64_t i = static_cast<int64_t>(edge[p]) * H + h;
        grad_score[i] = alpha[i] * (grad_alpha[i] - dot);
      }
    }
  }
}

#define GNNRT_INSTANTIATE(T, I)                                                               \
  template void segment_softmax_forward<T, I>(const Csr<I>&, int64_t, std::span<const T>,    \
                                              std::span<T>);                                  \
  template void segment_softmax_backward<T, I>(const Csr<I>&, int64_t, std::span<const T>,   \
                                               std::span<const T>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
