#include "runtime/builder.h"

#include <fmt/format.h>

#include "ops/sparse_matmul.h"

namespace gnnrt::runtime {
namespace {

using ops::Reduce;
using Shape = std::vector<int64_t>;

bool is_edge_weight_shape(const Shape& w, int64_t edges) {
  return (w.size() == 1 && w[0] == edges) || (w.size() == 2 && w[0] == edges && w[1] >= 1);
}

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

void Builder::expect_partitioned(OpKind kind) const {
  if (!partitioned()) fail(kind, "only a partitioned program exchanges halo rows");
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
  program_.ops.push_back(Op{kind, std::move(inputs), {out}, std::move(attrs), scope_});
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
  program_.ops.push_back(Op{kind, std::move(inputs), {}, std::move(attrs), scope_});
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

// ---- dense forward ----

ValueId Builder::fill(Shape s, double value) {
  OpAttrs a;
  a.set_alpha(value);
  return emit_float(OpKind::kFill, {}, a, std::move(s));
}

ValueId Builder::matmul(ValueId a, ValueId b, bool trans_a, bool trans_b) {
  constexpr OpKind k = OpKind::kMatMul;
  expect_rank(k, a, 2, "a");
  expect_rank(k, b, 2, "b");
  expect_float(k, a, "a");
  expect_float(k, b, "b");
  const Shape& sa = shape(a);
  const Shape& sb = shape(b);
  const int64_t m = trans_a ? sa[1] : sa[0], ka = trans_a ? sa[0] : sa[1];
  const int64_t kb = trans_b ? sb[1] : sb[0], n = trans_b ? sb[0] : sb[1];
  if (ka != kb) {
    fail(k, fmt::format("inner sizes differ: a {}{} times b {}{}", shape_string(sa),
                        trans_a ? "ᵀ" : "", shape_string(sb), trans_b ? "ᵀ" : ""));
  }
  OpAttrs attrs;
  attrs.set_trans_a(trans_a);
  attrs.set_trans_b(trans_b);
  return emit_float(k, {a, b}, attrs, {m, n});
}

ValueId Builder::add(ValueId a, ValueId b) {
  expect_same_shape(OpKind::kAdd, a, b, "a", "b");
  expect_float(OpKind::kAdd, a, "a");
  expect_float(OpKind::kAdd, b, "b");
  return emit_float(OpKind::kAdd, {a, b}, {}, shape(a));
}

ValueId Builder::mul(ValueId a, ValueId b) {
  expect_same_shape(OpKind::kMul, a, b, "a", "b");
  expect_float(OpKind::kMul, a, "a");
  expect_float(OpKind::kMul, b, "b");
  return emit_float(OpKind::kMul, {a, b}, {}, shape(a));
}

ValueId Builder::scale(ValueId x, double alpha) {
  expect_float(OpKind::kScale, x, "x");
  OpAttrs a;
  a.set_alpha(alpha);
  return emit_float(OpKind::kScale, {x}, a, shape(x));
}

ValueId Builder::bias_add(ValueId x, ValueId bias) {
  constexpr OpKind k = OpKind::kBiasAdd;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  expect_float(k, bias, "bias");
  if (shape(bias) != Shape{shape(x)[1]}) {
    fail(k, fmt::format("bias {} does not match x {}", shape_string(shape(bias)),
                        shape_string(shape(x))));
  }
  return emit_float(k, {x, bias}, {}, shape(x));
}

ValueId Builder::relu(ValueId x) {
  expect_float(OpKind::kRelu, x, "x");
  return emit_float(OpKind::kRelu, {x}, {}, shape(x));
}

ValueId Builder::leaky_relu(ValueId x, double slope) {
  expect_float(OpKind::kLeakyRelu, x, "x");
  OpAttrs a;
  a.set_alpha(slope);
  return emit_float(OpKind::kLeakyRelu, {x}, a, shape(x));
}

ValueId Builder::concat(const std::vector<ValueId>& inputs) {
  constexpr OpKind k = OpKind::kConcat;
  if (inputs.empty()) fail(k, "no inputs");
  int64_t width = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    expect_rank(k, inputs[i], 2, "input");
    expect_float(k, inputs[i], "input");
    if (rows(inputs[i]) != rows(inputs[0])) {
      fail(k, fmt::format("input {} {} and input 0 {} differ in rows", i, shape_string(shape(inputs[i])),
                          shape_string(shape(inputs[0]))));
    }
    width += shape(inputs[i])[1];
  }
  return emit_float(k, inputs, {}, {rows(inputs[0]), width});
}

ValueId Builder::slice_cols(ValueId x, int64_t begin, int64_t width) {
  constexpr OpKind k = OpKind::kSliceCols;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (begin < 0 || width < 0 || begin + width > shape(x)[1]) {
    fail(k, fmt::format("columns {} .. {} are not within x {}", begin, begin + width, shape_string(shape(x))));
  }
  OpAttrs a;
  a.set_begin(begin);
  a.set_width(width);
  return emit_float(k, {x}, a, {rows(x), width});
}

ValueId Builder::activation(ValueId x, ops::Activation kind) {
  expect_float(OpKind::kActivation, x, "x");
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  return emit_float(OpKind::kActivation, {x}, a, shape(x));
}

ValueId Builder::activation_grad(ValueId x, ValueId g, ops::Activation kind) {
  expect_same_shape(OpKind::kActivationGrad, x, g, "x", "g");
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  return emit_float(OpKind::kActivationGrad, {x, g}, a, shape(x));
}

ValueId Builder::elu(ValueId x, double alpha) {
  expect_float(OpKind::kElu, x, "x");
  OpAttrs a;
  a.set_alpha(alpha);
  return emit_float(OpKind::kElu, {x}, a, shape(x));
}

ValueId Builder::dropout(ValueId x, double p, uint64_t key, int32_t edges_of_graph) {
  constexpr OpKind k = OpKind::kDropout;
  if (!(p >= 0 && p <= 1)) fail(k, fmt::format("p = {} is not in [0, 1]", p));
  expect_float(k, x, "x");
  if (p == 0) return x;
  if (replicated()) {
    fail(k, "dropout in data-parallel training is not supported yet: its masks are keyed by local rows, "
            "which differ from one rank's (train on one rank, or set p = 0)");
  }
  OpAttrs a;
  a.set_alpha(p);
  a.set_key(key);
  std::vector<ValueId> inputs{x};
  if (partitioned()) {
    const ValueId rows = edges_of_graph >= 0 ? graph_input(edges_of_graph, true)
                                             : node_input(kNodeGlobalId, DType::kI64);
    if (shape(rows)[0] != this->rows(x)) {
      fail(k, fmt::format("x {} has another row count than its global ids {}",
                          shape_string(shape(x)), shape_string(shape(rows))));
    }
    inputs.push_back(rows);
  }
  const ValueId out = emit_float(k, std::move(inputs), a, shape(x));
  // Which elements were kept, a byte each, for the backward.
  const ValueId keep =
      new_value(program_.value(out).name + ".keep", DType::kBool, shape(x), Role::kTemp);
  program_.ops.back().outputs.push_back(keep);
  return out;
}

ValueId Builder::log_softmax(ValueId x) {
  expect_rank(OpKind::kLogSoftmax, x, 2, "x");
  expect_float(OpKind::kLogSoftmax, x, "x");
  return emit_float(OpKind::kLogSoftmax, {x}, {}, shape(x));
}

ValueId Builder::nll_loss(ValueId log_prob, ValueId labels, ValueId mask) {
  return class_loss(OpKind::kNllLoss, log_prob, labels, mask);
}

ValueId Builder::cross_entropy(ValueId x, ValueId labels, ValueId mask) {
  return class_loss(OpKind::kCrossEntropy, x, labels, mask);
}

ValueId Builder::class_loss(OpKind k, ValueId x, ValueId labels, ValueId mask) {
  const char* x_name = k == OpKind::kNllLoss ? "log_prob" : "x";
  expect_rank(k, x, 2, x_name);
  expect_float(k, x, x_name);
  expect_dtype(k, labels, DType::kI64, "labels");
  expect_dtype(k, mask, DType::kBool, "mask");
  const Shape row_shape{rows(x)};
  if (shape(labels) != row_shape || shape(mask) != row_shape) {
    fail(k, fmt::format("labels {} and mask {} must be [{}] for {} {}",
                        shape_string(shape(labels)), shape_string(shape(mask)), row_shape[0],
                        x_name, shape_string(shape(x))));
  }
  std::vector<ValueId> inputs{x, labels, mask};
  if (partitioned() || replicated()) inputs.push_back(mask_count(mask));
  return emit_float(k, std::move(inputs), {}, {1});
}

ValueId Builder::l1_loss(ValueId pred, ValueId target, ValueId mask) {
  const ValueId loss = mse_loss(pred, target, mask);
  program_.ops.back().attrs.set_absolute(true);
  return loss;
}

ValueId Builder::mse_loss(ValueId pred, ValueId target, ValueId mask) {
  constexpr OpKind k = OpKind::kMseLoss;
  expect_rank(k, pred, 2, "pred");
  expect_same_shape(k, pred, target, "pred", "target");
  expect_float(k, pred, "pred");
  expect_float(k, target, "target");
  expect_dtype(k, mask, DType::kBool, "mask");
  if (shape(mask) != Shape{rows(pred)}) {
    fail(k, fmt::format("mask {} must be [{}]", shape_string(shape(mask)), rows(pred)));
  }
  std::vector<ValueId> inputs{pred, target, mask};
  if (partitioned() || replicated()) inputs.push_back(mask_count(mask));
  return emit_float(k, std::move(inputs), {}, {1});
}

ValueId Builder::head_dot(ValueId x, ValueId att, int64_t heads) {
  constexpr OpKind k = OpKind::kHeadDot;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  expect_float(k, att, "att");
  const int64_t f = shape(x)[1];
  if (heads < 1 || f % heads != 0 || program_.value(att).elements() != f) {
    fail(k, fmt::format("x {} and att {} do not split into {} heads", shape_string(shape(x)),
                        shape_string(shape(att)), heads));
  }
  return emit_float(k, {x, att}, with_heads(heads), {rows(x), heads});
}

ValueId Builder::head_mean(ValueId x, int64_t heads) {
  constexpr OpKind k = OpKind::kHeadMean;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (heads < 1 || shape(x)[1] % heads != 0) {
    fail(k, fmt::format("x {} does not split into {} heads", shape_string(shape(x)), heads));
  }
  return emit_float(k, {x}, with_heads(heads), {rows(x), shape(x)[1] / heads});
}

ValueId Builder::layer_norm_moments(ValueId x, ValueId mask) {
  constexpr OpKind k = OpKind::kLayerNormMoments;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  std::vector<ValueId> inputs{x};
  if (mask != kNoValue) {
    expect_dtype(k, mask, DType::kBool, "mask");
    if (shape(mask) != Shape{rows(x)}) {
      fail(k, fmt::format("mask {} must be [{}]", shape_string(shape(mask)), rows(x)));
    }
    inputs.push_back(mask);
  }
  return emit(k, std::move(inputs), {}, DType::kF64, {3});
}

ValueId Builder::layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps) {
  constexpr OpKind k = OpKind::kLayerNorm;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  const Shape cols{shape(x)[1]};
  if (shape(gamma) != cols || shape(beta) != cols) {
    fail(k, fmt::format("weight {} and bias {} must be [{}] for x {}", shape_string(shape(gamma)),
                        shape_string(shape(beta)), cols[0], shape_string(shape(x))));
  }
  if (!(eps > 0)) fail(k, fmt::format("eps = {} must be > 0", eps));
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
  return emit_float(k, std::move(inputs), a, shape(x));
}

ValueId Builder::divide_rows(ValueId x, ValueId degree) {
  constexpr OpKind k = OpKind::kDivideRows;
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  expect_dtype(k, degree, DType::kI64, "degree");
  if (shape(degree) != Shape{rows(x)}) {
    fail(k, fmt::format("degree {} must be [{}] for x {}", shape_string(shape(degree)), rows(x),
                        shape_string(shape(x))));
  }
  return emit_float(k, {x, degree}, {}, shape(x));
}

// ---- graph ops ----

ValueId Builder::gcn_norm(int32_t graph) {
  constexpr OpKind k = OpKind::kGcnNorm;
  const GraphInfo& g = graph_info(k, graph);
  if (g.num_src != g.num_dst) {
    fail(k, fmt::format("graph '{}' joins {} source and {} destination nodes; GCN needs one node set",
                        g.name, g.num_src, g.num_dst));
  }
  std::vector<ValueId> inputs;
  if (partitioned()) inputs.push_back(graph_input(graph, false));
  return emit_float(k, std::move(inputs), graph_attrs(k, graph), {g.num_edges});
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

ValueId Builder::segment_softmax(int32_t graph, ValueId score) {
  constexpr OpKind k = OpKind::kSegmentSoftmax;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, score, 2, "score");
  expect_float(k, score, "score");
  if (rows(score) != g.num_edges) {
    fail(k, fmt::format("score {} must have E = {} rows (graph '{}')", shape_string(shape(score)),
                        g.num_edges, g.name));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(score)[1]);
  return emit_float(k, {score}, a, shape(score));
}

ValueId Builder::attention_softmax(int32_t graph, ValueId a, ValueId b, double slope) {
  constexpr OpKind k = OpKind::kAttentionSoftmax;
  if (partitioned()) fail(k, "a partitioned program's softmax runs in pieces (Builder::softmax)");
  OpAttrs attrs = per_endpoint_attrs(k, graph, a, b);
  attrs.set_alpha(slope);
  return emit_float(k, {a, b}, attrs, {graph_info(k, graph).num_edges, shape(a)[1]});
}

ValueId Builder::segment_max(int32_t graph, ValueId score) {
  constexpr OpKind k = OpKind::kSegmentMax;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, score, 2, "score");
  expect_float(k, score, "score");
  if (rows(score) != g.num_edges) {
    fail(k, fmt::format("score {} must have E = {} rows", shape_string(shape(score)), g.num_edges));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(score)[1]);
  return emit_float(k, {score}, a, {g.num_dst, shape(score)[1]});
}

