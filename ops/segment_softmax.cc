#include "ops/segment_softmax.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <limits>
#include <string>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

void check_heads(std::string_view op, int64_t heads) {
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
}

}  // namespace

namespace {

// Both passes walk a destination's edges once per step with all heads of an
// edge together (score[e, 0..H) is contiguous), prefetching the scores of
// edges ahead: edge ids within a destination are scattered over [0, E).
// Per-head running values live in a per-thread scratch of 2 H values.
template <typename T>
std::span<T> head_scratch(int64_t heads) {
  thread_local std::vector<T> scratch;
  if (static_cast<int64_t>(scratch.size()) < 2 * heads) scratch.resize(2 * heads);
  return {scratch.data(), static_cast<std::size_t>(2 * heads)};
}

// Prefetches the heads of edge[p + ahead]'s row, to be written when kForWrite.
// Always inlined: GCC deletes calls to a function that only prefetches
// (ops/segment_reduce.h).
template <bool kForWrite = false, typename T, typename I>
[[gnu::always_inline]] inline void prefetch_edge(const T* values, const I* edge, int64_t p,
                                                 int64_t ahead, int64_t num_edges, int64_t heads) {
  if (p + ahead < num_edges) {
    __builtin_prefetch(values + static_cast<int64_t>(edge[p + ahead]) * heads, kForWrite ? 1 : 0);
  }
}

}  // namespace

template <typename T, typename I>
void segment_softmax_forward(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                             std::span<T> alpha) {
  constexpr std::string_view op = "segment_softmax";
  check_heads(op, heads);
  expect_size(op, "score", score.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "alpha", alpha.size(), seg.num_edges() * heads, "E*H");
  const int64_t H = heads;
  const int64_t E = seg.num_edges();
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const int64_t ahead = detail::prefetch_distance<T>(H);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    const std::span<T> scratch = head_scratch<T>(H);
    T* m = scratch.data();
    T* sum = scratch.data() + H;
    std::fill(m, m + H, kNegInf);
    std::fill(sum, sum + H, T(0));
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      prefetch_edge(score.data(), edge, p, ahead, E, H);
      prefetch_edge</*kForWrite=*/true>(alpha.data(), edge, p, ahead, E, H);
      const T* s = score.data() + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) m[h] = detail::improves<Reduce::kMax>(s[h], m[h]) ? s[h] : m[h];
    }
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const T* s = score.data() + static_cast<int64_t>(edge[p]) * H;
      T* a = alpha.data() + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        // A head whose scores are all -inf: exp(-inf - (-inf)) would be NaN;
        // the softmax of nothing is 0.
        a[h] = m[h] == kNegInf ? T(0) : std::exp(s[h] - m[h]);
        sum[h] += a[h];
      }
    }
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      T* a = alpha.data() + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        if (m[h] != kNegInf) a[h] /= sum[h];
      }
    }
  });
}

template <typename T, typename I>
void segment_softmax_backward(const Csr<I>& seg, int64_t heads, std::span<const T> alpha,
                              std::span<const T> grad_alpha, std::span<T> grad_score) {
  constexpr std::string_view op = "segment_softmax_backward";
  check_heads(op, heads);
  expect_size(op, "alpha", alpha.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "grad_alpha", grad_alpha.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "grad_score", grad_score.size(), seg.num_edges() * heads, "E*H");
  const int64_t H = heads;
  const int64_t E = seg.num_edges();
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const int64_t ahead = detail::prefetch_distance<T>(H);
  detail::parallel_rows(seg, H, [&](int64_t v) {
    T* dot = head_scratch<T>(H).data();
    std::fill(dot, dot + H, T(0));
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      prefetch_edge(alpha.data(), edge, p, ahead, E, H);
      prefetch_edge(grad_alpha.data(), edge, p, ahead, E, H);
      prefetch_edge</*kForWrite=*/true>(grad_score.data(), edge, p, ahead, E, H);
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) dot[h] += alpha[i + h] * grad_alpha[i + h];
    }
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) grad_score[i + h] = alpha[i + h] * (grad_alpha[i + h] - dot[h]);
    }
  });
}

namespace {

// Sizes of the pieces: per-edge [E, H] and per-destination [N, H] spans.
template <typename I>
void expect_pieces(std::string_view op, const Csr<I>& seg, int64_t heads,
                   std::initializer_list<std::pair<std::string_view, std::size_t>> edge_spans,
                   std::initializer_list<std::pair<std::string_view, std::size_t>> node_spans) {
  check_heads(op, heads);
  for (const auto& [name, size] : edge_spans) expect_size(op, name, size, seg.num_edges() * heads, "E*H");
  for (const auto& [name, size] : node_spans) expect_size(op, name, size, seg.num_rows() * heads, "N*H");
}

}  // namespace

