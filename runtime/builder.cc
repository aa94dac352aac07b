#include "runtime/builder.h"

#include <fmt/format.h>

namespace gnnrt::runtime {
namespace {

using ops::Reduce;
using Shape = std::vector<int64_t>;

bool is_edge_weight_shape(const Shape& w, int64_t edges) {
  return (w.size() == 1 && w[0] == edges) || (w.size() == 2 && w[0] == edges && w[1] >= 1);
}

}  // namespace

Builder::Builder(std::string program_name) { program_.name = std::move(program_name); }
Builder::Builder(Program program) : program_(std::move(program)) {}

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
  return new_value(std::move(name), DType::kF32, std::move(shape), Role::kParameter);
}
ValueId Builder::state(std::string name, DType dtype, Shape shape) {
  return new_value(std::move(name), dtype, std::move(shape), Role::kState);
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
  const std::string where = scope_.empty() ? std::string(to_string(kind))
                                           : fmt::format("{} ({})", to_string(kind), scope_);
  throw ShapeError(fmt::format("program '{}': {}: {}", program_.name, where, what));
}

void Builder::expect_same_shape(OpKind kind, ValueId a, ValueId b, const char* a_name,
                                const char* b_name) const {
  if (shape(a) != shape(b)) {
    fail(kind, fmt::format("{} {} and {} {} must have the same shape", a_name,
                           shape_string(shape(a)), b_name, shape_string(shape(b))));
  }
}

void Builder::expect_dtype(OpKind kind, ValueId v, DType dtype, const char* what) const {
  if (program_.value(v).dtype != dtype) {
    fail(kind, fmt::format("{} must be {}, not {}", what, to_string(dtype),
                           to_string(program_.value(v).dtype)));
  }
}

void Builder::expect_rank(OpKind kind, ValueId v, std::size_t rank, const char* what) const {
  if (shape(v).size() != rank) {
    fail(kind, fmt::format("{} must have {} dimensions, has shape {}", what, rank,
                           shape_string(shape(v))));
  }
}

const GraphInfo& Builder::graph_info(OpKind kind, int32_t graph) const {
  if (graph < 0 || static_cast<size_t>(graph) >= program_.graphs.size()) {
    fail(kind, fmt::format("no graph #{}", graph));
  }
  return program_.graphs[static_cast<size_t>(graph)];
}

// Heads of a per-edge weight for features F: 1 for [E], H for [E, H] (F % H == 0).
int64_t Builder::edge_heads(OpKind kind, int32_t graph, ValueId edge_weight,
                            int64_t features) const {
  if (edge_weight == kNoValue) return 1;
  const GraphInfo& g = graph_info(kind, graph);
  const Shape& w = shape(edge_weight);
  if (!is_edge_weight_shape(w, g.num_edges)) {
    fail(kind, fmt::format("edge weight {} must be [E] or [E, H] with E = {} (graph '{}')",
                           shape_string(w), g.num_edges, g.name));
  }
  const int64_t heads = w.size() == 2 ? w[1] : 1;
  if (features % heads != 0) {
    fail(kind, fmt::format("features {} are not divisible by the edge weight's {} heads",
                           features, heads));
  }
  return heads;
}

ValueId Builder::emit(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs, DType dtype,
                      Shape shape) {
  std::string name = scope_.empty() ? std::string(to_string(kind))
                                    : fmt::format("{}/{}", scope_, to_string(kind));
  const ValueId out = new_value(std::move(name), dtype, std::move(shape), Role::kTemp);
  program_.ops.push_back(Op{kind, std::move(inputs), {out}, attrs, scope_});
  return out;
}

// Max/min reductions also output the winning edge per element (i32, the
// output's shape), as a second output of the op just emitted.
ValueId Builder::arg_output(ops::Reduce reduce, ValueId out) {
  if (!ops::has_arg(reduce)) return kNoValue;
  const ValueId arg =
      new_value(program_.value(out).name + ".arg", DType::kI32, shape(out), Role::kTemp);
  program_.ops.back().outputs.push_back(arg);
  return arg;
}