ValueId Builder::segment_exp_sum(int32_t graph, ValueId score, ValueId m) {
  constexpr OpKind k = OpKind::kSegmentExpSum;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, score, 2, "score");
  const int64_t h = shape(score)[1];
  if (rows(score) != g.num_edges || shape(m) != Shape{g.num_dst, h}) {
    fail(k, fmt::format("score {} must be [{}, H] and m {} [{}, H]", shape_string(shape(score)),
                        g.num_edges, shape_string(shape(m)), g.num_dst));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(h);
  return emit_float(k, {score, m}, a, {g.num_dst, h});
}

ValueId Builder::segment_softmax_apply(int32_t graph, ValueId score, ValueId m, ValueId s) {
  constexpr OpKind k = OpKind::kSegmentSoftmaxApply;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, score, 2, "score");
  const int64_t h = shape(score)[1];
  if (rows(score) != g.num_edges || shape(m) != Shape{g.num_dst, h} || shape(s) != shape(m)) {
    fail(k, fmt::format("score {} must be [{}, H], m {} and s {} [{}, H]",
                        shape_string(shape(score)), g.num_edges, shape_string(shape(m)),
                        shape_string(shape(s)), g.num_dst));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(h);
  return emit_float(k, {score, m, s}, a, shape(score));
}

