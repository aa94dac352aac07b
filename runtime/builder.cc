#include "runtime/builder.h"

#include <fmt/format.h>

#include "runtime/op_defs.h"

namespace gnnrt::runtime {
namespace {

using ops::Reduce;
using Shape = std::vector<int64_t>;

OpAttrs with_heads(int64_t heads) {
  OpAttrs a;
  a.set_heads(heads);
  return a;
}

}  // namespace

std::string in_degree_name(const std::string& graph) { return graph + ".in_degree"; }
std::string edge_id_name(const std::string& graph) { return graph + ".edge_id"; }
std::string count_name(const std::string& mask) { return mask + ".count"; }

Builder::Builder(std::string program_name, DType float_type) {
  if (!is_floating(float_type)) {
    throw ShapeError(fmt::format("program '{}': float type {} is not float32 or float64",
                                 program_name, to_string(float_type)));
  }
  program_.name = std::move(program_name);
  program_.float_type = float_type;
}

Builder::Builder(Program program) : program_(std::move(program)) {}

void Builder::partition(int64_t local_nodes) {
  if (local_nodes < 0) {
    throw ShapeError(fmt::format("program '{}': {} local nodes", program_.name, local_nodes));
  }
  program_.partitioned = true;
  program_.local_nodes = local_nodes;
}

int64_t Builder::cols(ValueId v) const {
  const Shape& s = shape(v);
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

ValueId Builder::new_value(std::string name, DType dtype, Shape shape, Role role) {
  for (int64_t d : shape) {
    if (d < 0) {
      throw ShapeError(fmt::format("program '{}': value '{}' has a negative size in {}",
                                   program_.name, name, shape_string(shape)));
    }
  }
  if (role != Role::kTemp && program_.find(name) != kNoValue) {
    throw ShapeError(
        fmt::format("program '{}': {} '{}' is declared twice", program_.name, to_string(role), name));
  }
  program_.values.push_back(ValueInfo{std::move(name), dtype, std::move(shape), role});
  return static_cast<ValueId>(program_.values.size() - 1);
}

ValueId Builder::input(std::string name, DType dtype, Shape shape) {
  return new_value(std::move(name), dtype, std::move(shape), Role::kInput);
}
ValueId Builder::parameter(std::string name, Shape shape) {
  return new_value(std::move(name), float_type(), std::move(shape), Role::kParameter);
}
ValueId Builder::state(std::string name, DType dtype, Shape shape) {
  return new_value(std::move(name), dtype, std::move(shape), Role::kState);
}

ValueId Builder::input_once(const std::string& name, DType dtype, Shape shape) {
  const ValueId v = program_.find(name);
  if (v == kNoValue) return input(name, dtype, std::move(shape));
  const ValueInfo& info = program_.value(v);
  if (info.role != Role::kInput || info.dtype != dtype || info.shape != shape) {
    throw ShapeError(fmt::format("program '{}': '{}' is declared as {} {} {}, needed as input {} {}",
                                 program_.name, name, to_string(info.role), to_string(info.dtype),
                                 shape_string(info.shape), to_string(dtype), shape_string(shape)));
  }
  return v;
}

int32_t Builder::graph(std::string name, int64_t num_src, int64_t num_dst, int64_t num_edges) {
  if (num_src < 0 || num_dst < 0 || num_edges < 0) {
    throw ShapeError(fmt::format("program '{}': graph '{}' has a negative size", program_.name, name));
  }
  program_.graphs.push_back(GraphInfo{std::move(name), num_src, num_dst, num_edges});
  return static_cast<int32_t>(program_.graphs.size() - 1);
}

void Builder::output(ValueId v) { program_.outputs.push_back(v); }

void Builder::fail(OpKind kind, const std::string& what) const {
  throw ShapeError(fmt::format("program '{}': {}: {}", program_.name, where(kind), what));
}

std::string Builder::where(OpKind kind) const {
  return scope_.empty() ? std::string(to_string(kind)) : fmt::format("{} ({})", to_string(kind), scope_);
}

const GraphInfo& Builder::graph_info(OpKind kind, int32_t graph) const {
  if (graph < 0 || static_cast<size_t>(graph) >= program_.graphs.size()) {
    fail(kind, fmt::format("no graph #{}", graph));
  }
  return program_.graphs[static_cast<size_t>(graph)];
}

OpAttrs Builder::graph_attrs(OpKind kind, int32_t graph) const {
  graph_info(kind, graph);
  OpAttrs a;
  a.set_graph(graph);
  return a;
}

std::string Builder::temp_name(OpKind kind) const {
  return scope_.empty() ? std::string(to_string(kind)) : fmt::format("{}/{}", scope_, to_string(kind));
}

std::vector<ValueId> Builder::emit_op(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs,
                                      const std::vector<std::pair<std::string, Shape>>& given) {
  Op op{kind, std::move(inputs), {}, std::move(attrs), scope_};
  if (given.empty()) {
    const std::string base = temp_name(kind);
    for (OutputSpec& out : op_outputs(program_, op, where(kind))) {
      op.outputs.push_back(new_value(base + out.suffix, out.dtype, std::move(out.shape), Role::kTemp));
    }
  } else {
    // Results whose shapes the operands do not fix: declared as given, then
    // checked by the rule (and taken back if it fails).
    const size_t values_before = program_.values.size();
    for (const auto& [name, shape] : given) op.outputs.push_back(new_value(name, float_type(), shape, Role::kTemp));
    try {
      op_outputs(program_, op, where(kind));
    } catch (...) {
      program_.values.resize(values_before);
      throw;
    }
  }
  std::vector<ValueId> results = op.outputs;
  program_.ops.push_back(std::move(op));
  return results;
}

// ---- a partitioned program's inputs ----

ValueId Builder::node_input(const char* name, DType dtype) {
  return input_once(name, dtype, {program_.local_nodes});
}

ValueId Builder::graph_input(int32_t graph, bool edges) {
  const GraphInfo& g = graph_info(OpKind::kGather, graph);
  return edges ? input_once(edge_id_name(g.name), DType::kI64, {g.num_edges})
               : input_once(in_degree_name(g.name), DType::kI64, {g.num_dst});
}

ValueId Builder::mask_count(ValueId mask) {
  return input_once(count_name(program_.value(mask).name), DType::kI64, {1});
}

// The loss ops' inputs: a partitioned or data-parallel program's losses
// divide by the global count of the mask's rows.
std::vector<ValueId> Builder::with_count(std::vector<ValueId> inputs, ValueId mask) {
  if (partitioned() || replicated()) inputs.push_back(mask_count(mask));
  return inputs;
}

// ---- dense forward ----

ValueId Builder::fill(Shape s, double value) {
  OpAttrs a;
  a.set_alpha(value);
  for (int64_t d : s) a.add_shape(d);
  return emit(OpKind::kFill, {}, a);
}

ValueId Builder::matmul(ValueId a, ValueId b, bool trans_a, bool trans_b) {
  OpAttrs attrs;
  attrs.set_trans_a(trans_a);
  attrs.set_trans_b(trans_b);
  return emit(OpKind::kMatMul, {a, b}, attrs);
}

ValueId Builder::add(ValueId a, ValueId b) { return emit(OpKind::kAdd, {a, b}); }
ValueId Builder::mul(ValueId a, ValueId b) { return emit(OpKind::kMul, {a, b}); }

ValueId Builder::scale(ValueId x, double alpha) {
  OpAttrs a;
  a.set_alpha(alpha);
  return emit(OpKind::kScale, {x}, a);
}

ValueId Builder::bias_add(ValueId x, ValueId bias) { return emit(OpKind::kBiasAdd, {x, bias}); }
ValueId Builder::relu(ValueId x) { return emit(OpKind::kRelu, {x}); }

ValueId Builder::leaky_relu(ValueId x, double slope) {
  OpAttrs a;
  a.set_alpha(slope);
  return emit(OpKind::kLeakyRelu, {x}, a);
}

ValueId Builder::concat(const std::vector<ValueId>& inputs) { return emit(OpKind::kConcat, inputs); }

ValueId Builder::slice_cols(ValueId x, int64_t begin, int64_t width) {
  OpAttrs a;
  a.set_begin(begin);
  a.set_width(width);
  return emit(OpKind::kSliceCols, {x}, a);
}

ValueId Builder::reshape(ValueId x, std::vector<int64_t> shape) {
  OpAttrs a;
  for (int64_t d : shape) a.add_shape(d);
  return emit(OpKind::kReshape, {x}, a);
}

ValueId Builder::activation(ValueId x, ops::Activation kind, double bound) {
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  if (kind == ops::Activation::kClip) a.set_alpha(bound);
  return emit(OpKind::kActivation, {x}, a);
}

ValueId Builder::activation_grad(ValueId x, ValueId g, ops::Activation kind, double bound) {
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  if (kind == ops::Activation::kClip) a.set_alpha(bound);
  return emit(OpKind::kActivationGrad, {x, g}, a);
}

ValueId Builder::elu(ValueId x, double alpha) {
  OpAttrs a;
  a.set_alpha(alpha);
  return emit(OpKind::kElu, {x}, a);
}

ValueId Builder::dropout(ValueId x, double p, uint64_t key, int32_t edges_of_graph, ValueId global_rows) {
  constexpr OpKind k = OpKind::kDropout;
  if (p == 0) return x;
  OpAttrs a;
  a.set_alpha(p);
  a.set_key(key);
  std::vector<ValueId> inputs{x};
  if (global_rows != kNoValue) {
    inputs.push_back(global_rows);
  } else if (partitioned()) {
    inputs.push_back(edges_of_graph >= 0 ? graph_input(edges_of_graph, true)
                                         : node_input(kNodeGlobalId, DType::kI64));
  } else if (replicated()) {
    // Local rows differ from one rank count to another; the mask must not.
    fail(k, "a data-parallel program's dropout needs its rows' global ids");
  }
  // The second result, "<out>.keep" (a byte per element), is the mask for the backward.
  return emit(k, std::move(inputs), a);
}

ValueId Builder::normal(ValueId global_rows, int64_t width, uint64_t key) {
  OpAttrs a;
  a.set_width(width);
  a.set_key(key);
  return emit(OpKind::kNormal, {global_rows}, a);
}

ValueId Builder::log_softmax(ValueId x) { return emit(OpKind::kLogSoftmax, {x}); }

ValueId Builder::nll_loss(ValueId log_prob, ValueId labels, ValueId mask) {
  return emit(OpKind::kNllLoss, with_count({log_prob, labels, mask}, mask));
}

ValueId Builder::cross_entropy(ValueId x, ValueId labels, ValueId mask) {
  return emit(OpKind::kCrossEntropy, with_count({x, labels, mask}, mask));
}

ValueId Builder::l1_loss(ValueId pred, ValueId target, ValueId mask) {
  OpAttrs a;
  a.set_loss_form(proto::ABSOLUTE);
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask), a);
}

