// segment_softmax: softmax of per-edge scores over the edges of each
// destination (GAT's attention normalisation), per head:
//   alpha[e, h] = exp(s[e, h] - m[v, h]) / sum_{e' -> v} exp(s[e', h] - m[v, h])
// with m[v, h] the segment's max (stable). A segment whose scores are all
// -inf gives alpha = 0 and zero gradient instead of NaN; a single -inf score
// in a segment gets alpha = 0. Matches PyG's torch_geometric.utils.softmax
// (which adds 1e-16 to the denominator) to within float rounding.
//
// Layout (row-major): score, alpha, grad_alpha, grad_score [E, heads], by
// edge id. seg groups edges by destination (Adjacency::by_dst). Outputs
// overwritten. Blocking; OpenMP inside; deterministic. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void segment_softmax_forward(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                             std::span<T> alpha);

// grad_score[e] = alpha[e] * (grad_alpha[e] - sum_{e' in seg} alpha[e'] * grad_alpha[e'])
template <typename T, typename I>
void segment_softmax_backward(const Csr<I>& seg, int64_t heads, std::span<const T> alpha,
                              std::span<const T> grad_alpha, std::span<T> grad_score);

// attention_softmax: GAT's attention coefficients in one op,
//   alpha = segment_softmax(leaky_relu(a_src[src(e)] + a_dst[dst(e)], negative_slope))
// with the bits of sddmm_add_forward, leaky_relu_forward and
// segment_softmax_forward in turn: the logits are computed in the softmax's
// max pass and kept in alpha until its exponentials overwrite them, so the
// [E, H] logits and their activations are never written apart. Layout:
// a_src [N_src, heads], a_dst [N_dst, heads], alpha [E, heads] by edge id.
template <typename T, typename I>
void attention_softmax_forward(const Adjacency<I>& adj, int64_t heads, T negative_slope,
                               std::span<const T> a_src, std::span<const T> a_dst,
                               std::span<T> alpha);

// grad_logit = leaky_relu_backward(x, segment_softmax_backward(alpha,
// grad_alpha)) with x = a_src[src(e)] + a_dst[dst(e)] recomputed, the same
// bits; sddmm_add_backward of grad_logit gives a_src's and a_dst's gradients.
template <typename T, typename I>
void attention_softmax_backward(const Adjacency<I>& adj, int64_t heads, T negative_slope,
                                std::span<const T> a_src, std::span<const T> a_dst,
                                std::span<const T> alpha, std::span<const T> grad_alpha,
                                std::span<T> grad_logit);

// The same softmax in pieces, for a destination whose edges several ranks
// hold (vertex-cut): each rank reduces its own edges and the halo exchange
// combines the per-destination results between the pieces,
//   m = max over ranks of segment_max(score)          (a shift: no gradient)
//   s = sum over ranks of segment_exp_sum(score, m)
//   alpha = segment_softmax_apply(score, m, s)
// which is segment_softmax_forward's result up to rounding. Layout: m, s
// [N_dst, heads]; an empty segment has m = -inf, s = 0. The gradient of
// alpha is apply's (score: g * alpha, direct; s: apply_grad_s) followed by
// exp_sum's (exp_sum_grad), with the gradient of s summed over ranks in
// between.
template <typename T, typename I>
void segment_max(const Csr<I>& seg, int64_t heads, std::span<const T> score, std::span<T> m);
template <typename T, typename I>
void segment_exp_sum(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                     std::span<const T> m, std::span<T> s);
// grad_score[e] = grad_s[dst(e)] * exp(score[e] - m[dst(e)]) (0 where m = -inf).
template <typename T, typename I>
void segment_exp_sum_grad(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                          std::span<const T> m, std::span<const T> grad_s,
                          std::span<T> grad_score);
// alpha[e] = exp(score[e] - m[dst(e)]) / s[dst(e)] (0 where m = -inf).
template <typename T, typename I>
void segment_softmax_apply(const Csr<I>& seg, int64_t heads, std::span<const T> score,
                           std::span<const T> m, std::span<const T> s, std::span<T> alpha);
// grad_s[v] = -sum_{e -> v} grad_alpha[e] * alpha[e] / s[v] (0 where s = 0).
template <typename T, typename I>
void segment_softmax_apply_grad_s(const Csr<I>& seg, int64_t heads, std::span<const T> alpha,
                                  std::span<const T> grad_alpha, std::span<const T> s,
                                  std::span<T> grad_s);

}  // namespace gnnrt::ops