void Builder::emit_effect(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs) {
  program_.ops.push_back(Op{kind, std::move(inputs), {}, attrs, scope_});
}

// ---- dense forward ----

ValueId Builder::fill(Shape s, double value) {
  OpAttrs a;
  a.alpha = value;
  return emit(OpKind::kFill, {}, a, DType::kF32, std::move(s));
}

ValueId Builder::matmul(ValueId a, ValueId b, bool trans_a, bool trans_b) {
  constexpr OpKind k = OpKind::kMatMul;
  expect_rank(k, a, 2, "a");
  expect_rank(k, b, 2, "b");
  expect_dtype(k, a, DType::kF32, "a");
  expect_dtype(k, b, DType::kF32, "b");
  const Shape& sa = shape(a);
  const Shape& sb = shape(b);
  const int64_t m = trans_a ? sa[1] : sa[0], ka = trans_a ? sa[0] : sa[1];
  const int64_t kb = trans_b ? sb[1] : sb[0], n = trans_b ? sb[0] : sb[1];
  if (ka != kb) {
    fail(k, fmt::format("inner sizes differ: a {}{} times b {}{}", shape_string(sa),
                        trans_a ? "ᵀ" : "", shape_string(sb), trans_b ? "ᵀ" : ""));
  }
  OpAttrs attrs;
  attrs.trans_a = trans_a;
  attrs.trans_b = trans_b;
  return emit(k, {a, b}, attrs, DType::kF32, {m, n});
}

ValueId Builder::add(ValueId a, ValueId b) {
  expect_same_shape(OpKind::kAdd, a, b, "a", "b");
  return emit(OpKind::kAdd, {a, b}, {}, DType::kF32, shape(a));
}

ValueId Builder::scale(ValueId x, double alpha) {
  OpAttrs a;
  a.alpha = alpha;
  return emit(OpKind::kScale, {x}, a, DType::kF32, shape(x));
}

ValueId Builder::bias_add(ValueId x, ValueId bias) {
  constexpr OpKind k = OpKind::kBiasAdd;
  expect_rank(k, x, 2, "x");
  if (shape(bias) != Shape{shape(x)[1]}) {
    fail(k, fmt::format("bias {} does not match x {}", shape_string(shape(bias)),
                        shape_string(shape(x))));
  }
  return emit(k, {x, bias}, {}, DType::kF32, shape(x));
}

ValueId Builder::relu(ValueId x) { return emit(OpKind::kRelu, {x}, {}, DType::kF32, shape(x)); }

ValueId Builder::leaky_relu(ValueId x, double slope) {
  OpAttrs a;
  a.alpha = slope;
  return emit(OpKind::kLeakyRelu, {x}, a, DType::kF32, shape(x));
}

ValueId Builder::elu(ValueId x, double alpha) {
  OpAttrs a;
  a.alpha = alpha;
  return emit(OpKind::kElu, {x}, a, DType::kF32, shape(x));
}

ValueId Builder::dropout(ValueId x, double p, uint64_t key) {
  if (!(p >= 0 && p <= 1)) fail(OpKind::kDropout, fmt::format("p = {} is not in [0, 1]", p));
  if (p == 0) return x;
  OpAttrs a;
  a.alpha = p;
  a.key = key;
  return emit(OpKind::kDropout, {x}, a, DType::kF32, shape(x));
}

ValueId Builder::log_softmax(ValueId x) {
  expect_rank(OpKind::kLogSoftmax, x, 2, "x");
  return emit(OpKind::kLogSoftmax, {x}, {}, DType::kF32, shape(x));
}

ValueId Builder::nll_loss(ValueId log_prob, ValueId labels, ValueId mask) {
  constexpr OpKind k = OpKind::kNllLoss;
  expect_rank(k, log_prob, 2, "log_prob");
  expect_dtype(k, labels, DType::kI64, "labels");
  expect_dtype(k, mask, DType::kBool, "mask");
  const Shape row_shape{rows(log_prob)};
  if (shape(labels) != row_shape || shape(mask) != row_shape) {
    fail(k, fmt::format("labels {} and mask {} must be [{}] for log_prob {}",
                        shape_string(shape(labels)), shape_string(shape(mask)), row_shape[0],
                        shape_string(shape(log_prob))));
  }
  return emit(k, {log_prob, labels, mask}, {}, DType::kF32, {1});
}

