// Message passing over a graph: gather to edges, scatter to nodes, fused sparse-dense products (spmm), edge weights,
// sparse-matrix products: each op's shape rule, cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/reduce.h"
#include "ops/scatter.h"
#include "ops/sparse_matmul.h"
#include "ops/spmm.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void gather(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  c.out_float({g.num_edges, c.cols(0)});
}

void per_edge_cost(const Program& p, const Op& op, OpCost& c) { c.flops = edges_of(p, op) * cols_of_first(p, op); }

template <typename T>
double run_gather(const Kernel<T>& run) {
  ops::gather_forward<T, int32_t>(run.graph().by_src, run.out_cols(), run.in(0), run.out());
  return 0;
}

void gather_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.gather_grad(d.a.graph(), d.g));
}

void gather_grad(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "g", g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  c.out_float({g.num_src, c.cols(0)});
}

template <typename T>
double run_gather_grad(const Kernel<T>& run) {
  ops::gather_backward<T, int32_t>(run.graph().by_src, run.out_cols(), run.in(0), run.out());
  return 0;
}

void scatter(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "messages", g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  value_and_arg(c, reduction(c), {g.num_dst, c.cols(0)});
}

template <typename T>
double run_scatter(const Kernel<T>& run) {
  ops::scatter_forward<T, int32_t>(reduce_of(run.attrs), run.graph().by_dst, run.out_cols(), run.in(0), run.out(),
                                   run.op.outputs.size() > 1 ? run.out_i32(1) : std::span<int32_t>());
  return 0;
}

void scatter_gradient(Gradient& d) {
  const ValueId arg = d.op.outputs.size() > 1 ? d.op.outputs[1] : kNoValue;
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.scatter_grad(reduce_of(d.a), d.a.graph(), d.g, arg));
}

// (g[, arg]) -> [E, F]
void scatter_grad(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "g", g.num_dst, fmt::format("the destination nodes of graph '{}'", g.name));
  const bool arg = ops::has_arg(reduction(c));
  if (arg != c.has(1)) c.fail(arg ? "a max/min needs its arg" : "a sum or mean takes no arg");
  if (c.has(1)) {
    c.dtype(1, DType::kI32, "arg");
    c.same_shape(0, 1, "g", "arg");
  }
  c.out_float({g.num_edges, c.cols(0)});
}

template <typename T>
double run_scatter_grad(const Kernel<T>& run) {
  ops::scatter_backward<T, int32_t>(reduce_of(run.attrs), run.graph().by_dst, run.out_cols(), run.in(0), run.in_i32(1),
                                    run.out());
  return 0;
}

// (x[, w]) -> (out[, arg])
void spmm(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  if (c.has(1)) {
    edge_weight(c, 1, g.num_edges, c.cols(0));
  } else {
    no_weight_heads(c);
  }
  value_and_arg(c, reduction(c), {g.num_dst, c.cols(0)});
}

// Each edge gathers a source row instead of reading x once.
void spmm_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.bytes += e * f * 4 - static_cast<double>(p.value(op.inputs[0]).bytes());
  c.flops = 2 * e * f;
}

template <typename T>
double run_spmm(const Kernel<T>& run) {
  ops::spmm_forward<T, int32_t>(reduce_of(run.attrs), run.graph(), run.out_cols(), run.in(0), run.in(1), run.out(),
                                run.op.outputs.size() > 1 ? run.out_i32(1) : std::span<int32_t>());
  return 0;
}

void spmm_gradient(Gradient& d) {
  const ValueId w = d.optional(1);
  const ValueId arg = d.op.outputs.size() > 1 ? d.op.outputs[1] : kNoValue;
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0], d.b.spmm_grad_x(reduce_of(d.a), d.a.graph(), d.op.inputs[0], w, d.g, arg));
  if (d.needs(w)) d.add(w, d.b.spmm_grad_w(reduce_of(d.a), d.a.graph(), d.op.inputs[0], d.g, w, arg));
}