ValueId Builder::mean_loss(ValueId pred, ValueId target, ValueId mask) {
  OpAttrs a;
  a.set_loss_form(proto::LINEAR);
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask), a);
}

ValueId Builder::mse_loss(ValueId pred, ValueId target, ValueId mask) {
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask));
}

ValueId Builder::head_dot(ValueId x, ValueId att, int64_t heads) {
  return emit(OpKind::kHeadDot, {x, att}, with_heads(heads));
}

ValueId Builder::head_mean(ValueId x, int64_t heads) {
  return emit(OpKind::kHeadMean, {x}, with_heads(heads));
}

ValueId Builder::layer_norm_moments(ValueId x, ValueId mask) {
  std::vector<ValueId> inputs{x};
  if (mask != kNoValue) inputs.push_back(mask);
  return emit(OpKind::kLayerNormMoments, std::move(inputs));
}

ValueId Builder::layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps) {
  OpAttrs a;
  a.set_alpha(eps);
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

// ---- graph ops ----

ValueId Builder::gcn_norm(int32_t graph) {
  constexpr OpKind k = OpKind::kGcnNorm;
  OpAttrs a = graph_attrs(k, graph);
  std::vector<ValueId> inputs;
  if (partitioned()) inputs.push_back(graph_input(graph, false));
  return emit(k, std::move(inputs), a);
}

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

ValueId Builder::softmax(int32_t graph, ValueId score) {
  if (!partitioned()) return segment_softmax(graph, score);
  // Max, then the sum of exponentials, each combined over the replicas of
  // the destination; the max is a shift only (no gradient flows through it).
  const ValueId m = halo_max(Reduce::kMax, segment_max(graph, score)).first;
  const ValueId s = halo_sum(segment_exp_sum(graph, score, m));
  return segment_softmax_apply(graph, score, m, s);
}

// Per-edge scores [E, H] and what takes their heads from them.
ValueId Builder::per_head(OpKind kind, int32_t graph, std::vector<ValueId> inputs, ValueId scores) {
  OpAttrs a = graph_attrs(kind, graph);
  if (shape(scores).size() == 2) a.set_heads(shape(scores)[1]);
  return emit(kind, std::move(inputs), a);
}

ValueId Builder::segment_softmax(int32_t graph, ValueId score) {
  return per_head(OpKind::kSegmentSoftmax, graph, {score}, score);
}

ValueId Builder::attention_softmax(int32_t graph, ValueId a, ValueId b, double slope) {
  OpAttrs attrs = graph_attrs(OpKind::kAttentionSoftmax, graph);
  if (shape(a).size() == 2) attrs.set_heads(shape(a)[1]);
  attrs.set_alpha(slope);
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

// ---- collectives ----

ValueId Builder::allreduce(ValueId x) { return emit(OpKind::kAllReduce, {x}); }
ValueId Builder::halo_sum(ValueId x) { return emit(OpKind::kHaloSum, {x}); }

std::pair<ValueId, ValueId> Builder::halo_max(Reduce reduce, ValueId x, ValueId arg,
                                              int32_t graph) {
  constexpr OpKind k = OpKind::kHaloMax;
  OpAttrs a;
  a.set_reduce(to_proto(reduce));
  std::vector<ValueId> inputs{x};
  if (arg != kNoValue) {
    a = graph_attrs(k, graph);
    a.set_reduce(to_proto(reduce));
    inputs.push_back(arg);
    inputs.push_back(graph_input(graph, true));
  }
  const std::vector<ValueId> out = emit_op(k, std::move(inputs), a);
  return {out[0], out.size() > 1 ? out[1] : kNoValue};
}

// Heads of a per-edge weight: 1 for none or [E], H for [E, H].
int64_t Builder::weight_heads(ValueId edge_weight) const {
  if (edge_weight == kNoValue) return 1;
  const Shape& w = shape(edge_weight);
  return w.size() == 2 ? w[1] : 1;
}

ValueId Builder::gather(int32_t graph, ValueId x) {
  return emit(OpKind::kGather, {x}, graph_attrs(OpKind::kGather, graph));
}

ValueId Builder::edge_scale(ValueId messages, ValueId edge_weight) {
  return emit(OpKind::kEdgeScale, {messages, edge_weight}, with_heads(weight_heads(edge_weight)));
}

// The value and, for max/min, the winning edge of a reduction just emitted.
std::pair<ValueId, ValueId> Builder::reduction(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs) {
  const std::vector<ValueId> out = emit_op(kind, std::move(inputs), std::move(attrs));
  return {out[0], out.size() > 1 ? out[1] : kNoValue};
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

// ---- sparse input features ----

ValueId Builder::sparse_matmul(int32_t matrix, ValueId values, ValueId b, bool trans_b) {
  OpAttrs a = graph_attrs(OpKind::kSparseMatMul, matrix);
  a.set_trans_b(trans_b);
  // Results: the product, and b transposed once per call (a workspace).
  return emit(OpKind::kSparseMatMul, {values, b}, a);
}

ValueId Builder::sparse_dropout(int32_t matrix, ValueId values, double p, uint64_t key) {
  constexpr OpKind k = OpKind::kSparseDropout;
  OpAttrs a = graph_attrs(k, matrix);
  if (p == 0) return values;
  a.set_alpha(p);
  a.set_key(key);
  std::vector<ValueId> inputs{values};
  if (partitioned()) inputs.push_back(node_input(kNodeGlobalId, DType::kI64));
  return emit(k, std::move(inputs), a);
}

// ---- backward ----

ValueId Builder::sparse_matmul_grad_b(int32_t matrix, ValueId values, ValueId g, ValueId /*b*/,
                                      bool trans_b) {
  OpAttrs a = graph_attrs(OpKind::kSparseMatMulGradB, matrix);
  a.set_trans_b(trans_b);
  // Results: b's gradient, and accumulators for a walk by rows that ends
  // transposed (ops/sparse_matmul.h).
  return emit(OpKind::kSparseMatMulGradB, {values, g}, a);
}

ValueId Builder::bias_grad(ValueId g) { return emit(OpKind::kBiasGrad, {g}); }
ValueId Builder::relu_grad(ValueId x, ValueId g) { return emit(OpKind::kReluGrad, {x, g}); }

ValueId Builder::leaky_relu_grad(ValueId x, ValueId g, double slope) {
  OpAttrs a;
  a.set_alpha(slope);
  return emit(OpKind::kLeakyReluGrad, {x, g}, a);
}

ValueId Builder::elu_grad(ValueId x, ValueId g, double alpha) {
  OpAttrs a;
  a.set_alpha(alpha);
  return emit(OpKind::kEluGrad, {x, g}, a);
}

ValueId Builder::dropout_grad(ValueId g, ValueId keep, double p) {
  OpAttrs a;
  a.set_alpha(p);
  return emit(OpKind::kDropoutGrad, {g, keep}, a);
}

ValueId Builder::log_softmax_grad(ValueId out, ValueId g) { return emit(OpKind::kLogSoftmaxGrad, {out, g}); }

// (x, labels, mask, g[, count])
std::vector<ValueId> Builder::loss_grad_inputs(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                               ValueId count) {
  std::vector<ValueId> inputs{x, labels, mask, g};
  if (count != kNoValue) inputs.push_back(count);
  return inputs;
}

ValueId Builder::nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g,
                               ValueId count) {
  return emit(OpKind::kNllLossGrad, loss_grad_inputs(log_prob, labels, mask, g, count));
}

ValueId Builder::cross_entropy_grad(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                    ValueId count) {
  return emit(OpKind::kCrossEntropyGrad, loss_grad_inputs(x, labels, mask, g, count));
}

ValueId Builder::mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g,
                               ValueId count, ops::LossForm form) {
  OpAttrs a;
  a.set_loss_form(static_cast<proto::LossForm>(form));
  return emit(OpKind::kMseLossGrad, loss_grad_inputs(pred, target, mask, g, count), a);
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
  attrs.set_alpha(slope);
  return emit(OpKind::kAttentionSoftmaxGrad, {a, b, alpha, g}, attrs);
}

ValueId Builder::segment_exp_sum_grad(int32_t graph, ValueId score, ValueId m, ValueId g) {
  return per_head(OpKind::kSegmentExpSumGrad, graph, {score, m, g}, score);
}

ValueId Builder::segment_softmax_apply_grad_s(int32_t graph, ValueId alpha, ValueId g, ValueId s) {
  return per_head(OpKind::kSegmentSoftmaxApplyGradS, graph, {alpha, g, s}, alpha);
}

ValueId Builder::keep_winners(int32_t graph, ValueId g, ValueId arg) {
  return emit(OpKind::kKeepWinners, {g, arg}, graph_attrs(OpKind::kKeepWinners, graph));
}

// ---- gradient buckets ----

ValueId Builder::bucket_start(const std::vector<ValueId>& grads, uint64_t bucket) {
  OpAttrs a;
  a.set_key(bucket);
  return emit(OpKind::kBucketStart, grads, a);
}

std::vector<ValueId> Builder::bucket_wait(ValueId bucket_value, const std::vector<ValueId>& grads,
                                          uint64_t bucket) {
  OpAttrs a;
  a.set_key(bucket);
  std::vector<std::pair<std::string, Shape>> given;
  for (ValueId g : grads) given.emplace_back(program_.value(g).name + ".allreduced", shape(g));
  return emit_op(OpKind::kBucketWait, {bucket_value}, a, given);
}

// ---- state updates ----

void Builder::adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const OpAttrs& hyper) {
  emit_op(OpKind::kAdamUpdate, {param, grad, m, v}, hyper);
}

void Builder::sgd_update(ValueId param, ValueId grad, ValueId buffer, const OpAttrs& hyper) {
  emit_op(OpKind::kSgdUpdate, {param, grad, buffer}, hyper);
}

void Builder::accumulate(ValueId metrics, ValueId scalar, uint64_t slot) {
  OpAttrs a;
  a.set_key(slot);
  emit_op(OpKind::kAccumulate, {metrics, scalar}, a);
}

void Builder::count_correct(ValueId metrics, ValueId log_prob, ValueId labels, ValueId mask,
                            uint64_t slot) {
  OpAttrs a;
  a.set_key(slot);
  emit_op(OpKind::kCountCorrect, {metrics, log_prob, labels, mask}, a);
}

}  // namespace gnnrt::runtime
