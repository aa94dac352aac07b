// Edge scores and softmaxes over each destination's in-edges (GAT and scene attention): each op's shape rule, cost,
// kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void sddmm_add(OpCheck& c) {
  c.operands(2, 2);
  const int64_t h = per_endpoint(c, 0);
  c.out_float({c.graph().num_edges, h});
}

template <typename T>
double run_sddmm_add(const Kernel<T>& run) {
  ops::sddmm_add_forward<T, int32_t>(run.graph(), run.attrs.heads(), run.in(0), run.in(1), run.out());
  return 0;
}

void sddmm_add_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.sddmm_add_grad_a(d.a.graph(), d.g));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.sddmm_add_grad_b(d.a.graph(), d.g));
}

// (g [E, H]) -> [N_src or N_dst, H]
void sddmm_add_grad(OpCheck& c) {
  c.operands(1, 1);
  const int64_t h = edge_scores(c, 0, "g");
  const GraphInfo& g = c.graph();
  c.out_float({c.op().kind == OpKind::kSddmmAddGradA ? g.num_src : g.num_dst, h});
}

template <typename T>
double run_sddmm_add_grad_a(const Kernel<T>& run) {
  ops::sddmm_add_backward<T, int32_t>(run.graph(), run.attrs.heads(), run.in(0), run.out(), {});
  return 0;
}

template <typename T>
double run_sddmm_add_grad_b(const Kernel<T>& run) {
  ops::sddmm_add_backward<T, int32_t>(run.graph(), run.attrs.heads(), run.in(0), {}, run.out());
  return 0;
}

void sddmm_dot(OpCheck& c) {
  c.operands(2, 2);
  const GraphInfo& g = c.graph();
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const int64_t heads = c.attrs().heads();
  if (c.rows(0) != g.num_src || c.rows(1) != g.num_dst || c.cols(0) != c.cols(1) || heads < 1 ||
      c.cols(0) % heads != 0) {
    c.fail(fmt::format("a {} must be [{}, F] and b {} [{}, F] with F divisible by {} heads (graph '{}')",
                       shape_string(c.shape(0)), g.num_src, shape_string(c.shape(1)), g.num_dst, heads, g.name));
  }
  c.out_float({g.num_edges, heads});
}

template <typename T>
double run_sddmm_dot(const Kernel<T>& run) {
  ops::sddmm_dot_forward<T, int32_t>(run.graph(), run.in_cols(0), run.attrs.heads(), run.in(0), run.in(1), run.out());
  return 0;
}

void sddmm_dot_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0], d.b.sddmm_dot_grad_a(d.a.graph(), d.op.inputs[1], d.g, d.a.heads()));
  if (d.needs(d.op.inputs[1]))
    d.add(d.op.inputs[1], d.b.sddmm_dot_grad_b(d.a.graph(), d.op.inputs[0], d.g, d.a.heads()));
}

// sddmm_dot_grad_a (b, g) -> [N_src, F]; sddmm_dot_grad_b (a, g) -> [N_dst, F]
void sddmm_dot_grad(OpCheck& c) {
  c.operands(2, 2);
  const GraphInfo& g = c.graph();
  const bool grad_a = c.op().kind == OpKind::kSddmmDotGradA;
  const int64_t other = grad_a ? g.num_dst : g.num_src;
  rows_of(c, 0, grad_a ? "b" : "a", other, fmt::format("an endpoint set of graph '{}'", g.name));
  const int64_t heads = edge_scores(c, 1, "g");
  if (c.cols(0) % heads != 0) {
    c.fail(fmt::format("{} {} does not split into {} heads", grad_a ? "b" : "a", shape_string(c.shape(0)), heads));
  }
  c.out_float({grad_a ? g.num_src : g.num_dst, c.cols(0)});
}

template <typename T>
double run_sddmm_dot_grad_a(const Kernel<T>& run) {
  // Only b's values are read for a's gradient (and a's for b's).
  ops::sddmm_dot_backward<T, int32_t>(run.graph(), run.out_cols(), run.attrs.heads(), {}, run.in(0), run.in(1),
                                      run.out(), {});
  return 0;
}

template <typename T>
double run_sddmm_dot_grad_b(const Kernel<T>& run) {
  ops::sddmm_dot_backward<T, int32_t>(run.graph(), run.out_cols(), run.attrs.heads(), run.in(0), {}, run.in(1), {},
                                      run.out());
  return 0;
}