// spmm_grad_x (x, g[, w][, arg]) and spmm_grad_w (x, g, w[, arg]).
void spmm_grad(OpCheck& c) {
  const bool grad_w = c.op().kind == OpKind::kSpmmGradW;
  c.operands(grad_w ? 3 : 2, 4);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  rows_of(c, 1, "g", g.num_dst, fmt::format("the destination nodes of graph '{}'", g.name));
  if (c.cols(1) != c.cols(0)) {
    c.fail(fmt::format("g {} must have x's {} columns", shape_string(c.shape(1)), c.cols(0)));
  }
  if (grad_w && !c.has(2)) c.fail("operand 2, the edge weight, is missing");
  if (c.has(2)) {
    edge_weight(c, 2, g.num_edges, c.cols(0));
  } else {
    no_weight_heads(c);
  }
  const bool arg = ops::has_arg(reduction(c));
  if (arg != c.has(3)) c.fail(arg ? "a max/min needs its arg" : "a sum or mean takes no arg");
  if (c.has(3)) {
    c.dtype(3, DType::kI32, "arg");
    c.same_shape(1, 3, "g", "arg");
  }
  c.out_float(grad_w ? c.shape(2) : c.shape(0));
}

template <typename T>
double run_spmm_grad_x(const Kernel<T>& run) {
  // inputs: x, g, edge weight (or none), arg (or none)
  ops::spmm_backward<T, int32_t>(reduce_of(run.attrs), run.graph(), run.out_cols(), run.in(0), run.in(2), run.in(1),
                                 run.in_i32(3), run.out(), {});
  return 0;
}

void spmm_grad_w_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.bytes += 2 * e * f * 4;
  c.flops = 2 * e * f;
}

template <typename T>
double run_spmm_grad_w(const Kernel<T>& run) {
  // inputs: x, g, edge weight, arg (or none)
  ops::spmm_backward<T, int32_t>(reduce_of(run.attrs), run.graph(), run.in_cols(0), run.in(0), run.in(2), run.in(1),
                                 run.in_i32(3), {}, run.out());
  return 0;
}

void edge_scale(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "messages");
  edge_weight(c, 1, c.rows(0), c.cols(0));
  c.out_float(c.shape(0));
}

template <typename T>
double run_edge_scale(const Kernel<T>& run) {
  ops::edge_scale<T>(run.in(0), run.in(1), run.out_rows(), run.attrs.heads(), run.out_cols() / run.attrs.heads(),
                     run.out());
  return 0;
}

void edge_scale_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.edge_scale(d.g, d.op.inputs[1]));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.edge_dot(d.g, d.op.inputs[0], d.op.inputs[1]));
}

// (g, messages) -> the edge weight's shape (given: [E] or [E, H])
void edge_dot(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "g");
  c.floating(1, "messages");
  c.same_shape(0, 1, "g", "messages");
  const int64_t heads = heads_of(c);
  const Shape& w = c.given(0);
  if (!(w == Shape{c.rows(0)} && heads == 1) && w != Shape{c.rows(0), heads}) {
    c.fail(fmt::format("the edge weight {} does not fit g {} with {} heads", shape_string(w), shape_string(c.shape(0)),
                       heads));
  }
  if (c.cols(0) % heads != 0) c.fail(fmt::format("g {} does not split into {} heads", shape_string(c.shape(0)), heads));
  c.out_float(w);
}

template <typename T>
double run_edge_dot(const Kernel<T>& run) {
  ops::edge_dot<T>(run.in(0), run.in(1), run.in_rows(0), run.attrs.heads(), run.in_cols(0) / run.attrs.heads(),
                   run.out());
  return 0;
}

// (values, b[, b2]) -> (out, workspace[, out2, workspace2])
void sparse_matmul(OpCheck& c) {
  c.operands(2, 3);
  const GraphInfo& g = stored_values(c, 0);
  matrix(c, 1, "b");
  const Shape& sb = c.shape(1);
  const bool tb = c.attrs().trans_b();
  const int64_t kb = tb ? sb[1] : sb[0], m = tb ? sb[0] : sb[1];
  if (kb != g.num_src) {
    c.fail(fmt::format("inner sizes differ: '{}' [{}, {}] times b {}{}", g.name, g.num_dst, g.num_src, shape_string(sb),
                       tb ? "ᵀ" : ""));
  }
  if (c.has(2)) c.same_shape(1, 2, "b", "b2");
  // b transposed once per call, so every stored value reads one contiguous row.
  for (std::size_t k = 1; k < c.count(); ++k) {
    c.out_float({g.num_dst, m}, k == 1 ? "" : ".2");
    c.out_float(tb ? Shape{g.num_src, m} : Shape{0}, ".workspace");
  }
}