ValueId Builder::mse_loss(ValueId pred, ValueId target, ValueId mask) {
  constexpr OpKind k = OpKind::kMseLoss;
  expect_rank(k, pred, 2, "pred");
  expect_same_shape(k, pred, target, "pred", "target");
  expect_dtype(k, mask, DType::kBool, "mask");
  if (shape(mask) != Shape{rows(pred)}) {
    fail(k, fmt::format("mask {} must be [{}]", shape_string(shape(mask)), rows(pred)));
  }
  return emit(k, {pred, target, mask}, {}, DType::kF32, {1});
}

ValueId Builder::head_dot(ValueId x, ValueId att, int64_t heads) {
  constexpr OpKind k = OpKind::kHeadDot;
  expect_rank(k, x, 2, "x");
  const int64_t f = shape(x)[1];
  if (heads < 1 || f % heads != 0 || program_.value(att).elements() != f) {
    fail(k, fmt::format("x {} and att {} do not split into {} heads", shape_string(shape(x)),
                        shape_string(shape(att)), heads));
  }
  OpAttrs a;
  a.heads = heads;
  return emit(k, {x, att}, a, DType::kF32, {rows(x), heads});
}

ValueId Builder::head_mean(ValueId x, int64_t heads) {
  constexpr OpKind k = OpKind::kHeadMean;
  expect_rank(k, x, 2, "x");
  if (heads < 1 || shape(x)[1] % heads != 0) {
    fail(k, fmt::format("x {} does not split into {} heads", shape_string(shape(x)), heads));
  }
  OpAttrs a;
  a.heads = heads;
  return emit(k, {x}, a, DType::kF32, {rows(x), shape(x)[1] / heads});
}

ValueId Builder::layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps) {
  constexpr OpKind k = OpKind::kLayerNorm;
  expect_rank(k, x, 2, "x");
  const Shape cols{shape(x)[1]};
  if (shape(gamma) != cols || shape(beta) != cols) {
    fail(k, fmt::format("weight {} and bias {} must be [{}] for x {}", shape_string(shape(gamma)),
                        shape_string(shape(beta)), cols[0], shape_string(shape(x))));
  }
  OpAttrs a;
  a.alpha = eps;
  a.key = per_node ? 1 : 0;
  return emit(k, {x, gamma, beta}, a, DType::kF32, shape(x));
}

// ---- graph ops ----

ValueId Builder::gcn_norm(int32_t graph) {
  OpAttrs a;
  a.graph = graph;
  return emit(OpKind::kGcnNorm, {}, a, DType::kF32, {graph_info(OpKind::kGcnNorm, graph).num_edges});
}

ValueId Builder::aggregate(Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight) {
  ValueId messages = gather(graph, x);
  if (edge_weight != kNoValue) messages = edge_scale(messages, edge_weight);
  return scatter(reduce, graph, messages).first;
}

ValueId Builder::softmax(int32_t graph, ValueId score) {
  constexpr OpKind k = OpKind::kSegmentSoftmax;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, score, 2, "score");
  if (rows(score) != g.num_edges) {
    fail(k, fmt::format("score {} must have E = {} rows (graph '{}')", shape_string(shape(score)),
                        g.num_edges, g.name));
  }
  OpAttrs a;
  a.graph = graph;
  a.heads = shape(score)[1];
  return emit(k, {score}, a, DType::kF32, shape(score));
}

ValueId Builder::sddmm_add(int32_t graph, ValueId a, ValueId b) {
  constexpr OpKind k = OpKind::kSddmmAdd;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, a, 2, "a");
  expect_rank(k, b, 2, "b");
  if (rows(a) != g.num_src || rows(b) != g.num_dst || shape(a)[1] != shape(b)[1]) {
    fail(k, fmt::format("a {} must be [{}, H] and b {} [{}, H] (graph '{}')",
                        shape_string(shape(a)), g.num_src, shape_string(shape(b)), g.num_dst,
                        g.name));
  }
  OpAttrs attrs;
  attrs.graph = graph;
  attrs.heads = shape(a)[1];
  return emit(k, {a, b}, attrs, DType::kF32, {g.num_edges, shape(a)[1]});
}