template <typename T, typename I>
void segment_max(const Csr<I>& seg, int64_t H, std::span<const T> score, std::span<T> m) {
  expect_pieces("segment_max", seg, H, {{"score", score.size()}}, {{"m", m.size()}});
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    T* mv = m.data() + v * H;
    std::fill(mv, mv + H, -std::numeric_limits<T>::infinity());
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const T* sc = score.data() + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) mv[h] = detail::improves<Reduce::kMax>(sc[h], mv[h]) ? sc[h] : mv[h];
    }
  });
}

template <typename T, typename I>
void segment_exp_sum(const Csr<I>& seg, int64_t H, std::span<const T> score, std::span<const T> m,
                     std::span<T> s) {
  expect_pieces("segment_exp_sum", seg, H, {{"score", score.size()}}, {{"m", m.size()}, {"s", s.size()}});
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    T* sv = s.data() + v * H;
    const T* mv = m.data() + v * H;
    std::fill(sv, sv + H, T(0));
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const T* sc = score.data() + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) sv[h] += mv[h] == kNegInf ? T(0) : std::exp(sc[h] - mv[h]);
    }
  });
}

template <typename T, typename I>
void segment_exp_sum_grad(const Csr<I>& seg, int64_t H, std::span<const T> score,
                          std::span<const T> m, std::span<const T> grad_s,
                          std::span<T> grad_score) {
  expect_pieces("segment_exp_sum_grad", seg, H, {{"score", score.size()}, {"grad_score", grad_score.size()}},
                {{"m", m.size()}, {"grad_s", grad_s.size()}});
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    const T* mv = m.data() + v * H;
    const T* gv = grad_s.data() + v * H;
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        grad_score[i + h] = mv[h] == kNegInf ? T(0) : gv[h] * std::exp(score[i + h] - mv[h]);
      }
    }
  });
}

template <typename T, typename I>
void segment_softmax_apply(const Csr<I>& seg, int64_t H, std::span<const T> score,
                           std::span<const T> m, std::span<const T> s, std::span<T> alpha) {
  expect_pieces("segment_softmax_apply", seg, H, {{"score", score.size()}, {"alpha", alpha.size()}},
                {{"m", m.size()}, {"s", s.size()}});
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    const T* mv = m.data() + v * H;
    const T* sv = s.data() + v * H;
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        alpha[i + h] = mv[h] == kNegInf ? T(0) : std::exp(score[i + h] - mv[h]) / sv[h];
      }
    }
  });
}

template <typename T, typename I>
void segment_softmax_apply_grad_s(const Csr<I>& seg, int64_t H, std::span<const T> alpha,
                                  std::span<const T> grad_alpha, std::span<const T> s,
                                  std::span<T> grad_s) {
  expect_pieces("segment_softmax_apply_grad_s", seg, H,
                {{"alpha", alpha.size()}, {"grad_alpha", grad_alpha.size()}},
                {{"s", s.size()}, {"grad_s", grad_s.size()}});
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  detail::parallel_rows(seg, H, [&](int64_t v) {
    T* gv = grad_s.data() + v * H;
    const T* sv = s.data() + v * H;
    std::fill(gv, gv + H, T(0));
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) gv[h] += grad_alpha[i + h] * alpha[i + h];
    }
    for (int64_t h = 0; h < H; ++h) gv[h] = sv[h] != T(0) ? -gv[h] / sv[h] : T(0);
  });
}

#define GNNRT_INSTANTIATE(T, I)                                                               \
  template void segment_softmax_forward<T, I>(const Csr<I>&, int64_t, std::span<const T>,    \
                                              std::span<T>);                                  \
  template void segment_softmax_backward<T, I>(const Csr<I>&, int64_t, std::span<const T>,   \
                                               std::span<const T>, std::span<T>);             \
  template void segment_max<T, I>(const Csr<I>&, int64_t, std::span<const T>, std::span<T>);  \
  template void segment_exp_sum<T, I>(const Csr<I>&, int64_t, std::span<const T>,            \
                                      std::span<const T>, std::span<T>);                      \
  template void segment_exp_sum_grad<T, I>(const Csr<I>&, int64_t, std::span<const T>,       \
                                           std::span<const T>, std::span<const T>,            \
                                           std::span<T>);                                     \
  template void segment_softmax_apply<T, I>(const Csr<I>&, int64_t, std::span<const T>,      \
                                            std::span<const T>, std::span<const T>,           \
                                            std::span<T>);                                    \
  template void segment_softmax_apply_grad_s<T, I>(const Csr<I>&, int64_t, std::span<const T>, \
                                                   std::span<const T>, std::span<const T>,    \
                                                   std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