// A sparse matrix's stored entry (its value, 4 bytes, and its indices)
// meets one row of the dense operand (b, or the gradient): 2 flops and 4
// bytes per element of that row, for each product of a pair.
void sparse_matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const GraphInfo& g = p.graphs[static_cast<std::size_t>(op.attrs.graph())];
  const double e = static_cast<double>(g.num_edges);
  const ValueId dense = op.inputs[1];
  const double products = static_cast<double>(op.inputs.size() - 1);
  const bool grad = op.kind == OpKind::kSparseMatMulGradB;
  const double m = static_cast<double>(grad ? p.value(dense).shape[1] : p.value(op.outputs[0]).shape[1]);
  c.flops = 2 * e * m * products;
  // Walked by rows (ops/sparse_matmul.h), G is read once and the rows each
  // entry updates stay in cache: the operands and results counted are what moves.
  if (grad && ops::sparse_matmul_backward_b_by_rows(g.num_dst, static_cast<int64_t>(m), item_size(p.float_type))) {
    return;
  }
  c.bytes += (e * m * 4 - static_cast<double>(p.value(dense).bytes())) * products;
}

template <typename T>
double run_sparse_mat_mul(const Kernel<T>& run) {
  if (run.op.inputs.size() == 3) {  // a pair (pair_sparse_products)
    ops::sparse_matmul_forward_pair<T, int32_t>(run.graph(), run.in(0), run.in(1), run.in(2), run.out_cols(),
                                                run.attrs.trans_b(), run.out(1), run.out(3), run.out(), run.out(2));
    return 0;
  }
  ops::sparse_matmul_forward<T, int32_t>(run.graph(), run.in(0), run.in(1), run.out_cols(), run.attrs.trans_b(),
                                         run.out(1), run.out());
  return 0;
}

void sparse_mat_mul_gradient(Gradient& d) {
  // X is an input (features): its values get no gradient.
  if (d.needs(d.op.inputs[0])) {
    throw ShapeError(
        fmt::format("program '{}': sparse_matmul ({}): the stored values of a "
                    "sparse matrix get no gradient",
                    d.b.program().name, d.op.scope));
  }
  if (d.needs(d.op.inputs[1])) {
    d.add(d.op.inputs[1], d.b.sparse_matmul_grad_b(d.a.graph(), d.op.inputs[0], d.g, d.op.inputs[1], d.a.trans_b()));
  }
}

// (values, g[, g2]) -> (b's shape, workspace[, b2's shape, workspace2])
void sparse_matmul_grad_b(OpCheck& c) {
  c.operands(2, 3);
  const GraphInfo& g = stored_values(c, 0);
  rows_of(c, 1, "g", g.num_dst, fmt::format("the rows of '{}'", g.name));
  if (c.has(2)) c.same_shape(1, 2, "g", "g2");
  const int64_t m = c.cols(1);
  const bool tb = c.attrs().trans_b();
  // Accumulators for a walk by rows that ends transposed (ops/sparse_matmul.h).
  const int64_t size = ops::sparse_matmul_backward_b_workspace(g.num_dst, g.num_src, m, tb, item_size(c.float_type()));
  for (std::size_t k = 1; k < c.count(); ++k) {
    c.out_float(tb ? Shape{m, g.num_src} : Shape{g.num_src, m}, k == 1 ? "" : ".2");
    c.out_float(size > 0 ? Shape{g.num_src, m} : Shape{0}, ".workspace");
  }
}

