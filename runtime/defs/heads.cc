// Multi-head ops: per-head dot products, means, edge products and matrix products: each op's shape rule, cost, kernel
// and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/head_edges.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void head_dot(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.floating(1, "att");
  const int64_t f = c.cols(0), heads = c.attrs().heads();
  if (heads < 1 || f % heads != 0 || c.in(1).elements() != f) {
    c.fail(fmt::format("x {} and att {} do not split into {} heads", shape_string(c.shape(0)), shape_string(c.shape(1)),
                       heads));
  }
  c.out_float({c.rows(0), heads});
}

template <typename T>
double run_head_dot(const Kernel<T>& run) {
  ops::head_dot_forward<T>(run.in(0), run.in(1), run.out_rows(), run.attrs.heads(), run.in_cols(0) / run.attrs.heads(),
                           run.out());
  return 0;
}

void head_dot_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.head_dot_grad_x(d.op.inputs[1], d.g, d.a.heads()));
  if (d.needs(d.op.inputs[1]))
    d.add(d.op.inputs[1], d.b.head_dot_grad_att(d.op.inputs[0], d.g, d.op.inputs[1], d.a.heads()));
}

// (att, g[, plus]) -> [N, H*C] (+ plus)
void head_dot_grad_x(OpCheck& c) {
  c.operands(2, 3);
  c.floating(0, "att");
  matrix(c, 1, "g");
  const int64_t heads = heads_of(c), f = c.in(0).elements();
  if (c.cols(1) != heads || f % heads != 0) {
    c.fail(fmt::format("att {} and g {} do not split into {} heads", shape_string(c.shape(0)), shape_string(c.shape(1)),
                       heads));
  }
  const Shape out{c.rows(1), f};
  if (c.has(2)) {
    c.floating(2, "plus");
    c.shape_is(2, out, "plus");
  }
  c.out_float(out);
}

template <typename T>
double run_head_dot_grad_x(const Kernel<T>& run) {
  ops::head_dot_backward_x<T>(run.in(0), run.in(1), run.out_rows(), run.attrs.heads(),
                              run.out_cols() / run.attrs.heads(), run.out(),
                              run.op.inputs.size() > 2 ? run.in(2) : std::span<const T>{});
  return 0;
}

// (x, g) -> att's shape (the result as given: att is not an operand)
void head_dot_grad_att(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  matrix(c, 1, "g");
  const int64_t heads = heads_of(c);
  if (c.shape(1) != Shape{c.rows(0), heads} || c.cols(0) % heads != 0) {
    c.fail(fmt::format("x {} and g {} do not split into {} heads", shape_string(c.shape(0)), shape_string(c.shape(1)),
                       heads));
  }
  const Shape& att = c.given(0);
  int64_t n = 1;
  for (int64_t d : att) n *= d;
  if (n != c.cols(0)) c.fail(fmt::format("att {} must hold {} elements", shape_string(att), c.cols(0)));
  c.out_float(att);
}

template <typename T>
double run_head_dot_grad_att(const Kernel<T>& run) {
  ops::head_dot_backward_att<T>(run.in(0), run.in(1), run.in_rows(0), run.attrs.heads(),
                                run.in_cols(0) / run.attrs.heads(), run.out());
  return 0;
}

void head_mean(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  const int64_t heads = c.attrs().heads();
  if (heads < 1 || c.cols(0) % heads != 0) {
    c.fail(fmt::format("x {} does not split into {} heads", shape_string(c.shape(0)), heads));
  }
  c.out_float({c.rows(0), c.cols(0) / heads});
}

template <typename T>
double run_head_mean(const Kernel<T>& run) {
  ops::head_mean_forward<T>(run.in(0), run.out_rows(), run.attrs.heads(), run.out_cols(), run.out());
  return 0;
}

void head_mean_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.head_mean_grad(d.g, d.a.heads()));
}

void head_mean_grad(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "g");
  c.out_float({c.rows(0), c.cols(0) * heads_of(c)});
}

template <typename T>
double run_head_mean_grad(const Kernel<T>& run) {
  ops::head_mean_backward<T>(run.in(0), run.out_rows(), run.attrs.heads(), run.in_cols(0), run.out());
  return 0;
}

// (a [N_dst, H*K], r [E, K]) -> [E, H]
void edge_head_dot(OpCheck& c) {
  c.operands(2, 2);
  head_edge_operands(c, 0, kAbsent, 1);
  c.out_float({c.graph().num_edges, c.attrs().heads()});
}