void segment_softmax(OpCheck& c) {
  c.operands(1, 1);
  edge_scores(c, 0, "score");
  c.out_float(c.shape(0));
}

void softmax_cost(const Program& p, const Op& op, OpCost& c) { c.flops = 5 * edges_of(p, op) * cols_of_first(p, op); }

template <typename T>
double run_segment_softmax(const Kernel<T>& run) {
  ops::segment_softmax_forward<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.out());
  return 0;
}

void segment_softmax_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.segment_softmax_grad(d.a.graph(), d.op.outputs[0], d.g));
}

// (alpha, g) -> [E, H]
void segment_softmax_grad(OpCheck& c) {
  c.operands(2, 2);
  edge_scores(c, 0, "alpha");
  c.floating(1, "g");
  c.same_shape(0, 1, "alpha", "g");
  c.out_float(c.shape(0));
}

template <typename T>
double run_segment_softmax_grad(const Kernel<T>& run) {
  ops::segment_softmax_backward<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.in(1), run.out());
  return 0;
}

void attention_softmax(OpCheck& c) {
  c.operands(2, 2);
  if (c.program().partitioned) c.fail("a partitioned program's softmax runs in pieces (Builder::softmax)");
  const int64_t h = per_endpoint(c, 0);
  c.out_float({c.graph().num_edges, h});
}

// The softmax's and, per logit, sddmm_add's addition and the leaky ReLU's
// select; each edge reads its source's row of a.
void attention_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.flops = 7 * e * f;
  c.bytes += e * f * 4;
}

template <typename T>
double run_attention_softmax(const Kernel<T>& run) {
  ops::attention_softmax_forward<T, int32_t>(run.graph(), run.attrs.heads(), static_cast<T>(run.attrs.negative_slope()), run.in(0), run.in(1),
                                             run.out());
  return 0;
}

void attention_softmax_gradient(Gradient& d) {
  if (!d.needs(d.op.inputs[0]) && !d.needs(d.op.inputs[1])) return;
  const ValueId logit =
      d.b.attention_softmax_grad(d.a.graph(), d.op.inputs[0], d.op.inputs[1], d.op.outputs[0], d.g, d.a.negative_slope());
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.sddmm_add_grad_a(d.a.graph(), logit));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.sddmm_add_grad_b(d.a.graph(), logit));
}

// (a, b, alpha, g) -> [E, H]
void attention_softmax_grad(OpCheck& c) {
  c.operands(4, 4);
  per_endpoint(c, 0);
  edge_scores(c, 2, "alpha");
  c.floating(3, "g");
  c.same_shape(2, 3, "alpha", "g");
  c.out_float(c.shape(2));
}

template <typename T>
double run_attention_softmax_grad(const Kernel<T>& run) {
  ops::attention_softmax_backward<T, int32_t>(run.graph(), run.attrs.heads(), static_cast<T>(run.attrs.negative_slope()), run.in(0), run.in(1),
                                              run.in(2), run.in(3), run.out());
  return 0;
}

void segment_max(OpCheck& c) {
  c.operands(1, 1);
  const int64_t h = edge_scores(c, 0, "score");
  c.out_float({c.graph().num_dst, h});
}

template <typename T>
double run_segment_max(const Kernel<T>& run) {
  ops::segment_max<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.out());
  return 0;
}

// (score, m) -> s
void segment_exp_sum(OpCheck& c) {
  c.operands(2, 2);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  c.out_float({c.graph().num_dst, h});
}

template <typename T>
double run_segment_exp_sum(const Kernel<T>& run) {
  ops::segment_exp_sum<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.in(1), run.out());
  return 0;
}

void segment_exp_sum_gradient(Gradient& d) {
  // m (in[1]) is a shift: no gradient.
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0], d.b.segment_exp_sum_grad(d.a.graph(), d.op.inputs[0], d.op.inputs[1], d.g));
}

// (score, m, g) -> [E, H]
void segment_exp_sum_grad(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  dst_rows(c, 2, "g", h);
  c.out_float(c.shape(0));
}

template <typename T>
double run_segment_exp_sum_grad(const Kernel<T>& run) {
  ops::segment_exp_sum_grad<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.in(1), run.in(2),
                                        run.out());
  return 0;
}