OpAttrs Builder::per_endpoint_attrs(OpKind k, int32_t graph, ValueId a, ValueId b) {
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, a, 2, "a");
  expect_rank(k, b, 2, "b");
  expect_float(k, a, "a");
  expect_float(k, b, "b");
  if (rows(a) != g.num_src || rows(b) != g.num_dst || shape(a)[1] != shape(b)[1]) {
    fail(k, fmt::format("a {} must be [{}, H] and b {} [{}, H] (graph '{}')",
                        shape_string(shape(a)), g.num_src, shape_string(shape(b)), g.num_dst,
                        g.name));
  }
  OpAttrs attrs = graph_attrs(k, graph);
  attrs.set_heads(shape(a)[1]);
  return attrs;
}

ValueId Builder::sddmm_add(int32_t graph, ValueId a, ValueId b) {
  constexpr OpKind k = OpKind::kSddmmAdd;
  return emit_float(k, {a, b}, per_endpoint_attrs(k, graph, a, b),
                    {graph_info(k, graph).num_edges, shape(a)[1]});
}

ValueId Builder::sddmm_dot(int32_t graph, ValueId a, ValueId b, int64_t heads) {
  constexpr OpKind k = OpKind::kSddmmDot;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, a, 2, "a");
  expect_rank(k, b, 2, "b");
  expect_float(k, a, "a");
  expect_float(k, b, "b");
  if (rows(a) != g.num_src || rows(b) != g.num_dst || shape(a)[1] != shape(b)[1] || heads < 1 ||
      shape(a)[1] % heads != 0) {
    fail(k, fmt::format("a {} must be [{}, F] and b {} [{}, F] with F divisible by {} heads "
                        "(graph '{}')", shape_string(shape(a)), g.num_src, shape_string(shape(b)),
                        g.num_dst, heads, g.name));
  }
  OpAttrs attrs = graph_attrs(k, graph);
  attrs.set_heads(heads);
  return emit_float(k, {a, b}, attrs, {g.num_edges, heads});
}