template <typename T>
double run_sparse_mat_mul_grad_b(const Kernel<T>& run) {
  if (run.op.inputs.size() == 3) {  // a pair (pair_sparse_products)
    ops::sparse_matmul_backward_b_pair<T, int32_t>(run.graph(), run.in(0), run.in(1), run.in(2), run.in_cols(1),
                                                   run.attrs.trans_b(), run.out(1), run.out(3), run.out(), run.out(2));
    return 0;
  }
  ops::sparse_matmul_backward_b<T, int32_t>(run.graph(), run.in(0), run.in(1), run.in_cols(1), run.attrs.trans_b(),
                                            run.out(1), run.out());
  return 0;
}

// (g, arg): g where arg < E, else 0
void keep_winners(OpCheck& c) {
  c.operands(2, 2);
  c.graph();
  c.same_shape(0, 1, "g", "arg");
  c.floating(0, "g");
  c.dtype(1, DType::kI32, "arg");
  c.out_float(c.shape(0));
}

template <typename T>
double run_keep_winners(const Kernel<T>& run) {
  const auto g = run.in(0);
  const auto arg = run.in_i32(1);
  const auto edges = static_cast<int32_t>(run.graph().num_edges());
  auto o = run.out();
  for (size_t k = 0; k < o.size(); ++k) o[k] = arg[k] < edges ? g[k] : T(0);
  return 0;
}

void keep_winners_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.keep_winners(d.a.graph(), d.g, d.op.inputs[1]));
}

}  // namespace