// (score, m, s) -> alpha
void segment_softmax_apply(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  dst_rows(c, 2, "s", h);
  c.out_float(c.shape(0));
}

template <typename T>
double run_segment_softmax_apply(const Kernel<T>& run) {
  ops::segment_softmax_apply<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.in(1), run.in(2),
                                         run.out());
  return 0;
}

void segment_softmax_apply_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.mul(d.g, d.op.outputs[0]));
  if (d.needs(d.op.inputs[2]))
    d.add(d.op.inputs[2], d.b.segment_softmax_apply_grad_s(d.a.graph(), d.op.outputs[0], d.g, d.op.inputs[2]));
}

// (alpha, g, s) -> [N_dst, H]
void segment_softmax_apply_grad_s(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "alpha");
  c.floating(1, "g");
  c.same_shape(0, 1, "alpha", "g");
  dst_rows(c, 2, "s", h);
  c.out_float(c.shape(2));
}

template <typename T>
double run_segment_softmax_apply_grad_s(const Kernel<T>& run) {
  ops::segment_softmax_apply_grad_s<T, int32_t>(run.graph().by_dst, run.attrs.heads(), run.in(0), run.in(1), run.in(2),
                                                run.out());
  return 0;
}

}  // namespace

void define_attention(OpTable& t) {
  t.add({OpKind::kSddmmAdd, 0, sddmm_add, nullptr, GNNRT_KERNEL(run_sddmm_add), sddmm_add_gradient});
  t.add({OpKind::kSddmmAddGradA, 0, sddmm_add_grad, nullptr, GNNRT_KERNEL(run_sddmm_add_grad_a), nullptr});
  t.add({OpKind::kSddmmAddGradB, 0, sddmm_add_grad, nullptr, GNNRT_KERNEL(run_sddmm_add_grad_b), nullptr});
  t.add({OpKind::kSddmmDot, 0, sddmm_dot, nullptr, GNNRT_KERNEL(run_sddmm_dot), sddmm_dot_gradient});
  t.add({OpKind::kSddmmDotGradA, 0, sddmm_dot_grad, nullptr, GNNRT_KERNEL(run_sddmm_dot_grad_a), nullptr});
  t.add({OpKind::kSddmmDotGradB, 0, sddmm_dot_grad, nullptr, GNNRT_KERNEL(run_sddmm_dot_grad_b), nullptr});
  t.add({OpKind::kSegmentSoftmax, 0, segment_softmax, softmax_cost, GNNRT_KERNEL(run_segment_softmax),
         segment_softmax_gradient});
  t.add({OpKind::kSegmentSoftmaxGrad, 0, segment_softmax_grad, softmax_cost, GNNRT_KERNEL(run_segment_softmax_grad),
         nullptr});
  t.add({OpKind::kAttentionSoftmax, 0, attention_softmax, attention_cost, GNNRT_KERNEL(run_attention_softmax),
         attention_softmax_gradient});
  t.add({OpKind::kAttentionSoftmaxGrad, 0, attention_softmax_grad, attention_cost,
         GNNRT_KERNEL(run_attention_softmax_grad), nullptr});
  // A shift that cancels out of the softmax.
  t.add({OpKind::kSegmentMax, kNoGradient, segment_max, nullptr, GNNRT_KERNEL(run_segment_max), nullptr});
  t.add({OpKind::kSegmentExpSum, 0, segment_exp_sum, nullptr, GNNRT_KERNEL(run_segment_exp_sum),
         segment_exp_sum_gradient});
  t.add(
      {OpKind::kSegmentExpSumGrad, 0, segment_exp_sum_grad, nullptr, GNNRT_KERNEL(run_segment_exp_sum_grad), nullptr});
  t.add({OpKind::kSegmentSoftmaxApply, 0, segment_softmax_apply, nullptr, GNNRT_KERNEL(run_segment_softmax_apply),
         segment_softmax_apply_gradient});
  t.add({OpKind::kSegmentSoftmaxApplyGradS, 0, segment_softmax_apply_grad_s, nullptr,
         GNNRT_KERNEL(run_segment_softmax_apply_grad_s), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {
namespace {
using ops::Reduce;
}  // namespace

ValueId Builder::softmax(int32_t graph, ValueId score) {
  if (!partitioned()) return segment_softmax(graph, score);
  // Max, then the sum of exponentials, each combined over the replicas of
  // the destination; the max is a shift only (no gradient flows through it).
  const ValueId m = halo_max(Reduce::kMax, segment_max(graph, score)).first;
  const ValueId s = halo_sum(segment_exp_sum(graph, score, m));
  return segment_softmax_apply(graph, score, m, s);
}

ValueId Builder::segment_softmax(int32_t graph, ValueId score) {
  return per_head(OpKind::kSegmentSoftmax, graph, {score}, score);
}

ValueId Builder::attention_softmax(int32_t graph, ValueId a, ValueId b, double slope) {
  OpAttrs attrs = graph_attrs(OpKind::kAttentionSoftmax, graph);
  if (shape(a).size() == 2) attrs.set_heads(shape(a)[1]);
  attrs.set_negative_slope(slope);
  return emit(OpKind::kAttentionSoftmax, {a, b}, attrs);
}

ValueId Builder::segment_max(int32_t graph, ValueId score) {
  return per_head(OpKind::kSegmentMax, graph, {score}, score);
}

ValueId Builder::segment_exp_sum(int32_t graph, ValueId score, ValueId m) {
  return per_head(OpKind::kSegmentExpSum, graph, {score, m}, score);
}

ValueId Builder::segment_softmax_apply(int32_t graph, ValueId score, ValueId m, ValueId s) {
  return per_head(OpKind::kSegmentSoftmaxApply, graph, {score, m, s}, score);
}

ValueId Builder::sddmm_add(int32_t graph, ValueId a, ValueId b) {
  return per_head(OpKind::kSddmmAdd, graph, {a, b}, a);
}

ValueId Builder::sddmm_dot(int32_t graph, ValueId a, ValueId b, int64_t heads) {
  OpAttrs attrs = graph_attrs(OpKind::kSddmmDot, graph);
  attrs.set_heads(heads);
  return emit(OpKind::kSddmmDot, {a, b}, attrs);
}

ValueId Builder::sddmm_add_grad_a(int32_t graph, ValueId g) {
  return per_head(OpKind::kSddmmAddGradA, graph, {g}, g);
}

ValueId Builder::sddmm_add_grad_b(int32_t graph, ValueId g) {
  return per_head(OpKind::kSddmmAddGradB, graph, {g}, g);
}

ValueId Builder::sddmm_dot_grad_a(int32_t graph, ValueId b, ValueId g, int64_t heads) {
  OpAttrs a = graph_attrs(OpKind::kSddmmDotGradA, graph);
  a.set_heads(heads);
  return emit(OpKind::kSddmmDotGradA, {b, g}, a);
}

ValueId Builder::sddmm_dot_grad_b(int32_t graph, ValueId a, ValueId g, int64_t heads) {
  OpAttrs attrs = graph_attrs(OpKind::kSddmmDotGradB, graph);
  attrs.set_heads(heads);
  return emit(OpKind::kSddmmDotGradB, {a, g}, attrs);
}

ValueId Builder::segment_softmax_grad(int32_t graph, ValueId alpha, ValueId g) {
  return per_head(OpKind::kSegmentSoftmaxGrad, graph, {alpha, g}, alpha);
}

ValueId Builder::attention_softmax_grad(int32_t graph, ValueId a, ValueId b, ValueId alpha,
                                        ValueId g, double slope) {
  OpAttrs attrs = graph_attrs(OpKind::kAttentionSoftmaxGrad, graph);
  if (shape(alpha).size() == 2) attrs.set_heads(shape(alpha)[1]);
  attrs.set_negative_slope(slope);
  return emit(OpKind::kAttentionSoftmaxGrad, {a, b, alpha, g}, attrs);
}

ValueId Builder::segment_exp_sum_grad(int32_t graph, ValueId score, ValueId m, ValueId g) {
  return per_head(OpKind::kSegmentExpSumGrad, graph, {score, m, g}, score);
}

ValueId Builder::segment_softmax_apply_grad_s(int32_t graph, ValueId alpha, ValueId g, ValueId s) {
  return per_head(OpKind::kSegmentSoftmaxApplyGradS, graph, {alpha, g, s}, alpha);
}

}  // namespace gnnrt::runtime