// Each edge meets its destination's H*K row once: a multiply-add apiece.
void head_edge_cost(const Program& p, const Op& op, OpCost& c) {
  const ValueInfo& out = p.value(op.outputs[0]);
  const double k = static_cast<double>(op.kind == OpKind::kHeadGather ? out.shape[1] : p.value(op.inputs[1]).shape[1]);
  c.flops = 2 * edges_of(p, op) * static_cast<double>(op.attrs.heads()) * k;
}

template <typename T>
double run_edge_head_dot(const Kernel<T>& run) {
  ops::edge_head_dot<T, int32_t>(run.graph(), run.attrs.heads(), run.in_cols(1), run.in(0), run.in(1), run.out());
  return 0;
}

// The three head-edge ops are each other's gradients (ops/head_edges.h).
void edge_head_dot_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.head_scatter(d.a.graph(), d.g, d.op.inputs[1]));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.head_gather(d.a.graph(), d.g, d.op.inputs[0]));
}

// (w [E, H], r [E, K]) -> [N_dst, H*K]
void head_scatter(OpCheck& c) {
  c.operands(2, 2);
  const int64_t k = head_edge_operands(c, kAbsent, 0, 1);
  c.out_float({c.graph().num_dst, c.attrs().heads() * k});
}

template <typename T>
double run_head_scatter(const Kernel<T>& run) {
  ops::head_scatter<T, int32_t>(run.graph(), run.attrs.heads(), run.in_cols(1), run.in(0), run.in(1), run.out());
  return 0;
}

void head_scatter_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.edge_head_dot(d.a.graph(), d.g, d.op.inputs[1], d.a.heads()));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.head_gather(d.a.graph(), d.op.inputs[0], d.g));
}

// (w [E, H], a [N_dst, H*K]) -> [E, K]
void head_gather(OpCheck& c) {
  c.operands(2, 2);
  const int64_t k = head_edge_operands(c, 1, 0, kAbsent);
  c.out_float({c.graph().num_edges, k});
}

template <typename T>
double run_head_gather(const Kernel<T>& run) {
  ops::head_gather<T, int32_t>(run.graph(), run.attrs.heads(), run.out_cols(), run.in(0), run.in(1), run.out());
  return 0;
}

void head_gather_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.edge_head_dot(d.a.graph(), d.op.inputs[1], d.g, d.a.heads()));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.head_scatter(d.a.graph(), d.op.inputs[0], d.g));
}

// (x [N, H*P], w [H*P, Q] or, trans_b, [H*Q, P]) -> [N, H*Q]
void head_matmul(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  matrix(c, 1, "w");
  const int64_t heads = heads_of(c);
  const bool trans = c.attrs().trans_b();
  const int64_t p = c.cols(0) / heads;
  const int64_t w_p = trans ? c.cols(1) : c.rows(1) / heads;
  if (c.cols(0) % heads != 0 || c.rows(1) % heads != 0 || w_p != p) {
    c.fail(fmt::format("x {} and w {}{} do not split into {} heads of one inner size", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), trans ? "ᵀ" : "", heads));
  }
  c.out_float({c.rows(0), heads * (trans ? c.rows(1) / heads : c.cols(1))});
}

// head_matmul and head_outer: a product per head, 2 · N · H · P · Q in all.
void head_matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const auto& a = p.value(op.inputs[0]).shape;
  const auto& o = p.value(op.outputs[0]).shape;
  c.flops = op.kind == OpKind::kHeadOuter ? 2 * static_cast<double>(a[0] * o[0] * o[1])
                                          : 2 * static_cast<double>(a[0] * a[1] * o[1] / op.attrs.heads());
}

template <typename T>
double run_head_mat_mul(const Kernel<T>& run) {
  const int64_t p_ = run.in_cols(0) / run.attrs.heads();
  ops::head_matmul<T>(run.in(0), run.in(1), run.out(), run.out_rows(), run.attrs.heads(), p_,
                      run.out_cols() / run.attrs.heads(), run.attrs.trans_b());
  return 0;
}

void head_mat_mul_gradient(Gradient& d) {
  // out_h = x_h w_h: dx_h = g_h w_hᵀ, dw_h = x_hᵀ g_h; transposed, dx_h = g_h w_h, dw_h = g_hᵀ x_h.
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.head_matmul(d.g, d.op.inputs[1], d.a.heads(), !d.a.trans_b()));
  if (d.needs(d.op.inputs[1]))
    d.add(d.op.inputs[1], d.a.trans_b() ? d.b.head_outer(d.g, d.op.inputs[0], d.a.heads())
                                        : d.b.head_outer(d.op.inputs[0], d.g, d.a.heads()));
}