// ---- collectives ----

ValueId Builder::allreduce(ValueId x) {
  constexpr OpKind k = OpKind::kAllReduce;
  if (!is_floating(program_.value(x).dtype)) {
    fail(k, fmt::format("x must be float32 or float64, not {}", to_string(program_.value(x).dtype)));
  }
  return emit(k, {x}, {}, program_.value(x).dtype, shape(x));
}

ValueId Builder::halo_sum(ValueId x) {
  constexpr OpKind k = OpKind::kHaloSum;
  expect_partitioned(k);
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (rows(x) != program_.local_nodes) {
    fail(k, fmt::format("x {} must have a row per local vertex ({})", shape_string(shape(x)),
                        program_.local_nodes));
  }
  return emit_float(k, {x}, {}, shape(x));
}

std::pair<ValueId, ValueId> Builder::halo_max(Reduce reduce, ValueId x, ValueId arg,
                                              int32_t graph) {
  constexpr OpKind k = OpKind::kHaloMax;
  expect_partitioned(k);
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (!ops::has_arg(reduce)) fail(k, fmt::format("reduce {} is not max or min", ops::to_string(reduce)));
  if (rows(x) != program_.local_nodes) {
    fail(k, fmt::format("x {} must have a row per local vertex ({})", shape_string(shape(x)),
                        program_.local_nodes));
  }
  OpAttrs a;
  a.set_reduce(to_proto(reduce));
  std::vector<ValueId> inputs{x};
  if (arg != kNoValue) {
    expect_dtype(k, arg, DType::kI32, "arg");
    expect_same_shape(k, x, arg, "x", "arg");
    a.set_graph(graph);
    inputs.push_back(arg);
    inputs.push_back(graph_input(graph, true));
  }
  const ValueId out = emit_float(k, std::move(inputs), a, shape(x));
  ValueId new_arg = kNoValue;
  if (arg != kNoValue) {
    new_arg = new_value(program_.value(out).name + ".arg", DType::kI32, shape(x), Role::kTemp);
    program_.ops.back().outputs.push_back(new_arg);
  }
  return {out, new_arg};
}

