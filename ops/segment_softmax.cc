#include "ops/segment_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/segment_reduce.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

void check_heads(std::string_view op, int64_t heads) {
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
}

}  // namespace

namespace {

// Per-destination values [N, H] (maxima, sums, dots) in a per-thread buffer
// that only grows, so a call allocates nothing once warm.
template <typename T>
T* node_scratch(int64_t size) {
  thread_local std::vector<T> scratch;
  if (static_cast<int64_t>(scratch.size()) < size) scratch.resize(static_cast<std::size_t>(size));
  return scratch.data();
}

// Heads known at compile time (1..16; 0: read from `heads`), so the loops
// over a score's heads unroll and a row's running values stay in registers
// (per-edge loops over a runtime H, with exp called per element, were slow:
// docs/kernels.md).
template <int kH>
struct Heads {
  int64_t runtime;
  constexpr int64_t operator()() const { return kH > 0 ? kH : runtime; }
};

// out[0, H) = the row's messages folded in ascending position:
// fold(acc, h, i) gives head h's new value from the message at i = edge * H.
// With kH > 0 the running values are a local array of constant size, which
// the compiler keeps in registers; writing them through a pointer into out
// stored and reloaded them every edge.
template <int kH, typename T, typename I, typename Fold>
[[gnu::always_inline]] inline void fold_row(const int64_t* rp, const I* edge, int64_t v,
                                            int64_t H, T init, Fold fold, T* __restrict out) {
  if constexpr (kH > 0) {
    T acc[kH];
    for (int h = 0; h < kH; ++h) acc[h] = init;
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * kH;
#pragma omp simd
      for (int h = 0; h < kH; ++h) acc[h] = fold(acc[h], h, i);
    }
    for (int h = 0; h < kH; ++h) out[h] = acc[h];
  } else {
    for (int64_t h = 0; h < H; ++h) out[h] = init;
    for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
      const int64_t i = static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) out[h] = fold(out[h], h, i);
    }
  }
}

// fn(i, n) for the scores i of edges [begin, end), n = the score's index
// in the per-destination arrays [N, H]. Vectorised over the edges for one
// head, over the heads of an edge for several (one flat loop with a gather
// per score was slower at 8 heads).
template <int kH, typename I, typename Fn>
[[gnu::always_inline]] inline void for_scores(const I* row, int64_t H, int64_t begin, int64_t end,
                                              Fn fn) {
  if constexpr (kH == 1) {
#pragma omp simd
    for (int64_t e = begin; e < end; ++e) fn(e, static_cast<int64_t>(row[e]));
  } else if constexpr (kH > 1) {
    for (int64_t e = begin; e < end; ++e) {
      const int64_t n = static_cast<int64_t>(row[e]) * kH;
#pragma omp simd
      for (int64_t h = 0; h < kH; ++h) fn(e * kH + h, n + h);
    }
  } else {
    for (int64_t e = begin; e < end; ++e) {
      for (int64_t h = 0; h < H; ++h) fn(e * H + h, static_cast<int64_t>(row[e]) * H + h);
    }
  }
}

// The passes of a softmax call, in order, in one OpenMP region: walks over
// each destination's edges (maxima and sums, in ascending edge position, so
// the result does not depend on the thread count; row(v)) and flat loops
// over the edges in id order (edges(begin, end)), which vectorise whatever
// H is. Each pass is its own function: one loop testing a pass number per
// element kept GCC from vectorising it.
template <typename I>
struct Passes {
  const Csr<I>& seg;
  int64_t heads;

  // Several passes and, forward, an exponential per score: a second thread
  // pays from about 8k scores and rows, a quarter of the aggregations'
  // kParallelWork (docs/kernels.md; the thread tuner still picks one thread
  // or two per op in a step).
  static constexpr int64_t kParallelScores = int64_t{1} << 13;