ValueId Builder::allreduce(ValueId x) {
  expect_dtype(OpKind::kAllReduce, x, DType::kF32, "x");
  return emit(OpKind::kAllReduce, {x}, {}, DType::kF32, shape(x));
}

ValueId Builder::gather(int32_t graph, ValueId x) {
  constexpr OpKind k = OpKind::kGather;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, x, 2, "x");
  if (rows(x) != g.num_src) {
    fail(k, fmt::format("x {} must have {} rows, the source nodes of graph '{}'",
                        shape_string(shape(x)), g.num_src, g.name));
  }
  OpAttrs a;
  a.graph = graph;
  return emit(k, {x}, a, DType::kF32, {g.num_edges, shape(x)[1]});
}

ValueId Builder::edge_scale(ValueId messages, ValueId edge_weight) {
  constexpr OpKind k = OpKind::kEdgeScale;
  expect_rank(k, messages, 2, "messages");
  const Shape& w = shape(edge_weight);
  if (!is_edge_weight_shape(w, rows(messages)) || shape(messages)[1] % (w.size() == 2 ? w[1] : 1)) {
    fail(k, fmt::format("edge weight {} does not fit messages {}", shape_string(w),
                        shape_string(shape(messages))));
  }
  OpAttrs a;
  a.heads = w.size() == 2 ? w[1] : 1;
  return emit(k, {messages, edge_weight}, a, DType::kF32, shape(messages));
}

std::pair<ValueId, ValueId> Builder::scatter(Reduce reduce, int32_t graph, ValueId messages) {
  constexpr OpKind k = OpKind::kScatter;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, messages, 2, "messages");
  if (rows(messages) != g.num_edges) {
    fail(k, fmt::format("messages {} must have E = {} rows (graph '{}')",
                        shape_string(shape(messages)), g.num_edges, g.name));
  }
  OpAttrs a;
  a.graph = graph;
  a.reduce = reduce;
  const ValueId out = emit(k, {messages}, a, DType::kF32, {g.num_dst, shape(messages)[1]});
  return {out, arg_output(reduce, out)};
}

std::pair<ValueId, ValueId> Builder::spmm(Reduce reduce, int32_t graph, ValueId x,
                                          ValueId edge_weight) {
  constexpr OpKind k = OpKind::kSpmm;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, x, 2, "x");
  if (rows(x) != g.num_src) {
    fail(k, fmt::format("x {} must have {} rows, the source nodes of graph '{}'",
                        shape_string(shape(x)), g.num_src, g.name));
  }
  OpAttrs a;
  a.graph = graph;
  a.reduce = reduce;
  a.heads = edge_heads(k, graph, edge_weight, shape(x)[1]);
  std::vector<ValueId> inputs{x};
  if (edge_weight != kNoValue) inputs.push_back(edge_weight);
  const ValueId out = emit(k, std::move(inputs), a, DType::kF32, {g.num_dst, shape(x)[1]});
  return {out, arg_output(reduce, out)};
}

// ---- backward ----

ValueId Builder::bias_grad(ValueId g) {
  expect_rank(OpKind::kBiasGrad, g, 2, "g");
  return emit(OpKind::kBiasGrad, {g}, {}, DType::kF32, {shape(g)[1]});
}

ValueId Builder::relu_grad(ValueId x, ValueId g) {
  expect_same_shape(OpKind::kReluGrad, x, g, "x", "g");
  return emit(OpKind::kReluGrad, {x, g}, {}, DType::kF32, shape(x));
}

ValueId Builder::leaky_relu_grad(ValueId x, ValueId g, double slope) {
  expect_same_shape(OpKind::kLeakyReluGrad, x, g, "x", "g");
  OpAttrs a;
  a.alpha = slope;
  return emit(OpKind::kLeakyReluGrad, {x, g}, a, DType::kF32, shape(x));
}