ValueId Builder::gather(int32_t graph, ValueId x) {
  constexpr OpKind k = OpKind::kGather;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (rows(x) != g.num_src) {
    fail(k, fmt::format("x {} must have {} rows, the source nodes of graph '{}'",
                        shape_string(shape(x)), g.num_src, g.name));
  }
  return emit_float(k, {x}, graph_attrs(k, graph), {g.num_edges, shape(x)[1]});
}

ValueId Builder::edge_scale(ValueId messages, ValueId edge_weight) {
  constexpr OpKind k = OpKind::kEdgeScale;
  expect_rank(k, messages, 2, "messages");
  expect_float(k, messages, "messages");
  expect_float(k, edge_weight, "edge weight");
  const Shape& w = shape(edge_weight);
  if (!is_edge_weight_shape(w, rows(messages)) || shape(messages)[1] % (w.size() == 2 ? w[1] : 1)) {
    fail(k, fmt::format("edge weight {} does not fit messages {}", shape_string(w),
                        shape_string(shape(messages))));
  }
  return emit_float(k, {messages, edge_weight}, with_heads(w.size() == 2 ? w[1] : 1),
                    shape(messages));
}

std::pair<ValueId, ValueId> Builder::scatter(Reduce reduce, int32_t graph, ValueId messages) {
  constexpr OpKind k = OpKind::kScatter;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, messages, 2, "messages");
  expect_float(k, messages, "messages");
  if (rows(messages) != g.num_edges) {
    fail(k, fmt::format("messages {} must have E = {} rows (graph '{}')",
                        shape_string(shape(messages)), g.num_edges, g.name));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_reduce(to_proto(reduce));
  const ValueId out = emit_float(k, {messages}, a, {g.num_dst, shape(messages)[1]});
  return {out, arg_output(reduce, out)};
}

