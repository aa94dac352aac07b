// Normalisation: layer norm (per node or per graph), row division, GCN's symmetric edge norm: each op's shape rule,
// cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/elementwise.h"
#include "ops/gcn_norm.h"
#include "ops/layer_norm.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

// Layer norm's statistics: per node (PyTorch's LayerNorm) or per graph (PyG's).
ops::LayerNormMode norm_mode(const OpAttrs& a) {
  return a.per_node() ? ops::LayerNormMode::kNode : ops::LayerNormMode::kGraph;
}

// (x[, mask]) -> [3] f64
void layer_norm_moments(OpCheck& c) {
  c.operands(1, 2);
  matrix(c, 0, "x");
  if (c.has(1)) vector_of(c, 1, DType::kBool, c.rows(0), "mask");
  c.out(DType::kF64, {3});
}

template <typename T>
double run_layer_norm_moments(const Kernel<T>& run) {
  ops::layer_norm_moments<T>(run.in(0), run.in_u8(1), run.in_rows(0), run.in_cols(0), run.out_f64());
  return 0;
}

// (x, gamma, beta[, moments[, mask]])
void layer_norm(OpCheck& c) {
  c.operands(3, 5);
  matrix(c, 0, "x");
  if (c.shape(1) != Shape{c.cols(0)} || c.shape(2) != Shape{c.cols(0)}) {
    c.fail(fmt::format("weight {} and bias {} must be [{}] for x {}", shape_string(c.shape(1)),
                       shape_string(c.shape(2)), c.cols(0), shape_string(c.shape(0))));
  }
  c.floating(2, "bias");
  norm_operands(c, 3);
  if (c.has(4)) vector_of(c, 4, DType::kBool, c.rows(0), "mask");
  c.out_float(c.shape(0));
}

template <typename T>
double run_layer_norm(const Kernel<T>& run) {
  ops::layer_norm_forward<T>(norm_mode(run.attrs), run.in(0), run.in(1), run.in(2), run.in_f64(3), run.out_rows(),
                             run.out_cols(), run.attrs.norm_eps(), run.out());
  return 0;
}

void layer_norm_gradient(Gradient& d) {
  // Graph mode: the statistics' gradient terms need sums over every
  // row that used them, on all ranks of a partitioned program.
  const ValueId moments = d.optional(3), mask = d.optional(4);
  if (d.needs(d.op.inputs[0])) {
    ValueId sums = kNoValue;
    if (moments != kNoValue) {
      sums = d.b.layer_norm_grad_sums(d.op.inputs[0], d.op.inputs[1], d.g, moments);
      if (d.b.program().partitioned) sums = d.b.allreduce(sums);
    }
    d.add(d.op.inputs[0], d.b.layer_norm_grad_x(d.op.inputs[0], d.op.inputs[1], d.g, moments, sums, mask, d.a));
  }
  if (d.needs(d.op.inputs[1]))
    d.add(d.op.inputs[1], d.b.layer_norm_grad_gamma(d.op.inputs[0], d.g, d.op.inputs[1], moments, d.a));
  if (d.needs(d.op.inputs[2])) d.add(d.op.inputs[2], d.b.bias_grad(d.g));
}

// (x, gamma, g, moments) -> [2] f64
void layer_norm_grad_sums(OpCheck& c) {
  c.operands(4, 4);
  matrix(c, 0, "x");
  c.floating(1, "weight");
  c.shape_is(1, {c.cols(0)}, "weight");
  c.floating(2, "g");
  c.same_shape(0, 2, "x", "g");
  vector_of(c, 3, DType::kF64, 3, "moments");
  c.out(DType::kF64, {2});
}

template <typename T>
double run_layer_norm_grad_sums(const Kernel<T>& run) {
  ops::layer_norm_grad_sums<T>(run.in(0), run.in(1), run.in(2), run.in_f64(3), run.in_rows(0), run.in_cols(0),
                               run.out_f64());
  return 0;
}

// (x, gamma, g[, moments, sums[, mask]]) -> x's shape
void layer_norm_grad_x(OpCheck& c) {
  c.operands(3, 6);
  if (c.count() == 4) c.fail("the moments come with their sums");
  norm_operands(c, 3);
  c.floating(2, "g");
  c.same_shape(0, 2, "x", "g");
  if (c.has(4)) vector_of(c, 4, DType::kF64, 2, "sums");
  if (c.has(5)) vector_of(c, 5, DType::kBool, c.rows(0), "mask");
  c.out_float(c.shape(0));
}

template <typename T>
double run_layer_norm_grad_x(const Kernel<T>& run) {
  ops::layer_norm_backward_x<T>(norm_mode(run.attrs), run.in(0), run.in(1), run.in(2), run.in_f64(3), run.in_f64(4),
                                run.in_u8(5), run.out_rows(), run.out_cols(), run.attrs.norm_eps(), run.out());
  return 0;
}

// (x, g[, moments]) -> [C]
void layer_norm_grad_gamma(OpCheck& c) {
  c.operands(2, 3);
  matrix(c, 0, "x");
  c.floating(1, "g");
  c.same_shape(0, 1, "x", "g");
  if (c.attrs().per_node() == c.has(2)) {
    c.fail(c.attrs().per_node() ? "per-node mode takes no moments" : "graph mode needs the moments");
  }
  if (c.has(2)) vector_of(c, 2, DType::kF64, 3, "moments");
  c.out_float({c.cols(0)});
}