  bool parallel() const { return (seg.num_edges() + seg.num_rows()) * heads > kParallelScores; }
  // Each thread the same rows in every pass and call (detail::my_rows),
  // so its maxima and sums stay in its own cache; a dynamic schedule moved
  // them between the cores.
  template <typename RowFn>
  void rows(RowFn fn) const {
    const auto [begin, end] = detail::my_rows(seg);
    for (int64_t v = begin; v < end; ++v) fn(v);
#pragma omp barrier
  }
  // The edge ids [rowptr[begin], rowptr[end]) of the thread's rows: any
  // split of the ids is correct, and where edges are numbered in
  // destination order (the trainer's self-loop graph) these are the very
  // scores its row passes wrote.
  template <typename EdgeFn>
  void edges(EdgeFn fn) const {
    const auto [begin, end] = detail::my_rows(seg);
    fn(seg.rowptr()[static_cast<size_t>(begin)], seg.rowptr()[static_cast<size_t>(end)]);
#pragma omp barrier
  }
};

// Where a softmax's scores come from: an [E, H] array (segment_softmax), or
// GAT's attention logits leaky_relu(a_src[src(e)] + a_dst[dst(e)])
// (attention_softmax), computed in the max pass and kept in alpha until the
// exponentials overwrite them, with the bits of sddmm_add_forward and
// leaky_relu_forward (one addition, then the same select).
template <typename T>
struct ScoreArray {
  static constexpr bool kComputed = false;
  const T* score;
  T operator()(int64_t i, int64_t /*edge*/, int64_t /*h*/, int64_t /*n*/) const { return score[i]; }
};

template <typename T, typename I>
struct AttentionLogit {
  static constexpr bool kComputed = true;
  const T* a_src;
  const T* a_dst;
  const I* src;  // by edge id
  T slope;
  int64_t heads;
  // n: the index of (dst(e), h) in the per-destination arrays.
  T operator()(int64_t /*i*/, int64_t edge, int64_t h, int64_t n) const {
    const T x = a_src[static_cast<int64_t>(src[edge]) * heads + h] + a_dst[n];
    return x > T(0) ? x : slope * x;
  }
};

// Each destination's maximum, then e^(score - max) per edge, each
// destination's sum of those, then the division.
template <int kH, typename T, typename I, typename Score>
void softmax_forward(const Csr<I>& seg, Heads<kH> heads, Score score_of, T* alpha) {
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t H = heads();
  T* m = node_scratch<T>(2 * seg.num_rows() * H);
  T* sum = m + seg.num_rows() * H;
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const I* row = seg.row_of_edge().data();
  const auto max_of = [=](int64_t v) {
    if constexpr (kH == 1) {
      // One score per edge: a select the compiler keeps as a max
      // instruction, NaN tracked apart. improves() became a branch here,
      // mispredicted on about every other score.
      T acc = kNegInf;
      bool nan = false;
      for (int64_t p = rp[v]; p < rp[v + 1]; ++p) {
        const int64_t e = edge[p];
        const T s = score_of(e, e, 0, v);
        if constexpr (Score::kComputed) alpha[e] = s;
        acc = s > acc ? s : acc;
        nan |= s != s;
      }
      m[v] = nan ? std::numeric_limits<T>::quiet_NaN() : acc;
    } else {
      fold_row<kH>(rp, edge, v, heads(), kNegInf, [=](T acc, int64_t h, int64_t i) {
        const T s = score_of(i + h, i / heads(), h, v * heads() + h);
        if constexpr (Score::kComputed) alpha[i + h] = s;
        return detail::improves<Reduce::kMax>(s, acc) ? s : acc;
      }, m + v * heads());
    }
  };
  const auto sum_of = [=](int64_t v) {
    fold_row<kH>(rp, edge, v, heads(), T(0),
                 [=](T acc, int64_t h, int64_t i) { return acc + alpha[i + h]; }, sum + v * heads());
  };
  // A head whose scores are all -inf: exp(-inf - (-inf)) would be NaN; the
  // softmax of nothing is 0. (The division is computed for every score, so
  // the loop has no branch.) Computed scores are read back from alpha.
  const auto exp_of = [=](int64_t begin, int64_t end) {
    T* __restrict a = alpha;
    for_scores<kH>(row, heads(), begin, end, [=](int64_t i, int64_t n) {
      const T s = Score::kComputed ? a[i] : score_of(i, 0, 0, n);
      a[i] = m[n] == kNegInf ? T(0) : detail::exp_nonpositive(s - m[n]);
    });
  };
  const auto divide = [=](int64_t begin, int64_t end) {
    T* __restrict a = alpha;
    for_scores<kH>(row, heads(), begin, end, [=](int64_t i, int64_t n) {
      const T q = a[i] / sum[n];
      a[i] = m[n] == kNegInf ? T(0) : q;
    });
  };
  const Passes<I> passes{seg, H};
#pragma omp parallel if (passes.parallel())
  {
    passes.rows(max_of);
    passes.edges(exp_of);
    passes.rows(sum_of);
    passes.edges(divide);
  }
}