std::pair<ValueId, ValueId> Builder::spmm(Reduce reduce, int32_t graph, ValueId x,
                                          ValueId edge_weight) {
  constexpr OpKind k = OpKind::kSpmm;
  const GraphInfo& g = graph_info(k, graph);
  expect_rank(k, x, 2, "x");
  expect_float(k, x, "x");
  if (rows(x) != g.num_src) {
    fail(k, fmt::format("x {} must have {} rows, the source nodes of graph '{}'",
                        shape_string(shape(x)), g.num_src, g.name));
  }
  OpAttrs a = graph_attrs(k, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(edge_heads(k, graph, edge_weight, shape(x)[1]));
  std::vector<ValueId> inputs{x};
  if (edge_weight != kNoValue) {
    expect_float(k, edge_weight, "edge weight");
    inputs.push_back(edge_weight);
  }
  const ValueId out = emit_float(k, std::move(inputs), a, {g.num_dst, shape(x)[1]});
  return {out, arg_output(reduce, out)};
}

// ---- sparse input features ----

// The sparse matrix `matrix` (a graph), after checking that `values` are
// its stored values: float, [nnz].
const GraphInfo& Builder::stored_values(OpKind kind, int32_t matrix, ValueId values) const {
  const GraphInfo& g = graph_info(kind, matrix);
  expect_float(kind, values, "values");
  if (shape(values) != Shape{g.num_edges}) {
    fail(kind, fmt::format("values {} must be [{}], the stored entries of '{}'",
                           shape_string(shape(values)), g.num_edges, g.name));
  }
  return g;
}

ValueId Builder::sparse_matmul(int32_t matrix, ValueId values, ValueId b, bool trans_b) {
  constexpr OpKind k = OpKind::kSparseMatMul;
  const GraphInfo& g = stored_values(k, matrix, values);
  expect_float(k, b, "b");
  expect_rank(k, b, 2, "b");
  const Shape& sb = shape(b);
  const int64_t kb = trans_b ? sb[1] : sb[0], m = trans_b ? sb[0] : sb[1];
  if (kb != g.num_src) {
    fail(k, fmt::format("inner sizes differ: '{}' [{}, {}] times b {}{}", g.name, g.num_dst,
                        g.num_src, shape_string(sb), trans_b ? "ᵀ" : ""));
  }
  OpAttrs a = graph_attrs(k, matrix);
  a.set_trans_b(trans_b);
  const ValueId out = emit_float(k, {values, b}, a, {g.num_dst, m});
  // b transposed once per call, so every stored value reads one contiguous row.
  const ValueId workspace = new_value(program_.value(out).name + ".workspace", float_type(),
                                      trans_b ? Shape{g.num_src, m} : Shape{0}, Role::kTemp);
  program_.ops.back().outputs.push_back(workspace);
  return out;
}

ValueId Builder::sparse_dropout(int32_t matrix, ValueId values, double p, uint64_t key) {
  constexpr OpKind k = OpKind::kSparseDropout;
  const GraphInfo& g = stored_values(k, matrix, values);
  if (!(p >= 0 && p <= 1)) fail(k, fmt::format("p = {} is not in [0, 1]", p));
  if (p == 0) return values;
  OpAttrs a = graph_attrs(k, matrix);
  a.set_alpha(p);
  a.set_key(key);
  std::vector<ValueId> inputs{values};
  if (partitioned()) {
    const ValueId rows = node_input(kNodeGlobalId, DType::kI64);
    if (shape(rows)[0] != g.num_dst) {
      fail(k, fmt::format("'{}' has {} rows, its global ids {}", g.name, g.num_dst,
                          shape_string(shape(rows))));
    }
    inputs.push_back(rows);
  }
  return emit_float(k, std::move(inputs), a, shape(values));
}

// ---- backward ----

ValueId Builder::sparse_matmul_grad_b(int32_t matrix, ValueId values, ValueId g, ValueId b,
                                      bool trans_b) {
  constexpr OpKind k = OpKind::kSparseMatMulGradB;
  const GraphInfo& info = graph_info(k, matrix);
  expect_rank(k, g, 2, "g");
  if (rows(g) != info.num_dst) {
    fail(k, fmt::format("g {} must have {} rows, the rows of '{}'", shape_string(shape(g)),
                        info.num_dst, info.name));
  }
  OpAttrs a = graph_attrs(k, matrix);
  a.set_trans_b(trans_b);
  const ValueId out = emit_float(k, {values, g}, a, shape(b));
  // Accumulators for a walk by rows that ends transposed (ops/sparse_matmul.h).
  const int64_t m = shape(g)[1];
  const int64_t size = ops::sparse_matmul_backward_b_workspace(info.num_dst, info.num_src, m,
                                                               trans_b, item_size(float_type()));
  const ValueId workspace =
      new_value(program_.value(out).name + ".workspace", float_type(),
                size > 0 ? Shape{info.num_src, m} : Shape{0}, Role::kTemp);
  program_.ops.back().outputs.push_back(workspace);
  return out;
}

ValueId Builder::bias_grad(ValueId g) {
  expect_rank(OpKind::kBiasGrad, g, 2, "g");
  return emit_float(OpKind::kBiasGrad, {g}, {}, {shape(g)[1]});
}

ValueId Builder::relu_grad(ValueId x, ValueId g) {
  expect_same_shape(OpKind::kReluGrad, x, g, "x", "g");
  return emit_float(OpKind::kReluGrad, {x, g}, {}, shape(x));
}

ValueId Builder::leaky_relu_grad(ValueId x, ValueId g, double slope) {
  expect_same_shape(OpKind::kLeakyReluGrad, x, g, "x", "g");
  OpAttrs a;
  a.set_alpha(slope);
  return emit_float(OpKind::kLeakyReluGrad, {x, g}, a, shape(x));
}

ValueId Builder::elu_grad(ValueId x, ValueId g, double alpha) {
  expect_same_shape(OpKind::kEluGrad, x, g, "x", "g");
  OpAttrs a;
  a.set_alpha(alpha);
  return emit_float(OpKind::kEluGrad, {x, g}, a, shape(x));
}

ValueId Builder::dropout_grad(ValueId g, ValueId keep, double p) {
  expect_same_shape(OpKind::kDropoutGrad, g, keep, "g", "keep");
  OpAttrs a;
  a.set_alpha(p);
  return emit_float(OpKind::kDropoutGrad, {g, keep}, a, shape(g));
}

ValueId Builder::log_softmax_grad(ValueId out, ValueId g) {
  expect_same_shape(OpKind::kLogSoftmaxGrad, out, g, "out", "g");
  return emit_float(OpKind::kLogSoftmaxGrad, {out, g}, {}, shape(out));
}

ValueId Builder::nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g,
                               ValueId count) {
  std::vector<ValueId> inputs{log_prob, labels, mask, g};
  if (count != kNoValue) inputs.push_back(count);
  return emit_float(OpKind::kNllLossGrad, std::move(inputs), {}, shape(log_prob));
}