// (a [N, H*P], b [N, H*Q]) -> [H*P, Q]
void head_outer(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const int64_t heads = heads_of(c);
  if (c.rows(0) != c.rows(1) || c.cols(0) % heads != 0 || c.cols(1) % heads != 0) {
    c.fail(fmt::format("a {} and b {} must have the same rows and split into {} heads", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), heads));
  }
  c.out_float({c.cols(0), c.cols(1) / heads});
}

template <typename T>
double run_head_outer(const Kernel<T>& run) {
  ops::head_outer<T>(run.in(0), run.in(1), run.out(), run.in_rows(0), run.attrs.heads(),
                     run.in_cols(0) / run.attrs.heads(), run.in_cols(1) / run.attrs.heads());
  return 0;
}

}  // namespace

void define_heads(OpTable& t) {
  t.add({OpKind::kHeadDot, 0, head_dot, nullptr, GNNRT_KERNEL(run_head_dot), head_dot_gradient});
  t.add({OpKind::kHeadDotGradX, 0, head_dot_grad_x, nullptr, GNNRT_KERNEL(run_head_dot_grad_x), nullptr});
  t.add({OpKind::kHeadDotGradAtt, 0, head_dot_grad_att, nullptr, GNNRT_KERNEL(run_head_dot_grad_att), nullptr});
  t.add({OpKind::kHeadMean, 0, head_mean, nullptr, GNNRT_KERNEL(run_head_mean), head_mean_gradient});
  t.add({OpKind::kHeadMeanGrad, 0, head_mean_grad, nullptr, GNNRT_KERNEL(run_head_mean_grad), nullptr});
  t.add({OpKind::kEdgeHeadDot, 0, edge_head_dot, head_edge_cost, GNNRT_KERNEL(run_edge_head_dot),
         edge_head_dot_gradient});
  t.add({OpKind::kHeadScatter, 0, head_scatter, head_edge_cost, GNNRT_KERNEL(run_head_scatter), head_scatter_gradient});
  t.add({OpKind::kHeadGather, 0, head_gather, head_edge_cost, GNNRT_KERNEL(run_head_gather), head_gather_gradient});
  t.add({OpKind::kHeadMatMul, 0, head_matmul, head_matmul_cost, GNNRT_KERNEL(run_head_mat_mul), head_mat_mul_gradient});
  t.add({OpKind::kHeadOuter, 0, head_outer, head_matmul_cost, GNNRT_KERNEL(run_head_outer), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

ValueId Builder::head_dot(ValueId x, ValueId att, int64_t heads) {
  return emit(OpKind::kHeadDot, {x, att}, with_heads(heads));
}

ValueId Builder::head_mean(ValueId x, int64_t heads) {
  return emit(OpKind::kHeadMean, {x}, with_heads(heads));
}

ValueId Builder::edge_head_dot(int32_t graph, ValueId a, ValueId r, int64_t heads) {
  OpAttrs attrs = graph_attrs(OpKind::kEdgeHeadDot, graph);
  attrs.set_heads(heads);
  return emit(OpKind::kEdgeHeadDot, {a, r}, attrs);
}

ValueId Builder::head_scatter(int32_t graph, ValueId w, ValueId r) {
  const ValueId sum = per_head(OpKind::kHeadScatter, graph, {w, r}, w);
  return partitioned() ? halo_sum(sum) : sum;
}

ValueId Builder::head_gather(int32_t graph, ValueId w, ValueId a) {
  return per_head(OpKind::kHeadGather, graph, {w, a}, w);
}

ValueId Builder::head_matmul(ValueId x, ValueId w, int64_t heads, bool trans_w) {
  OpAttrs attrs = with_heads(heads);
  attrs.set_trans_b(trans_w);
  return emit(OpKind::kHeadMatMul, {x, w}, attrs);
}

ValueId Builder::head_outer(ValueId a, ValueId b, int64_t heads) {
  return emit(OpKind::kHeadOuter, {a, b}, with_heads(heads));
}

ValueId Builder::head_dot_grad_x(ValueId att, ValueId g, int64_t heads) {
  return emit(OpKind::kHeadDotGradX, {att, g}, with_heads(heads));
}

ValueId Builder::head_dot_grad_att(ValueId x, ValueId g, ValueId att, int64_t heads) {
  return emit_op(OpKind::kHeadDotGradAtt, {x, g}, with_heads(heads), {{temp_name(OpKind::kHeadDotGradAtt), shape(att)}})[0];
}

ValueId Builder::head_mean_grad(ValueId g, int64_t heads) {
  return emit(OpKind::kHeadMeanGrad, {g}, with_heads(heads));
}

}  // namespace gnnrt::runtime