// Each destination's sum of alpha * grad_alpha, then grad_score = alpha
// (grad_alpha - that sum) per edge; for attention logits, times the leaky
// ReLU's slope where the logit's input was not positive (leaky_relu_backward's
// select), that input recomputed from a_src and a_dst.
template <int kH, typename T, typename I, typename Logit = std::nullptr_t>
void softmax_backward(const Csr<I>& seg, Heads<kH> heads, const T* alpha, const T* grad_alpha,
                      T* grad_score, Logit logit = nullptr) {
  const int64_t H = heads();
  T* dot = node_scratch<T>(seg.num_rows() * H);
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  const I* row = seg.row_of_edge().data();
  const auto dot_of = [=](int64_t v) {
    fold_row<kH>(rp, edge, v, heads(), T(0), [=](T acc, int64_t h, int64_t i) {
      return acc + alpha[i + h] * grad_alpha[i + h];
    }, dot + v * heads());
  };
  const auto grad = [=](int64_t begin, int64_t end) {
    const T* __restrict a = alpha;
    const T* __restrict ga = grad_alpha;
    T* __restrict gs = grad_score;
    if constexpr (std::is_same_v<Logit, std::nullptr_t>) {
      for_scores<kH>(row, heads(), begin, end,
                     [=](int64_t i, int64_t n) { gs[i] = a[i] * (ga[i] - dot[n]); });
    } else if constexpr (kH == 1) {
      const T* __restrict as = logit.a_src;
      const T* __restrict ad = logit.a_dst;
      const I* src = logit.src;
      const T slope = logit.slope;
#pragma omp simd
      for (int64_t e = begin; e < end; ++e) {
        const T g = a[e] * (ga[e] - dot[row[e]]);
        const T x = as[src[e]] + ad[row[e]];
        gs[e] = x > T(0) ? g : slope * g;
      }
    } else {
      // Per edge: its source's and destination's rows of a_src, a_dst.
      const int64_t width = heads();
      const T slope = logit.slope;
      for (int64_t e = begin; e < end; ++e) {
        const T* __restrict as = logit.a_src + static_cast<int64_t>(logit.src[e]) * width;
        const T* __restrict ad = logit.a_dst + static_cast<int64_t>(row[e]) * width;
        const T* __restrict dv = dot + static_cast<int64_t>(row[e]) * width;
        const int64_t i = e * width;
#pragma omp simd
        for (int64_t h = 0; h < width; ++h) {
          const T g = a[i + h] * (ga[i + h] - dv[h]);
          const T x = as[h] + ad[h];
          gs[i + h] = x > T(0) ? g : slope * g;
        }
      }
    }
  };
  const Passes<I> passes{seg, H};
#pragma omp parallel if (passes.parallel())
  {
    passes.rows(dot_of);
    passes.edges(grad);
  }
}