ValueId Builder::cross_entropy_grad(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                    ValueId count) {
  std::vector<ValueId> inputs{x, labels, mask, g};
  if (count != kNoValue) inputs.push_back(count);
  return emit_float(OpKind::kCrossEntropyGrad, std::move(inputs), {}, shape(x));
}

ValueId Builder::mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g,
                               ValueId count, bool absolute) {
  std::vector<ValueId> inputs{pred, target, mask, g};
  if (count != kNoValue) inputs.push_back(count);
  OpAttrs a;
  a.set_absolute(absolute);
  return emit_float(OpKind::kMseLossGrad, std::move(inputs), a, shape(pred));
}

ValueId Builder::head_dot_grad_x(ValueId att, ValueId g, int64_t heads) {
  return emit_float(OpKind::kHeadDotGradX, {att, g}, with_heads(heads),
                    {rows(g), program_.value(att).elements()});
}

ValueId Builder::head_dot_grad_att(ValueId x, ValueId g, ValueId att, int64_t heads) {
  return emit_float(OpKind::kHeadDotGradAtt, {x, g}, with_heads(heads), shape(att));
}

ValueId Builder::head_mean_grad(ValueId g, int64_t heads) {
  return emit_float(OpKind::kHeadMeanGrad, {g}, with_heads(heads), {rows(g), shape(g)[1] * heads});
}

ValueId Builder::layer_norm_grad_sums(ValueId x, ValueId gamma, ValueId g, ValueId moments) {
  return emit(OpKind::kLayerNormGradSums, {x, gamma, g, moments}, {}, DType::kF64, {2});
}

ValueId Builder::layer_norm_grad_x(ValueId x, ValueId gamma, ValueId g, ValueId moments,
                                   ValueId sums, ValueId mask, const OpAttrs& forward) {
  std::vector<ValueId> inputs{x, gamma, g};
  if (moments != kNoValue) {
    inputs.push_back(moments);
    inputs.push_back(sums);
    if (mask != kNoValue) inputs.push_back(mask);
  }
  return emit_float(OpKind::kLayerNormGradX, std::move(inputs), forward, shape(x));
}

ValueId Builder::layer_norm_grad_gamma(ValueId x, ValueId g, ValueId gamma, ValueId moments,
                                       const OpAttrs& forward) {
  std::vector<ValueId> inputs{x, g};
  if (moments != kNoValue) inputs.push_back(moments);
  return emit_float(OpKind::kLayerNormGradGamma, std::move(inputs), forward, shape(gamma));
}

ValueId Builder::gather_grad(int32_t graph, ValueId g) {
  constexpr OpKind k = OpKind::kGatherGrad;
  return emit_float(k, {g}, graph_attrs(k, graph), {graph_info(k, graph).num_src, shape(g)[1]});
}

ValueId Builder::edge_dot(ValueId g, ValueId messages, ValueId edge_weight) {
  expect_same_shape(OpKind::kEdgeDot, g, messages, "g", "messages");
  return emit_float(OpKind::kEdgeDot, {g, messages},
                    with_heads(shape(edge_weight).size() == 2 ? shape(edge_weight)[1] : 1),
                    shape(edge_weight));
}

ValueId Builder::scatter_grad(Reduce reduce, int32_t graph, ValueId g, ValueId arg) {
  constexpr OpKind k = OpKind::kScatterGrad;
  OpAttrs a = graph_attrs(k, graph);
  a.set_reduce(to_proto(reduce));
  std::vector<ValueId> inputs{g};
  if (arg != kNoValue) inputs.push_back(arg);
  return emit_float(k, std::move(inputs), a, {graph_info(k, graph).num_edges, shape(g)[1]});
}

ValueId Builder::spmm_grad_x(Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight,
                             ValueId g, ValueId arg) {
  constexpr OpKind k = OpKind::kSpmmGradX;
  OpAttrs a = graph_attrs(k, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(edge_heads(k, graph, edge_weight, shape(x)[1]));
  // Inputs: x, g, then the edge weight and the arg when present.
  return emit_float(k, {x, g, edge_weight, arg}, a, shape(x));
}

ValueId Builder::spmm_grad_w(Reduce reduce, int32_t graph, ValueId x, ValueId g,
                             ValueId edge_weight, ValueId arg) {
  constexpr OpKind k = OpKind::kSpmmGradW;
  OpAttrs a = graph_attrs(k, graph);
  a.set_reduce(to_proto(reduce));
  a.set_heads(edge_heads(k, graph, edge_weight, shape(x)[1]));
  // Inputs: x, g, the edge weight, the arg when present.
  return emit_float(k, {x, g, edge_weight, arg}, a, shape(edge_weight));
}

ValueId Builder::sddmm_add_grad_a(int32_t graph, ValueId g) {
  constexpr OpKind k = OpKind::kSddmmAddGradA;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(g)[1]);
  return emit_float(k, {g}, a, {graph_info(k, graph).num_src, shape(g)[1]});
}