template <typename T>
double run_layer_norm_grad_gamma(const Kernel<T>& run) {
  ops::layer_norm_backward_gamma<T>(norm_mode(run.attrs), run.in(0), run.in(1), run.in_f64(2), run.in_rows(0),
                                    run.in_cols(0), run.attrs.norm_eps(), run.out());
  return 0;
}

void divide_rows(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.dtype(1, DType::kI64, "degree");
  if (c.shape(1) != Shape{c.rows(0)}) {
    c.fail(
        fmt::format("degree {} must be [{}] for x {}", shape_string(c.shape(1)), c.rows(0), shape_string(c.shape(0))));
  }
  c.out_float(c.shape(0));
}

template <typename T>
double run_divide_rows(const Kernel<T>& run) {
  ops::divide_rows<T>(run.in(0), run.in_i64(1), run.out_cols(), run.out());
  return 0;
}

void divide_rows_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.divide_rows(d.g, d.op.inputs[1]));
}

// ([degree]) -> [E]
void gcn_norm(OpCheck& c) {
  c.operands(0, 1);
  const GraphInfo& g = c.graph();
  if (g.num_src != g.num_dst) {
    c.fail(fmt::format("graph '{}' joins {} source and {} destination nodes; GCN needs one node set", g.name, g.num_src,
                       g.num_dst));
  }
  if (c.has(0)) vector_of(c, 0, DType::kI64, g.num_dst, "degree");
  c.out_float({g.num_edges});
}

template <typename T>
double run_gcn_norm(const Kernel<T>& run) {
  if (is_graph_constant(run.op)) return 0;  // bound to its value, computed once (Core::bind)
  ops::gcn_norm<T, int32_t>(run.graph(), run.in_i64(0), run.out());
  return 0;
}

}  // namespace

void define_norm(OpTable& t) {
  t.add({OpKind::kLayerNormMoments, kNoGradient, layer_norm_moments, nullptr, GNNRT_KERNEL(run_layer_norm_moments),
         nullptr});
  t.add({OpKind::kLayerNorm, 0, layer_norm, nullptr, GNNRT_KERNEL(run_layer_norm), layer_norm_gradient});
  t.add(
      {OpKind::kLayerNormGradSums, 0, layer_norm_grad_sums, nullptr, GNNRT_KERNEL(run_layer_norm_grad_sums), nullptr});
  t.add({OpKind::kLayerNormGradX, 0, layer_norm_grad_x, nullptr, GNNRT_KERNEL(run_layer_norm_grad_x), nullptr});
  t.add({OpKind::kLayerNormGradGamma, 0, layer_norm_grad_gamma, nullptr, GNNRT_KERNEL(run_layer_norm_grad_gamma),
         nullptr});
  t.add({OpKind::kDivideRows, 0, divide_rows, nullptr, GNNRT_KERNEL(run_divide_rows), divide_rows_gradient});
  t.add({OpKind::kGcnNorm, kNoGradient, gcn_norm, nullptr, GNNRT_KERNEL(run_gcn_norm), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

ValueId Builder::layer_norm_moments(ValueId x, ValueId mask) {
  std::vector<ValueId> inputs{x};
  if (mask != kNoValue) inputs.push_back(mask);
  return emit(OpKind::kLayerNormMoments, std::move(inputs));
}

ValueId Builder::layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps) {
  OpAttrs a;
  a.set_norm_eps(eps);
  a.set_per_node(per_node);
  std::vector<ValueId> inputs{x, gamma, beta};
  if (!per_node) {
    // Graph mode: statistics over every vertex once (its master's row) and
    // all-reduced on several ranks; the mask goes along for the backward.
    const ValueId mask = partitioned() ? node_input(kNodeIsMaster, DType::kBool) : kNoValue;
    ValueId moments = layer_norm_moments(x, mask);
    if (partitioned()) moments = allreduce(moments);
    inputs.push_back(moments);
    if (mask != kNoValue) inputs.push_back(mask);
  }
  return emit(OpKind::kLayerNorm, std::move(inputs), a);
}

ValueId Builder::divide_rows(ValueId x, ValueId degree) { return emit(OpKind::kDivideRows, {x, degree}); }

ValueId Builder::gcn_norm(int32_t graph) {
  constexpr OpKind k = OpKind::kGcnNorm;
  OpAttrs a = graph_attrs(k, graph);
  std::vector<ValueId> inputs;
  if (partitioned()) inputs.push_back(graph_input(graph, false));
  return emit(k, std::move(inputs), a);
}

ValueId Builder::layer_norm_grad_sums(ValueId x, ValueId gamma, ValueId g, ValueId moments) {
  return emit(OpKind::kLayerNormGradSums, {x, gamma, g, moments});
}

ValueId Builder::layer_norm_grad_x(ValueId x, ValueId gamma, ValueId g, ValueId moments,
                                   ValueId sums, ValueId mask, const OpAttrs& forward) {
  std::vector<ValueId> inputs{x, gamma, g};
  if (moments != kNoValue) {
    inputs.push_back(moments);
    inputs.push_back(sums);
    if (mask != kNoValue) inputs.push_back(mask);
  }
  return emit(OpKind::kLayerNormGradX, std::move(inputs), forward);
}

ValueId Builder::layer_norm_grad_gamma(ValueId x, ValueId g, ValueId /*gamma*/, ValueId moments,
                                       const OpAttrs& forward) {
  std::vector<ValueId> inputs{x, g};
  if (moments != kNoValue) inputs.push_back(moments);
  return emit(OpKind::kLayerNormGradGamma, std::move(inputs), forward);
}

}  // namespace gnnrt::runtime