ValueId Builder::elu_grad(ValueId x, ValueId g, double alpha) {
  expect_same_shape(OpKind::kEluGrad, x, g, "x", "g");
  OpAttrs a;
  a.alpha = alpha;
  return emit(OpKind::kEluGrad, {x, g}, a, DType::kF32, shape(x));
}

ValueId Builder::dropout_grad(ValueId g, double p, uint64_t key) {
  OpAttrs a;
  a.alpha = p;
  a.key = key;
  return emit(OpKind::kDropoutGrad, {g}, a, DType::kF32, shape(g));
}

ValueId Builder::log_softmax_grad(ValueId out, ValueId g) {
  expect_same_shape(OpKind::kLogSoftmaxGrad, out, g, "out", "g");
  return emit(OpKind::kLogSoftmaxGrad, {out, g}, {}, DType::kF32, shape(out));
}

ValueId Builder::nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g) {
  return emit(OpKind::kNllLossGrad, {log_prob, labels, mask, g}, {}, DType::kF32, shape(log_prob));
}

ValueId Builder::mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g) {
  return emit(OpKind::kMseLossGrad, {pred, target, mask, g}, {}, DType::kF32, shape(pred));
}

ValueId Builder::head_dot_grad_x(ValueId att, ValueId g, int64_t heads) {
  OpAttrs a;
  a.heads = heads;
  return emit(OpKind::kHeadDotGradX, {att, g}, a, DType::kF32,
              {rows(g), program_.value(att).elements()});
}

ValueId Builder::head_dot_grad_att(ValueId x, ValueId g, ValueId att, int64_t heads) {
  OpAttrs a;
  a.heads = heads;
  return emit(OpKind::kHeadDotGradAtt, {x, g, att}, a, DType::kF32, shape(att));
}

ValueId Builder::head_mean_grad(ValueId g, int64_t heads) {
  OpAttrs a;
  a.heads = heads;
  return emit(OpKind::kHeadMeanGrad, {g}, a, DType::kF32, {rows(g), shape(g)[1] * heads});
}

ValueId Builder::layer_norm_grad_x(ValueId x, ValueId gamma, ValueId g, const OpAttrs& forward) {
  return emit(OpKind::kLayerNormGradX, {x, gamma, g}, forward, DType::kF32, shape(x));
}

ValueId Builder::layer_norm_grad_gamma(ValueId x, ValueId g, ValueId gamma, const OpAttrs& forward) {
  return emit(OpKind::kLayerNormGradGamma, {x, g}, forward, DType::kF32, shape(gamma));
}

ValueId Builder::gather_grad(int32_t graph, ValueId g) {
  OpAttrs a;
  a.graph = graph;
  return emit(OpKind::kGatherGrad, {g}, a, DType::kF32,
              {graph_info(OpKind::kGatherGrad, graph).num_src, shape(g)[1]});
}

ValueId Builder::edge_dot(ValueId g, ValueId messages, ValueId edge_weight) {
  expect_same_shape(OpKind::kEdgeDot, g, messages, "g", "messages");
  OpAttrs a;
  a.heads = shape(edge_weight).size() == 2 ? shape(edge_weight)[1] : 1;
  return emit(OpKind::kEdgeDot, {g, messages}, a, DType::kF32, shape(edge_weight));
}

ValueId Builder::scatter_grad(Reduce reduce, int32_t graph, ValueId g, ValueId arg) {
  OpAttrs a;
  a.graph = graph;
  a.reduce = reduce;
  std::vector<ValueId> inputs{g};
  if (arg != kNoValue) inputs.push_back(arg);
  return emit(OpKind::kScatterGrad, std::move(inputs), a, DType::kF32,
              {graph_info(OpKind::kScatterGrad, graph).num_edges, shape(g)[1]});
}