ValueId Builder::sddmm_add_grad_b(int32_t graph, ValueId g) {
  constexpr OpKind k = OpKind::kSddmmAddGradB;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(g)[1]);
  return emit_float(k, {g}, a, {graph_info(k, graph).num_dst, shape(g)[1]});
}

ValueId Builder::sddmm_dot_grad_a(int32_t graph, ValueId b, ValueId g, int64_t heads) {
  constexpr OpKind k = OpKind::kSddmmDotGradA;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(heads);
  return emit_float(k, {b, g}, a, {graph_info(k, graph).num_src, shape(b)[1]});
}

ValueId Builder::sddmm_dot_grad_b(int32_t graph, ValueId a, ValueId g, int64_t heads) {
  constexpr OpKind k = OpKind::kSddmmDotGradB;
  OpAttrs attrs = graph_attrs(k, graph);
  attrs.set_heads(heads);
  return emit_float(k, {a, g}, attrs, {graph_info(k, graph).num_dst, shape(a)[1]});
}

ValueId Builder::segment_softmax_grad(int32_t graph, ValueId alpha, ValueId g) {
  constexpr OpKind k = OpKind::kSegmentSoftmaxGrad;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(alpha)[1]);
  return emit_float(k, {alpha, g}, a, shape(alpha));
}

ValueId Builder::attention_softmax_grad(int32_t graph, ValueId a, ValueId b, ValueId alpha,
                                        ValueId g, double slope) {
  constexpr OpKind k = OpKind::kAttentionSoftmaxGrad;
  expect_same_shape(k, alpha, g, "alpha", "g");
  OpAttrs attrs = graph_attrs(k, graph);
  attrs.set_heads(shape(alpha)[1]);
  attrs.set_alpha(slope);
  return emit_float(k, {a, b, alpha, g}, attrs, shape(alpha));
}

ValueId Builder::segment_exp_sum_grad(int32_t graph, ValueId score, ValueId m, ValueId g) {
  constexpr OpKind k = OpKind::kSegmentExpSumGrad;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(score)[1]);
  return emit_float(k, {score, m, g}, a, shape(score));
}

ValueId Builder::segment_softmax_apply_grad_s(int32_t graph, ValueId alpha, ValueId g, ValueId s) {
  constexpr OpKind k = OpKind::kSegmentSoftmaxApplyGradS;
  OpAttrs a = graph_attrs(k, graph);
  a.set_heads(shape(alpha)[1]);
  return emit_float(k, {alpha, g, s}, a, shape(s));
}

ValueId Builder::keep_winners(int32_t graph, ValueId g, ValueId arg) {
  constexpr OpKind k = OpKind::kKeepWinners;
  expect_same_shape(k, g, arg, "g", "arg");
  return emit_float(k, {g, arg}, graph_attrs(k, graph), shape(g));
}

// ---- gradient buckets ----

ValueId Builder::bucket_start(const std::vector<ValueId>& grads, uint64_t bucket) {
  constexpr OpKind k = OpKind::kBucketStart;
  int64_t elements = 0;
  for (ValueId g : grads) {
    expect_float(k, g, "gradient");
    elements += program_.value(g).elements();
  }
  OpAttrs a;
  a.set_key(bucket);
  return emit_float(k, grads, a, {elements});
}

std::vector<ValueId> Builder::bucket_wait(ValueId bucket_value, const std::vector<ValueId>& grads,
                                          uint64_t bucket) {
  OpAttrs a;
  a.set_key(bucket);
  std::vector<ValueId> outputs;
  for (ValueId g : grads) {
    outputs.push_back(new_value(program_.value(g).name + ".allreduced", float_type(), shape(g),
                                Role::kTemp));
  }
  program_.ops.push_back(Op{OpKind::kBucketWait, {bucket_value}, outputs, a, scope_});
  return outputs;
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
  a.set_key(slot);
  emit_effect(OpKind::kAccumulate, {metrics, scalar}, a);
}

void Builder::count_correct(ValueId metrics, ValueId log_prob, ValueId labels, ValueId mask,
                            uint64_t slot) {
  constexpr OpKind k = OpKind::kCountCorrect;
  expect_dtype(k, metrics, DType::kF64, "metrics");
  expect_float(k, log_prob, "log_prob");
  expect_dtype(k, labels, DType::kI64, "labels");
  expect_dtype(k, mask, DType::kBool, "mask");
  if (static_cast<int64_t>(slot) + 1 >= program_.value(metrics).elements()) {
    fail(k, fmt::format("slots {}..{} are outside metrics {}", slot, slot + 1,
                        shape_string(shape(metrics))));
  }
  OpAttrs a;
  a.set_key(slot);
  emit_effect(k, {metrics, log_prob, labels, mask}, a);
}

}  // namespace gnnrt::runtime