void define_graph(OpTable& t) {
  t.add({OpKind::kGather, 0, gather, per_edge_cost, GNNRT_KERNEL(run_gather), gather_gradient});
  t.add({OpKind::kGatherGrad, 0, gather_grad, per_edge_cost, GNNRT_KERNEL(run_gather_grad), nullptr});
  t.add({OpKind::kScatter, 0, scatter, per_edge_cost, GNNRT_KERNEL(run_scatter), scatter_gradient});
  t.add({OpKind::kScatterGrad, 0, scatter_grad, per_edge_cost, GNNRT_KERNEL(run_scatter_grad), nullptr});
  t.add({OpKind::kSpmm, 0, spmm, spmm_cost, GNNRT_KERNEL(run_spmm), spmm_gradient});
  t.add({OpKind::kSpmmGradX, 0, spmm_grad, spmm_cost, GNNRT_KERNEL(run_spmm_grad_x), nullptr});
  t.add({OpKind::kSpmmGradW, 0, spmm_grad, spmm_grad_w_cost, GNNRT_KERNEL(run_spmm_grad_w), nullptr});
  t.add({OpKind::kEdgeScale, 0, edge_scale, nullptr, GNNRT_KERNEL(run_edge_scale), edge_scale_gradient});
  t.add({OpKind::kEdgeDot, 0, edge_dot, nullptr, GNNRT_KERNEL(run_edge_dot), nullptr});
  t.add({OpKind::kSparseMatMul, 0, sparse_matmul, sparse_matmul_cost, GNNRT_KERNEL(run_sparse_mat_mul),
         sparse_mat_mul_gradient});
  t.add({OpKind::kSparseMatMulGradB, 0, sparse_matmul_grad_b, sparse_matmul_cost,
         GNNRT_KERNEL(run_sparse_mat_mul_grad_b), nullptr});
  t.add({OpKind::kKeepWinners, 0, keep_winners, nullptr, GNNRT_KERNEL(run_keep_winners), keep_winners_gradient});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {
namespace {
using ops::Reduce;
}  // namespace

ValueId Builder::aggregate(Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight) {
  ValueId messages = gather(graph, x);
  if (edge_weight != kNoValue) messages = edge_scale(messages, edge_weight);
  if (!partitioned()) return scatter(reduce, graph, messages).first;
  // On a rank of a partitioned graph: this rank's edges, then the halo.
  if (reduce == Reduce::kSum) return halo_sum(scatter(Reduce::kSum, graph, messages).first);
  if (reduce == Reduce::kMean) {
    const ValueId sum = halo_sum(scatter(Reduce::kSum, graph, messages).first);
    return divide_rows(sum, graph_input(graph, false));
  }
  const auto [local, arg] = scatter(reduce, graph, messages);
  return halo_max(reduce, local, arg, graph).first;
}

ValueId Builder::gather(int32_t graph, ValueId x) {
  return emit(OpKind::kGather, {x}, graph_attrs(OpKind::kGather, graph));
}

ValueId Builder::edge_scale(ValueId messages, ValueId edge_weight) {
  return emit(OpKind::kEdgeScale, {messages, edge_weight}, with_heads(weight_heads(edge_weight)));
}

std::pair<ValueId, ValueId> Builder::scatter(Reduce reduce, int32_t graph, ValueId messages) {
  OpAttrs a = graph_attrs(OpKind::kScatter, graph);
  a.set_reduce(to_proto(reduce));
  return reduction(OpKind::kScatter, {messages}, a);
}

std::pair<ValueId, ValueId> Builder::spmm(Reduce reduce, int32_t graph, ValueId x,
                                          ValueId edge_weight) {
  OpAttrs a = graph_attrs(OpKind::kSpmm, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(weight_heads(edge_weight));
  std::vector<ValueId> inputs{x};
  if (edge_weight != kNoValue) inputs.push_back(edge_weight);
  return reduction(OpKind::kSpmm, std::move(inputs), a);
}

ValueId Builder::sparse_matmul(int32_t matrix, ValueId values, ValueId b, bool trans_b) {
  OpAttrs a = graph_attrs(OpKind::kSparseMatMul, matrix);
  a.set_trans_b(trans_b);
  // Results: the product, and b transposed once per call (a workspace).
  return emit(OpKind::kSparseMatMul, {values, b}, a);
}

ValueId Builder::sparse_matmul_grad_b(int32_t matrix, ValueId values, ValueId g, ValueId /*b*/,
                                      bool trans_b) {
  OpAttrs a = graph_attrs(OpKind::kSparseMatMulGradB, matrix);
  a.set_trans_b(trans_b);
  // Results: b's gradient, and accumulators for a walk by rows that ends
  // transposed (ops/sparse_matmul.h).
  return emit(OpKind::kSparseMatMulGradB, {values, g}, a);
}

ValueId Builder::gather_grad(int32_t graph, ValueId g) {
  return emit(OpKind::kGatherGrad, {g}, graph_attrs(OpKind::kGatherGrad, graph));
}

ValueId Builder::edge_dot(ValueId g, ValueId messages, ValueId edge_weight) {
  return emit_op(OpKind::kEdgeDot, {g, messages}, with_heads(weight_heads(edge_weight)),
                 {{temp_name(OpKind::kEdgeDot), shape(edge_weight)}})[0];
}

ValueId Builder::scatter_grad(Reduce reduce, int32_t graph, ValueId g, ValueId arg) {
  OpAttrs a = graph_attrs(OpKind::kScatterGrad, graph);
  a.set_reduce(to_proto(reduce));
  std::vector<ValueId> inputs{g};
  if (arg != kNoValue) inputs.push_back(arg);
  return emit(OpKind::kScatterGrad, std::move(inputs), a);
}

ValueId Builder::spmm_grad_x(Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight,
                             ValueId g, ValueId arg) {
  OpAttrs a = graph_attrs(OpKind::kSpmmGradX, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(weight_heads(edge_weight));
  // Inputs: x, g, then the edge weight and the arg when present.
  return emit(OpKind::kSpmmGradX, {x, g, edge_weight, arg}, a);
}

ValueId Builder::spmm_grad_w(Reduce reduce, int32_t graph, ValueId x, ValueId g,
                             ValueId edge_weight, ValueId arg) {
  OpAttrs a = graph_attrs(OpKind::kSpmmGradW, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(weight_heads(edge_weight));
  // Inputs: x, g, the edge weight, the arg when present.
  return emit(OpKind::kSpmmGradW, {x, g, edge_weight, arg}, a);
}

ValueId Builder::keep_winners(int32_t graph, ValueId g, ValueId arg) {
  return emit(OpKind::kKeepWinners, {g, arg}, graph_attrs(OpKind::kKeepWinners, graph));
}

}  // namespace gnnrt::runtime