ValueId Builder::spmm_grad_x(Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight,
                             ValueId g, ValueId arg) {
  OpAttrs a;
  a.graph = graph;
  a.reduce = reduce;
  a.heads = edge_heads(OpKind::kSpmmGradX, graph, edge_weight, shape(x)[1]);
  // Inputs: x, g, then the edge weight and the arg when present.
  std::vector<ValueId> inputs{x, g, edge_weight, arg};
  return emit(OpKind::kSpmmGradX, std::move(inputs), a, DType::kF32, shape(x));
}

ValueId Builder::spmm_grad_w(int32_t graph, ValueId x, ValueId g, ValueId edge_weight) {
  OpAttrs a;
  a.graph = graph;
  a.heads = edge_heads(OpKind::kSpmmGradW, graph, edge_weight, shape(x)[1]);
  return emit(OpKind::kSpmmGradW, {x, g}, a, DType::kF32, shape(edge_weight));
}

ValueId Builder::sddmm_add_grad_a(int32_t graph, ValueId g) {
  OpAttrs a;
  a.graph = graph;
  a.heads = shape(g)[1];
  return emit(OpKind::kSddmmAddGradA, {g}, a, DType::kF32,
              {graph_info(OpKind::kSddmmAddGradA, graph).num_src, shape(g)[1]});
}

ValueId Builder::sddmm_add_grad_b(int32_t graph, ValueId g) {
  OpAttrs a;
  a.graph = graph;
  a.heads = shape(g)[1];
  return emit(OpKind::kSddmmAddGradB, {g}, a, DType::kF32,
              {graph_info(OpKind::kSddmmAddGradB, graph).num_dst, shape(g)[1]});
}

ValueId Builder::segment_softmax_grad(int32_t graph, ValueId alpha, ValueId g) {
  OpAttrs a;
  a.graph = graph;
  a.heads = shape(alpha)[1];
  return emit(OpKind::kSegmentSoftmaxGrad, {alpha, g}, a, DType::kF32, shape(alpha));
}

// ---- state updates ----

void Builder::adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const OpAttrs& hyper) {
  expect_same_shape(OpKind::kAdamUpdate, param, grad, "param", "grad");
  expect_same_shape(OpKind::kAdamUpdate, param, m, "param", "m");
  expect_same_shape(OpKind::kAdamUpdate, param, v, "param", "v");
  emit_effect(OpKind::kAdamUpdate, {param, grad, m, v}, hyper);
}

void Builder::sgd_update(ValueId param, ValueId grad, ValueId buffer, const OpAttrs& hyper) {
  expect_same_shape(OpKind::kSgdUpdate, param, grad, "param", "grad");
  expect_same_shape(OpKind::kSgdUpdate, param, buffer, "param", "momentum buffer");
  emit_effect(OpKind::kSgdUpdate, {param, grad, buffer}, hyper);
}

void Builder::accumulate(ValueId metrics, ValueId scalar, uint64_t slot) {
  expect_dtype(OpKind::kAccumulate, metrics, DType::kF64, "metrics");
  if (static_cast<int64_t>(slot) >= program_.value(metrics).elements()) {
    fail(OpKind::kAccumulate, fmt::format("slot {} is outside metrics {}", slot,
                                          shape_string(shape(metrics))));
  }
  OpAttrs a;
  a.key = slot;
  emit_effect(OpKind::kAccumulate, {metrics, scalar}, a);
}

void Builder::count_correct(ValueId metrics, ValueId log_prob, ValueId labels, ValueId mask,
                            uint64_t slot) {
  constexpr OpKind k = OpKind::kCountCorrect;
  expect_dtype(k, metrics, DType::kF64, "metrics");
  expect_dtype(k, labels, DType::kI64, "labels");
  expect_dtype(k, mask, DType::kBool, "mask");
  if (static_cast<int64_t>(slot) + 1 >= program_.value(metrics).elements()) {
    fail(k, fmt::format("slots {}..{} are outside metrics {}", slot, slot + 1,
                        shape_string(shape(metrics))));
  }
  OpAttrs a;
  a.key = slot;
  emit_effect(k, {metrics, log_prob, labels, mask}, a);
}

}  // namespace gnnrt::runtime