// Calls fn(Heads<kH>) with kH = heads when heads <= 16, else Heads<0>.
template <typename Fn>
void with_heads(int64_t heads, Fn fn) {
  const auto fixed = [&]<int kH>() { fn(Heads<kH>{heads}); };
  if (!detail::with_constant<1, 16>(heads, fixed)) fn(Heads<0>{heads});
}

}  // namespace

template <typename T, typename I>
void segment_softmax_forward(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                             std::span<T> alpha) {
  constexpr std::string_view op = "segment_softmax";
  check_heads(op, heads);
  expect_size(op, "score", score.size(), seg.num_edges() * heads, "E*H");
  expect_size(op, "alpha", alpha.size(), seg.num_edges() * heads, "E*H");
  with_heads(heads, [&](auto h) {
    softmax_forward(seg, h, ScoreArray<T>{score.data()}, alpha.data());
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
  with_heads(heads, [&](auto h) {
    softmax_backward(seg, h, alpha.data(), grad_alpha.data(), grad_score.data());
  });
}

namespace {

template <typename T, typename I>
AttentionLogit<T, I> attention_logit(std::string_view op, const Adjacency<I>& adj, int64_t heads,
                                     T negative_slope, std::span<const T> a_src,
                                     std::span<const T> a_dst) {
  check_heads(op, heads);
  expect_size(op, "a_src", a_src.size(), adj.num_src_nodes() * heads, "N_src*H");
  expect_size(op, "a_dst", a_dst.size(), adj.num_dst_nodes() * heads, "N_dst*H");
  return {a_src.data(), a_dst.data(), adj.by_src.row_of_edge().data(), negative_slope, heads};
}

}  // namespace

template <typename T, typename I>
void attention_softmax_forward(const Adjacency<I>& adj, int64_t heads, T negative_slope,
                               std::span<const T> a_src, std::span<const T> a_dst,
                               std::span<T> alpha) {
  constexpr std::string_view op = "attention_softmax";
  const auto logit = attention_logit(op, adj, heads, negative_slope, a_src, a_dst);
  expect_size(op, "alpha", alpha.size(), adj.num_edges() * heads, "E*H");
  with_heads(heads, [&](auto h) { softmax_forward(adj.by_dst, h, logit, alpha.data()); });
}

template <typename T, typename I>
void attention_softmax_backward(const Adjacency<I>& adj, int64_t heads, T negative_slope,
                                std::span<const T> a_src, std::span<const T> a_dst,
                                std::span<const T> alpha, std::span<const T> grad_alpha,
                                std::span<T> grad_logit) {
  constexpr std::string_view op = "attention_softmax_backward";
  const auto logit = attention_logit(op, adj, heads, negative_slope, a_src, a_dst);
  expect_size(op, "alpha", alpha.size(), adj.num_edges() * heads, "E*H");
  expect_size(op, "grad_alpha", grad_alpha.size(), adj.num_edges() * heads, "E*H");
  expect_size(op, "grad_logit", grad_logit.size(), adj.num_edges() * heads, "E*H");
  with_heads(heads, [&](auto h) {
    softmax_backward(adj.by_dst, h, alpha.data(), grad_alpha.data(), grad_logit.data(), logit);
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
      for (int64_t h = 0; h < H; ++h) sv[h] += mv[h] == kNegInf ? T(0) : detail::vexp(sc[h] - mv[h]);
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
        grad_score[i + h] = mv[h] == kNegInf ? T(0) : gv[h] * detail::vexp(score[i + h] - mv[h]);
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
        alpha[i + h] = mv[h] == kNegInf ? T(0) : detail::vexp(score[i + h] - mv[h]) / sv[h];
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
                                                   std::span<T>);       \
  template void attention_softmax_forward<T, I>(const Adjacency<I>&, int64_t, T,              \
                                                std::span<const T>, std::span<const T>,        \
                                                std::span<T>);                                 \
  template void attention_softmax_backward<T, I>(const Adjacency<I>&, int64_t, T,             \
                                                 std::span<const T>, std::span<const T>,       \
                                                 std::span<const T>, std::span<const T>,       \
                                                 std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
