#include "model/modules.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <optional>

namespace gnnrt::model {
namespace {

using runtime::ValueId;
using Init = ParamDecl::Init;
using Domain = Port::Domain;

// ---- convolutions over an edge set ----
// Inputs: x_src, and x_dst when the edge set joins two node sets (PyG's
// (x_src, x_dst)); a homogeneous edge set's one input serves both ends.
struct EdgeInputs {
  int edges;
  Port src, dst;
};

// `extra`: inputs after the node rows (the attention's edge features).
EdgeInputs edge_inputs(ModuleContext& c, const std::string& edges_name, size_t extra = 0) {
  const int e = c.edge_set(edges_name);
  const Schema::EdgeSetInfo& info = c.schema.edge_sets[e];
  const bool bipartite = info.source != info.destination;
  c.expect_inputs(1 + extra, 2 + extra);
  const size_t nodes = c.inputs.size() - extra;
  if (!bipartite && nodes == 2) {
    c.fail(fmt::format("edge set '{}' joins node set '{}' to itself: give one input, not two", info.name,
                       c.schema.node_sets[info.source].name));
  }
  if (bipartite && nodes != 2) {
    c.fail(fmt::format("edge set '{}' joins '{}' to '{}': give two inputs (source rows, destination rows)",
                       info.name, c.schema.node_sets[info.source].name,
                       c.schema.node_sets[info.destination].name));
  }
  EdgeInputs r{e, c.inputs[0], nodes == 2 ? c.inputs[1] : c.inputs[0]};
  c.expect_domain(r.src, Domain::kNodes, info.source, "its first input (the sources)");
  c.expect_domain(r.dst, Domain::kNodes, info.destination, "its second input (the destinations)");
  return r;
}

int64_t positive(const ModuleContext& c, int64_t v, const char* field) {
  if (v < 1) c.fail(fmt::format("{} = {} must be >= 1", field, v));
  return v;
}

// GINConv: nn((1 + eps) x_dst + sum_{j -> i} x_src[j]).
Port gin(ModuleContext& c) {
  const auto& m = c.module.gin();
  const EdgeInputs in = edge_inputs(c, m.edges());
  if (in.src.width != in.dst.width) {
    c.fail(fmt::format("sources have width {}, destinations {}: GIN adds them", in.src.width, in.dst.width));
  }
  const int64_t width = in.src.width, out = positive(c, m.out(), "out");
  const int64_t hidden = m.hidden() > 0 ? m.hidden() : out;
  const ValueId agg = c.b.aggregate(ops::Reduce::kSum, c.graph(in.edges), in.src.value);
  ValueId h = c.b.add(m.eps() == 0 ? in.dst.value : c.b.scale(in.dst.value, 1 + m.eps()), agg);
  h = c.b.relu(c.linear("nn.0", h, width, hidden, true));
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, c.linear("nn.2", h, hidden, out, true)));
}

// SAGEConv: lin_l(aggr_{j -> i} x_src[j]) + lin_r(x_dst), lin_r without bias.
Port sage(ModuleContext& c) {
  const auto& m = c.module.sage();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const int64_t out = positive(c, m.out(), "out");
  if (m.aggr() != "mean" && m.aggr() != "max" && m.aggr() != "sum") {
    c.fail(fmt::format("aggr '{}' must be mean, max or sum", m.aggr()));
  }
  const ValueId agg = c.b.aggregate(ops::parse_reduce(m.aggr()), c.graph(in.edges), in.src.value);
  const ValueId h = c.linear("lin_l", agg, in.src.width, out, true);
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, c.b.add(h, c.linear("lin_r", in.dst.value, in.dst.width, out, false))));
}

// GCNConv: D^-1/2 (A + I) D^-1/2 X W^T + b over the self-loop graph.
Port gcn(ModuleContext& c) {
  const auto& m = c.module.gcn();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const auto& info = c.schema.edge_sets[in.edges];
  if (info.source != info.destination) {
    c.fail(fmt::format("GCN needs an edge set that joins a node set to itself; '{}' is bipartite", info.name));
  }
  const int64_t width = in.src.width, out = positive(c, m.out(), "out");
  const int32_t g = c.self_loop_graph(in.edges);
  ValueId h = c.b.linear(in.src.value, c.param("lin.weight", {out, width}, Init::kGlorot, width, out));
  h = c.b.aggregate(ops::Reduce::kSum, g, h, c.b.gcn_norm(g));
  if (m.bias()) h = c.b.bias_add(h, c.param("bias", {out}, Init::kZeros, width, out));
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, h));
}

// GATConv; bipartite: lin_src on the sources, lin_dst on the destinations,
// no self loops (PyG's add_self_loops=False, required for (x_src, x_dst)).
Port gat(ModuleContext& c) {
  const auto& m = c.module.gat();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const auto& info = c.schema.edge_sets[in.edges];
  const int64_t channels = positive(c, m.out(), "out"), heads = positive(c, m.heads(), "heads");
  if (!(m.attention_dropout() >= 0 && m.attention_dropout() < 1)) {
    c.fail(fmt::format("attention_dropout = {} is not in [0, 1)", m.attention_dropout()));
  }
  const bool bipartite = info.source != info.destination;
  const int64_t hc = heads * channels;
  const int32_t g = bipartite ? c.graph(in.edges) : c.self_loop_graph(in.edges);
  const ValueId h_src = c.b.linear(
      in.src.value, c.param("lin_src.weight", {hc, in.src.width}, Init::kGlorot, in.src.width, hc));
  const ValueId h_dst = bipartite ? c.b.linear(in.dst.value, c.param("lin_dst.weight", {hc, in.dst.width},
                                                                      Init::kGlorot, in.dst.width, hc))
                                  : h_src;
  const ValueId att_src = c.param("att_src", {1, heads, channels}, Init::kGlorot, heads, channels);
  const ValueId att_dst = c.param("att_dst", {1, heads, channels}, Init::kGlorot, heads, channels);
  const ValueId score = c.b.sddmm_add(g, c.b.head_dot(h_src, att_src, heads), c.b.head_dot(h_dst, att_dst, heads));
  ValueId alpha = c.b.softmax(g, c.b.leaky_relu(score, m.negative_slope()));
  if (c.training) alpha = c.b.dropout(alpha, m.attention_dropout(), c.key, g, c.edge_ids(g));
  ValueId out = c.b.aggregate(ops::Reduce::kSum, g, h_src, alpha);
  int64_t width = hc;
  if (!m.concat()) {
    if (heads > 1) out = c.b.head_mean(out, heads);
    width = channels;
  }
  if (m.bias()) out = c.b.bias_add(out, c.param("bias", {width}, Init::kZeros, in.src.width, width));
  return c.nodes(in.dst.set, width, c.zero_padding(in.dst.set, out));
}

// ---- dense modules: same rows in and out ----
Port one_input(ModuleContext& c) {
  c.expect_inputs(1, 1);
  return c.inputs[0];
}

Port with(Port p, int64_t width, ValueId v) {
  p.width = width;
  p.value = v;
  return p;
}

Port linear(ModuleContext& c) {
  const Port x = one_input(c);
  const int64_t out = positive(c, c.module.linear().out(), "out");
  // nn.Linear's keys are the module's own: "<name>.weight".
  const bool xavier = c.module.linear().xavier();
  const ValueId w = c.param("weight", {out, x.width}, xavier ? Init::kGlorot : Init::kTorchLinear, x.width, out);
  ValueId h = c.b.linear(x.value, w);
  if (c.module.linear().bias()) {
    h = c.b.bias_add(h, c.param("bias", {out}, xavier ? Init::kZeros : Init::kTorchLinear, x.width, out));
  }
  return with(x, out, h);
}

Port mlp(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.mlp();
  std::vector<int64_t> widths{x.width};
  for (int64_t h : m.hidden()) widths.push_back(positive(c, h, "hidden"));
  widths.push_back(positive(c, m.out(), "out"));
  ValueId h = x.value;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) h = c.b.relu(h);
    // nn.Sequential numbering: Linear 0, ReLU 1, Linear 2, ...
    h = c.linear(std::to_string(2 * i), h, widths[i], widths[i + 1], true);
  }
  return with(x, widths.back(), h);
}

Port relu(ModuleContext& c) {
  const Port x = one_input(c);
  return with(x, x.width, c.b.relu(x.value));
}

Port elu(ModuleContext& c) {
  const Port x = one_input(c);
  return with(x, x.width, c.b.elu(x.value, c.module.elu().alpha()));
}

Port activation(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.activation();
  // job.proto's kinds are ops::Activation's, member for member.
  using K = proto::ActivationModule;
  static_assert(static_cast<int>(ops::Activation::kSigmoid) == K::SIGMOID &&
                static_cast<int>(ops::Activation::kSilu) == K::SILU &&
                static_cast<int>(ops::Activation::kGeluTanh) == K::GELU_TANH &&
                static_cast<int>(ops::Activation::kExp) == K::EXP &&
                static_cast<int>(ops::Activation::kTanh) == K::TANH &&
                static_cast<int>(ops::Activation::kAbs) == K::ABS &&
                static_cast<int>(ops::Activation::kClip) == K::CLIP && K::Kind_ARRAYSIZE == 7);
  const auto kind = static_cast<ops::Activation>(m.kind());
  if (kind == ops::Activation::kClip && !(m.bound() >= 0)) c.fail(fmt::format("bound = {} must be >= 0", m.bound()));
  return with(x, x.width, c.b.activation(x.value, kind, m.bound()));
}

Port dropout(ModuleContext& c) {
  const Port x = one_input(c);
  const double p = c.module.dropout().p();
  if (!(p >= 0 && p < 1)) c.fail(fmt::format("p = {} is not in [0, 1)", p));
  if (!c.training) return x;
  return with(x, x.width, c.b.dropout(x.value, p, c.key, -1, c.row_ids(x)));
}

// torch.nn.LayerNorm(width, elementwise_affine=False, eps).
ValueId plain_norm(ModuleContext& c, ValueId x, int64_t width, double eps) {
  return c.b.layer_norm(x, c.b.fill({width}, 1.0), c.b.fill({width}, 0.0), /*per_node=*/true, eps);
}

Port layer_norm(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.layer_norm();
  if (!(m.eps() > 0)) c.fail(fmt::format("eps = {} must be > 0", m.eps()));
  // Per row: padded rows never reach a real row's statistics.
  if (!m.affine()) return with(x, x.width, plain_norm(c, x.value, x.width, m.eps()));
  const ValueId gamma = c.param("weight", {x.width}, Init::kOnes, x.width, x.width);
  const ValueId beta = c.param("bias", {x.width}, Init::kZeros, x.width, x.width);
  return with(x, x.width, c.b.layer_norm(x.value, gamma, beta, /*per_node=*/true, m.eps()));
}

// add and mul: two or more inputs of the same rows and width, folded by `op`.
template <typename Op>
Port elementwise(ModuleContext& c, const char* verb, Op op) {
  if (c.inputs.size() < 2) c.fail(fmt::format("needs at least 2 inputs, has {}", c.inputs.size()));
  Port folded = c.inputs[0];
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const Port& p = c.inputs[i];
    if (!same_rows_and_width(p, folded)) {
      c.fail(fmt::format("cannot {} {} and {}", verb, c.describe(c.inputs[0]), c.describe(p)));
    }
    folded.value = op(folded.value, p.value);
  }
  return folded;
}

Port add(ModuleContext& c) {
  return elementwise(c, "add", [&](ValueId a, ValueId b) { return c.b.add(a, b); });
}

Port concat(ModuleContext& c) {
  if (c.inputs.empty()) c.fail("needs at least 1 input");
  Port out = c.inputs[0];
  std::vector<ValueId> values;
  out.width = 0;
  for (const Port& p : c.inputs) {
    if (p.domain != c.inputs[0].domain || p.set != c.inputs[0].set) {
      c.fail(fmt::format("cannot concatenate {} and {}: other rows", c.describe(c.inputs[0]), c.describe(p)));
    }
    values.push_back(p.value);
    out.width += p.width;
  }
  out.value = c.b.concat(values);
  return out;
}

Port slice(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.slice();
  if (m.begin() < 0 || m.width() < 1 || m.begin() + m.width() > x.width) {
    c.fail(fmt::format("features {} .. {} are not within {}", m.begin(), m.begin() + m.width(), c.describe(x)));
  }
  return with(x, m.width(), c.b.slice_cols(x.value, m.begin(), m.width()));
}

// ---- between node sets, graphs and edges ----
Port pool(ModuleContext& c) {
  const Port x = one_input(c);
  c.expect_domain(x, Domain::kNodes, -1, "its input");
  const std::string& r = c.module.pool().reduce();
  if (r != "sum" && r != "mean" && r != "max") c.fail(fmt::format("reduce '{}' must be sum, mean or max", r));
  Port p{Domain::kGraphs, 0, x.width, c.b.aggregate(ops::parse_reduce(r), c.pool_graph(x.set), x.value), ""};
  return p;
}

Port broadcast(ModuleContext& c) {
  const Port x = one_input(c);
  c.expect_domain(x, Domain::kGraphs, 0, "its input");
  const int set = c.node_set(c.module.broadcast().node_set());
  return c.nodes(set, x.width, c.b.aggregate(ops::Reduce::kSum, c.broadcast_graph(set), x.value));
}

Port gather(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.gather();
  const int e = c.edge_set(m.edges());
  const auto& info = c.schema.edge_sets[e];
  const int end = m.destination() ? info.destination : info.source;
  c.expect_domain(x, Domain::kNodes, end, m.destination() ? "its input (destination rows)" : "its input (source rows)");
  const ValueId rows = c.b.gather(m.destination() ? c.reversed_graph(e) : c.graph(e), x.value);
  return Port{Domain::kEdges, e, x.width, rows, ""};
}

// ---- VectorWorld's layers (QCNet's attention) ----

// A Linear as VectorWorld's weight_init and DiT start it: a zero bias and a
// Xavier-uniform weight, or `weight` (zero for adaLN and output layers).
ValueId xavier_linear(ModuleContext& c, const std::string& prefix, ValueId x, int64_t in, int64_t out, bool bias,
                      Init weight = Init::kGlorot) {
  ValueId h = c.b.linear(x, c.param(prefix + ".weight", {out, in}, weight, in, out));
  if (bias) h = c.b.bias_add(h, c.param(prefix + ".bias", {out}, Init::kZeros, in, out));
  return h;
}

// torch.nn.LayerNorm(width) over each row: "<prefix>.weight", "<prefix>.bias".
ValueId row_norm(ModuleContext& c, const std::string& prefix, ValueId x, int64_t width) {
  const ValueId gamma = c.param(prefix + ".weight", {width}, Init::kOnes, width, width);
  const ValueId beta = c.param(prefix + ".bias", {width}, Init::kZeros, width, width);
  return c.b.layer_norm(x, gamma, beta, /*per_node=*/true, 1e-5);
}

Port residual_mlp(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.residual_mlp();
  const int64_t hidden = positive(c, m.hidden(), "hidden");
  const int64_t layers = positive(c, m.hidden_layers(), "hidden_layers");
  if (m.out() < 0) c.fail(fmt::format("out = {} must be >= 0 (0: no output Linear)", m.out()));
  ValueId h = x.value;
  for (int64_t i = 0; i < layers; ++i) {
    h = xavier_linear(c, fmt::format("linears.{}", i), h, i == 0 ? x.width : hidden, hidden, true);
    h = row_norm(c, fmt::format("norms.{}", i), h, hidden);
    if (i + 1 < layers) h = c.b.relu(h);  // none after the last pair: the residual comes first
  }
  const ValueId res = row_norm(c, "transform_norm", xavier_linear(c, "transform_linear", x.value, x.width, hidden, true), hidden);
  h = c.b.relu(c.b.add(h, res));
  if (m.out() == 0) return with(x, hidden, h);
  return with(x, m.out(), xavier_linear(c, "linear_out", h, hidden, m.out(), true));
}

Port attention(ModuleContext& c) {
  const auto& m = c.module.attention();
  // The last input is r when it has the edge set's rows.
  const int e = c.edge_set(m.edges());
  const auto& info = c.schema.edge_sets[e];
  std::optional<Port> r;
  if (!c.inputs.empty() && c.inputs.back().domain == Domain::kEdges) {
    r = c.inputs.back();
    c.expect_domain(*r, Domain::kEdges, e, "its last input (the edge features)");
  }
  const EdgeInputs in = edge_inputs(c, m.edges(), r ? 1 : 0);
  const bool bipartite = info.source != info.destination;
  const int64_t width = in.dst.width;
  if (in.src.width != width) {
    c.fail(fmt::format("sources have width {}, destinations {}: the attention's projections take one width",
                       in.src.width, width));
  }
  const int64_t heads = positive(c, m.heads(), "heads");
  if (m.head_dim() == 0 && width % heads != 0) {
    c.fail(fmt::format("width {} does not split into {} heads; set head_dim", width, heads));
  }
  const int64_t dim = m.head_dim() > 0 ? m.head_dim() : width / heads, hd = heads * dim;
  const int64_t ff = m.feedforward() > 0 ? m.feedforward() : 4 * width;
  if (!(m.dropout() >= 0 && m.dropout() < 1)) c.fail(fmt::format("dropout = {} is not in [0, 1)", m.dropout()));
  const int32_t g = c.graph(e);

  // Pre-norms; a homogeneous edge set's ends share one.
  const ValueId src_gamma = c.param("attn_prenorm_x_src.weight", {width}, Init::kOnes, width, width);
  const ValueId src_beta = c.param("attn_prenorm_x_src.bias", {width}, Init::kZeros, width, width);
  const ValueId xs = c.b.layer_norm(in.src.value, src_gamma, src_beta, /*per_node=*/true, 1e-5);
  ValueId xd = xs;
  if (bipartite && m.shared_prenorm()) {
    // Declared, never used (no gradient: Adam leaves it, as torch does).
    c.param("attn_prenorm_x_dst.weight", {width}, Init::kOnes, width, width);
    c.param("attn_prenorm_x_dst.bias", {width}, Init::kZeros, width, width);
    xd = c.b.layer_norm(in.dst.value, src_gamma, src_beta, /*per_node=*/true, 1e-5);
  } else if (bipartite) {
    xd = row_norm(c, "attn_prenorm_x_dst", in.dst.value, width);
  } else {
    // One norm under two names, as in VectorWorld's state_dict.
    c.alias("attn_prenorm_x_dst.weight", "attn_prenorm_x_src.weight");
    c.alias("attn_prenorm_x_dst.bias", "attn_prenorm_x_src.bias");
  }
  const ValueId q = xavier_linear(c, "to_q", xd, width, hd, true);
  const ValueId k = xavier_linear(c, "to_k", xs, width, hd, false);
  const ValueId v = xavier_linear(c, "to_v", xs, width, hd, true);
  // Scores <q[dst], k[src] + to_k_r(r)> per head, over sqrt(dim). The edge
  // features' projections are linear, so they never run per edge (E x K x
  // H·dim products, half the encoder's flops when they did): the key's edge
  // term <q_h, W_h r> is <W_hᵀ q_h, r>, q projected per head into r's K
  // columns at the nodes and dotted with r at the edges; the values' term
  // Σ α_h (W_h r + b_h) is W_h (Σ α_h r) + b_h Σ α_h.
  ValueId score = c.b.sddmm_dot(g, k, q, heads);
  ValueId rn = runtime::kNoValue, wv_r = runtime::kNoValue, bv_r = runtime::kNoValue;
  if (r) {
    rn = row_norm(c, "attn_prenorm_r", r->value, r->width);
    const ValueId wk_r = c.param("to_k_r.weight", {hd, r->width}, Init::kGlorot, r->width, hd);
    wv_r = c.param("to_v_r.weight", {hd, r->width}, Init::kGlorot, r->width, hd);
    bv_r = c.param("to_v_r.bias", {hd}, Init::kZeros, r->width, hd);
    score = c.b.add(score, c.b.edge_head_dot(g, c.b.head_matmul(q, wk_r, heads), rn, heads));
  }
  score = c.b.scale(score, 1.0 / std::sqrt(static_cast<double>(dim)));
  ValueId alpha = c.b.softmax(g, score);
  if (c.training) alpha = c.b.dropout(alpha, m.dropout(), c.key, g, c.edge_ids(g));
  ValueId agg = c.b.aggregate(ops::Reduce::kSum, g, v, alpha);
  if (r) {
    agg = c.b.add(agg, c.b.head_matmul(c.b.head_scatter(g, alpha, rn), wv_r, heads, /*trans_w=*/true));
    // b_h Σ α_h: the bias in every row, scaled per head by its α's sum.
    const int64_t rows = c.shape.node_rows[static_cast<size_t>(in.dst.set)];
    const ValueId bias_rows = c.b.bias_add(c.b.fill({rows, hd}, 0.0), bv_r);
    const ValueId alpha_sum = c.b.scatter(ops::Reduce::kSum, g, alpha).first;
    agg = c.b.add(agg, c.b.edge_scale(bias_rows, alpha_sum));
  }
  // The gated update: agg + sigmoid(to_g([agg, x_dst])) * (to_s(x_dst) - agg).
  const ValueId gate =
      c.b.activation(xavier_linear(c, "to_g", c.b.concat({agg, xd}), hd + width, hd, true), ops::Activation::kSigmoid);
  const ValueId s = xavier_linear(c, "to_s", xd, width, hd, true);
  const ValueId update = c.b.add(agg, c.b.mul(gate, c.b.add(s, c.b.scale(agg, -1.0))));
  const ValueId attn = xavier_linear(c, "to_out", update, hd, width, true);
  ValueId x = c.b.add(in.dst.value, row_norm(c, "attn_postnorm", attn, width));
  // The feed-forward block: nn.Sequential(Linear 0, ReLU 1, Dropout 2, Linear 3).
  ValueId h = c.b.relu(xavier_linear(c, "ff_mlp.0", row_norm(c, "ff_prenorm", x, width), width, ff, true));
  // Its own masks: a key no module index takes (dropout keys are 32-bit).
  if (c.training) h = c.b.dropout(h, m.dropout(), c.key | (uint64_t{1} << 30), -1, c.row_ids(in.dst));
  h = xavier_linear(c, "ff_mlp.3", h, ff, width, true);
  x = c.b.add(x, row_norm(c, "ff_postnorm", h, width));
  return c.nodes(in.dst.set, width, c.zero_padding(in.dst.set, x));
}

// DiT's modulate: x (1 + scale) + shift.
ValueId modulate(ModuleContext& c, ValueId x, ValueId shift, ValueId scale) {
  return c.b.add(c.b.add(x, c.b.mul(x, scale)), shift);
}

Port dit_block(ModuleContext& c) {
  const auto& m = c.module.dit_block();
  c.expect_inputs(2, 2);
  const int e = c.edge_set(m.edges());
  const auto& info = c.schema.edge_sets[e];
  if (info.source != info.destination) {
    c.fail(fmt::format("edge set '{}' joins '{}' to '{}'; a DiT block attends within one node set", info.name,
                       c.schema.node_sets[info.source].name, c.schema.node_sets[info.destination].name));
  }
  const Port x = c.inputs[0], cond = c.inputs[1];
  c.expect_domain(x, Domain::kNodes, info.source, "its first input (x)");
  c.expect_domain(cond, Domain::kNodes, info.source, "its second input (the condition c)");
  const int64_t w = x.width;
  if (cond.width != w) c.fail(fmt::format("the condition has width {}, x {}: they must match", cond.width, w));
  const int64_t heads = positive(c, m.heads(), "heads");
  if (w % heads != 0) c.fail(fmt::format("width {} does not split into {} heads", w, heads));
  if (!(m.mlp_ratio() > 0)) c.fail(fmt::format("mlp_ratio = {} must be > 0", m.mlp_ratio()));
  if (!(m.dropout() >= 0 && m.dropout() < 1)) c.fail(fmt::format("dropout = {} is not in [0, 1)", m.dropout()));
  const auto hidden = static_cast<int64_t>(static_cast<double>(w) * m.mlp_ratio());  // int(), as DiT
  const int32_t g = c.graph(e);
  // DiT's initialisation: Xavier-uniform weights, zero biases, and adaLN-Zero.
  const ValueId mod = xavier_linear(c, "adaLN_modulation.1", c.b.activation(cond.value, ops::Activation::kSilu), w,
                                    6 * w, true, Init::kZeros);
  const auto chunk = [&](int k) { return c.b.slice_cols(mod, k * w, w); };
  const ValueId shift_msa = chunk(0), scale_msa = chunk(1), gate_msa = chunk(2);
  const ValueId shift_mlp = chunk(3), scale_mlp = chunk(4), gate_mlp = chunk(5);
  // Attention within the edge set, q, k and v from the same modulated rows.
  const ValueId h = modulate(c, plain_norm(c, x.value, w, 1e-6), shift_msa, scale_msa);
  ValueId q = xavier_linear(c, "attn.to_q", h, w, w, true);
  ValueId k = xavier_linear(c, "attn.to_k", h, w, w, true);
  const ValueId v = xavier_linear(c, "attn.to_v", h, w, w, true);
  const int64_t dim = w / heads;
  if (m.qk_norm()) {
    // LayerNorm(dim) over each head: the heads as rows, one weight shared.
    const int64_t rows = c.shape.node_rows[static_cast<size_t>(x.set)];
    const auto head_norm = [&](const std::string& prefix, ValueId t) {
      return c.b.reshape(row_norm(c, prefix, c.b.reshape(t, {rows * heads, dim}), dim), {rows, w});
    };
    q = head_norm("attn.q_norm", q);
    k = head_norm("attn.k_norm", k);
  }
  ValueId score = c.b.scale(c.b.sddmm_dot(g, k, q, heads), 1.0 / std::sqrt(static_cast<double>(dim)));
  ValueId rel_gate = runtime::kNoValue;
  if (m.rel_bias()) {
    // Per edge: edge_mlp([u_dst, u_src, |u_dst - u_src|]) of u =
    // LayerNorm(rel_proj(h)); its bias (and gate) per head start at 0 (1).
    const int64_t rel = positive(c, m.rel_dim(), "rel_dim"), edge = positive(c, m.edge_dim(), "edge_dim");
    const ValueId u = row_norm(c, "attn.rel_norm", xavier_linear(c, "attn.rel_proj", h, w, rel, true), rel);
    const ValueId u_dst = c.b.gather(c.reversed_graph(e), u), u_src = c.b.gather(g, u);
    const ValueId diff = c.b.activation(c.b.add(u_dst, c.b.scale(u_src, -1.0)), ops::Activation::kAbs);
    ValueId feat = xavier_linear(c, "attn.edge_mlp.0", c.b.concat({u_dst, u_src, diff}), 3 * rel, 2 * edge, true);
    feat = xavier_linear(c, "attn.edge_mlp.2", c.b.activation(feat, ops::Activation::kSilu), 2 * edge, edge, true,
                         Init::kZeros);
    score = c.b.add(score, xavier_linear(c, "attn.edge_to_bias", feat, edge, heads, false, Init::kZeros));
    if (m.rel_gate()) {
      const ValueId t = c.b.activation(xavier_linear(c, "attn.edge_to_gate", feat, edge, heads, false, Init::kZeros),
                                       ops::Activation::kTanh);
      rel_gate = c.b.bias_add(t, c.b.fill({heads}, 1.0));
    }
  } else if (m.rel_gate()) {
    c.fail("rel_gate needs rel_bias (the gate comes from the relational edge features)");
  }
  if (!(m.logit_clip() >= 0)) c.fail(fmt::format("logit_clip = {} must be >= 0 (0: none)", m.logit_clip()));
  if (m.logit_clip() > 0) score = c.b.activation(score, ops::Activation::kClip, m.logit_clip());
  ValueId alpha = c.b.softmax(g, score);
  if (c.training) alpha = c.b.dropout(alpha, m.dropout(), c.key, g, c.edge_ids(g));
  if (rel_gate != runtime::kNoValue) alpha = c.b.mul(alpha, rel_gate);
  ValueId attn = xavier_linear(c, "attn.proj", c.b.aggregate(ops::Reduce::kSum, g, v, alpha), w, w, true);
  if (c.training) attn = c.b.dropout(attn, m.dropout(), c.key | (uint64_t{1} << 30), -1, c.row_ids(x));
  ValueId out = c.b.add(x.value, c.b.mul(gate_msa, attn));
  const ValueId h2 = modulate(c, plain_norm(c, out, w, 1e-6), shift_mlp, scale_mlp);
  const ValueId fc1 = xavier_linear(c, "mlp.fc1", h2, w, hidden, true);
  const ValueId mlp = xavier_linear(c, "mlp.fc2", c.b.activation(fc1, ops::Activation::kGeluTanh), hidden, w, true);
  out = c.b.add(out, c.b.mul(gate_mlp, mlp));
  return c.nodes(x.set, w, c.zero_padding(x.set, out));
}

Port dit_final(ModuleContext& c) {
  c.expect_inputs(2, 2);
  const Port x = c.inputs[0], cond = c.inputs[1];
  if (cond.domain != x.domain || cond.set != x.set || cond.width != x.width) {
    c.fail(fmt::format("the condition {} must have the rows and width of x {}", c.describe(cond), c.describe(x)));
  }
  const int64_t w = x.width, out = positive(c, c.module.dit_final().out(), "out");
  const ValueId mod = xavier_linear(c, "adaLN_modulation.1", c.b.activation(cond.value, ops::Activation::kSilu), w,
                                    2 * w, true, Init::kZeros);
  const ValueId h = modulate(c, plain_norm(c, x.value, w, 1e-6), c.b.slice_cols(mod, 0, w), c.b.slice_cols(mod, w, w));
  // Zero, as VectorWorld's DiT starts its final layers: the output starts at 0.
  return with(x, out, xavier_linear(c, "linear", h, w, out, true, Init::kZeros));
}

Port context_fusion(ModuleContext& c) {
  const auto& m = c.module.context_fusion();
  c.expect_inputs(2, 2);
  const Port a = c.inputs[0], b = c.inputs[1];
  c.expect_domain(a, Domain::kNodes, -1, "its first input");
  c.expect_domain(b, Domain::kNodes, -1, "its second input");
  const int64_t w = a.width, out = positive(c, m.out(), "out");
  // Per-graph means, with the optional second moment: mean + s relu(E[x^2] - mean^2).
  const auto context = [&](const Port& p, ValueId v) {
    const int32_t pool = c.pool_graph(p.set);
    const ValueId mean = c.b.aggregate(ops::Reduce::kMean, pool, v);
    if (m.var_scale() == 0) return mean;
    const ValueId m2 = c.b.aggregate(ops::Reduce::kMean, pool, c.b.mul(v, v));
    const ValueId var = c.b.relu(c.b.add(m2, c.b.scale(c.b.mul(mean, mean), -1.0)));
    return c.b.add(mean, c.b.scale(var, m.var_scale()));
  };
  const ValueId up = xavier_linear(c, "agent_to_hidden", b.value, b.width, w, true);
  ValueId h = c.b.concat({context(a, a.value), context(b, up)});
  h = c.b.activation(xavier_linear(c, "fuse_mlp.0", h, 2 * w, w, true), ops::Activation::kSilu);
  h = xavier_linear(c, "fuse_mlp.2", h, w, out, true, Init::kZeros);
  h = xavier_linear(c, "ctx_to_c", h, out, out, false, Init::kZeros);
  return Port{Domain::kGraphs, 0, out, h, ""};
}

Port token(ModuleContext& c) {
  const auto& m = c.module.token();
  c.expect_inputs(0, 0);
  const int set = c.node_set(m.node_set());
  const int64_t width = positive(c, m.width(), "width");
  const ValueId row = c.param("", {1, width}, Init::kGlorot, width, 1);
  // Every row the same: ones [rows, 1] times the row [1, width].
  const ValueId ones = c.b.fill({c.shape.node_rows[static_cast<size_t>(set)], 1}, 1.0);
  return c.nodes(set, width, c.zero_padding(set, c.b.matmul(ones, row)));
}

Port mul(ModuleContext& c) {
  return elementwise(c, "multiply", [&](ValueId a, ValueId b) { return c.b.mul(a, b); });
}

Port scale(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.scale();
  ValueId v = c.b.scale(x.value, m.alpha());
  // + beta on every element: a bias of beta in each column.
  if (m.beta() != 0) v = c.b.bias_add(v, c.b.fill({x.width}, m.beta()));
  return with(x, x.width, v);
}

// A VAE's reparameterisation: mu + exp(log_var / 2) · ε in training (ε
// drawn per global row, so every rank count draws the same), mu in eval.
Port reparameterize(ModuleContext& c) {
  c.expect_inputs(2, 2);
  const Port& mu = c.inputs[0];
  const Port& log_var = c.inputs[1];
  if (!same_rows_and_width(log_var, mu)) {
    c.fail(fmt::format("mu {} and log_var {} must have the same rows and width", c.describe(mu), c.describe(log_var)));
  }
  if (!c.training) return mu;
  const ValueId eps = c.b.normal(c.row_ids(mu), mu.width, c.key);
  const ValueId std = c.b.activation(c.b.scale(log_var.value, 0.5), ops::Activation::kExp);
  return with(mu, mu.width, c.b.add(mu.value, c.b.mul(std, eps)));
}

// Indexed by the oneof's field number minus the first (10).
constexpr int kFirstKind = proto::Module::kGin;
const std::array<ModuleKind, 26> kKinds{{
    {"gin", gin},
    {"sage", sage},
    {"linear", linear},
    {"mlp", mlp},
    {"relu", relu},
    {"elu", elu},
    {"dropout", dropout},
    {"layer_norm", layer_norm},
    {"add", add},
    {"pool", pool},
    {"broadcast", broadcast},
    {"gather", gather},
    {"activation", activation},
    {"concat", concat},
    {"slice", slice},
    {"gcn", gcn},
    {"gat", gat},
    {"residual_mlp", residual_mlp},
    {"attention", attention},
    {"dit_block", dit_block},
    {"dit_final", dit_final},
    {"context_fusion", context_fusion},
    {"token", token},
    {"mul", mul},
    {"scale", scale},
    {"reparameterize", reparameterize},
}};

std::string find_or_declare_graph(runtime::Builder& b, const std::string& name, int64_t src, int64_t dst,
                                  int64_t edges, int32_t& id) {
  const auto& graphs = b.program().graphs;
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (graphs[i].name == name) {
      id = static_cast<int32_t>(i);
      return name;
    }
  }
  id = b.graph(name, src, dst, edges);
  return name;
}

}  // namespace

std::string features_name(const std::string& set) { return set + ".x"; }
std::string mask_name(const std::string& set) { return set + ".mask"; }
std::string target_name(const std::string& set) { return set + ".y"; }
std::string pool_graph_name(const std::string& set) { return set + ".pool"; }
std::string broadcast_graph_name(const std::string& set) { return set + ".broadcast"; }
std::string reversed_graph_name(const std::string& edges) { return edges + ".reversed"; }
std::string self_loop_graph_name(const std::string& edges) { return edges + ".self_loops"; }
std::string real_rows_name(const std::string& set) { return set + ".real"; }
std::string global_id_name(const std::string& set) { return set + ".global_id"; }

int Schema::node_set(const std::string& name) const {
  for (size_t i = 0; i < node_sets.size(); ++i) {
    if (node_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Schema::edge_set(const std::string& name) const {
  for (size_t i = 0; i < edge_sets.size(); ++i) {
    if (edge_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ModuleKind& module_kind(const proto::Module& module) {
  const int index = static_cast<int>(module.kind_case()) - kFirstKind;
  if (module.kind_case() == proto::Module::KIND_NOT_SET || index < 0 || index >= static_cast<int>(kKinds.size())) {
    std::vector<std::string> names;
    for (const ModuleKind& k : kKinds) names.emplace_back(k.name);
    throw std::invalid_argument(fmt::format("model.module '{}': no kind given (one of {})", module.name(),
                                            fmt::join(names, ", ")));
  }
  return kKinds[static_cast<size_t>(index)];
}

ModuleContext::ModuleContext(runtime::Builder& builder, const Schema& s, const BucketShape& sh, bool train,
                             const proto::Module& m, uint64_t k, std::vector<Port> in, DeclaredParams& declared)
    : b(builder), schema(s), shape(sh), training(train), module(m), key(k), inputs(std::move(in)),
      declared_(declared) {}

void ModuleContext::alias(const std::string& key_suffix, const std::string& param_suffix) {
  const ParamAlias a{scope() + "." + key_suffix, scope() + "." + param_suffix};
  // Declared once, however many modules share the scope.
  for (const ParamAlias& known : declared_.aliases) {
    if (known.key == a.key) return;
  }
  declared_.aliases.push_back(a);
}

ValueId ModuleContext::param(const std::string& suffix, std::vector<int64_t> shape_, Init init, int64_t fan_in,
                             int64_t fan_out) {
  // No suffix: the parameter is the module itself ("encoder.Q").
  const std::string name = suffix.empty() ? scope() : scope() + "." + suffix;
  // A scope shared with a module built before: its parameter, same shape.
  auto& d = declared_;
  for (size_t i = 0; i < d.params.size(); ++i) {
    if (d.params[i].name != name) continue;
    if (d.scopes[i] != scope()) {
      fail(fmt::format("parameter '{}' is also a parameter of scope '{}' (name modules so that their parameters "
                       "differ, or share a scope with `params`)", name, d.scopes[i]));
    }
    if (d.params[i].shape != shape_) {
      fail(fmt::format("parameter '{}' is {} where another module of scope '{}' made it {}", name,
                       runtime::shape_string(shape_), scope(), runtime::shape_string(d.params[i].shape)));
    }
    return d.ids[i];
  }
  const ValueId id = b.parameter(name, shape_);
  d.params.push_back(ParamDecl{name, std::move(shape_), init, fan_in, fan_out});
  d.ids.push_back(id);
  d.scopes.push_back(scope());
  return id;
}

ValueId ModuleContext::linear(const std::string& prefix, ValueId x, int64_t in, int64_t out, bool bias) {
  ValueId h = b.linear(x, param(prefix + ".weight", {out, in}, Init::kTorchLinear, in, out));
  if (bias) h = b.bias_add(h, param(prefix + ".bias", {out}, Init::kTorchLinear, in, out));
  return h;
}

int32_t ModuleContext::graph(int e) {
  const auto& info = schema.edge_sets[e];
  int32_t id;
  find_or_declare_graph(b, info.name, shape.node_rows[info.source], shape.node_rows[info.destination],
                        shape.edge_rows[e], id);
  return id;
}

int32_t ModuleContext::reversed_graph(int e) {
  const auto& info = schema.edge_sets[e];
  int32_t id;
  find_or_declare_graph(b, reversed_graph_name(info.name), shape.node_rows[info.destination],
                        shape.node_rows[info.source], shape.edge_rows[e], id);
  return id;
}

int32_t ModuleContext::self_loop_graph(int e) {
  const auto& info = schema.edge_sets[e];
  const int64_t rows = shape.node_rows[info.source];
  int32_t id;
  // Capacity: every edge slot and one loop a row (the slots of dropped
  // loops and padding are sink loops).
  find_or_declare_graph(b, self_loop_graph_name(info.name), rows, rows, shape.edge_rows[e] + rows, id);
  return id;
}

int32_t ModuleContext::pool_graph(int s) {
  int32_t id;
  find_or_declare_graph(b, pool_graph_name(schema.node_sets[s].name), shape.node_rows[s], shape.graph_rows,
                        shape.node_rows[s], id);
  return id;
}

int32_t ModuleContext::broadcast_graph(int s) {
  int32_t id;
  find_or_declare_graph(b, broadcast_graph_name(schema.node_sets[s].name), shape.graph_rows, shape.node_rows[s],
                        shape.node_rows[s], id);
  return id;
}

int ModuleContext::edge_set(const std::string& name) {
  const int e = schema.edge_set(name);
  if (e < 0) {
    std::vector<std::string> names;
    for (const auto& s : schema.edge_sets) names.push_back(s.name);
    fail(fmt::format("edge set '{}' is not in the dataset (edge sets: {})", name, fmt::join(names, ", ")));
  }
  return e;
}

int ModuleContext::node_set(const std::string& name) {
  const int s = schema.node_set(name);
  if (s < 0) {
    std::vector<std::string> names;
    for (const auto& n : schema.node_sets) names.push_back(n.name);
    fail(fmt::format("node set '{}' is not in the dataset (node sets: {})", name, fmt::join(names, ", ")));
  }
  return s;
}

Port ModuleContext::nodes(int set, int64_t width, ValueId v) const { return Port{Domain::kNodes, set, width, v, ""}; }

ValueId ModuleContext::zero_padding(int set, ValueId v) {
  const ValueId real = b.input_once(real_rows_name(schema.node_sets[set].name), DType::kI64, {shape.node_rows[set]});
  return b.divide_rows(v, real);
}

ValueId ModuleContext::row_ids(const Port& p) {
  switch (p.domain) {
    case Domain::kNodes:
      return b.input_once(global_id_name(schema.node_sets[p.set].name), DType::kI64, {shape.node_rows[p.set]});
    case Domain::kEdges:
      return edge_ids(graph(p.set));
    case Domain::kGraphs:
      break;
  }
  return b.input_once(global_id_name(kGraphSet), DType::kI64, {shape.graph_rows});
}

ValueId ModuleContext::edge_ids(int32_t g) {
  const runtime::GraphInfo& info = b.program().graphs.at(static_cast<size_t>(g));
  return b.input_once(runtime::edge_id_name(info.name), DType::kI64, {info.num_edges});
}

std::string ModuleContext::describe(const Port& p) const {
  const std::string rows = p.domain == Domain::kNodes   ? fmt::format("rows of node set '{}'", schema.node_sets[p.set].name)
                           : p.domain == Domain::kEdges ? fmt::format("edges of '{}'", schema.edge_sets[p.set].name)
                                                        : std::string("one row per graph");
  return fmt::format("'{}' ({}, width {})", p.name, rows, p.width);
}

void ModuleContext::expect_inputs(size_t min, size_t max) const {
  if (inputs.size() < min || inputs.size() > max) {
    fail(min == max ? fmt::format("takes {} input{}, has {}", min, min == 1 ? "" : "s", inputs.size())
                    : fmt::format("takes {} to {} inputs, has {}", min, max, inputs.size()));
  }
}

void ModuleContext::expect_domain(const Port& p, Domain domain, int set, const char* what) const {
  if (p.domain == domain && (set < 0 || p.set == set)) return;
  const std::string want = domain == Domain::kNodes
                               ? (set < 0 ? std::string("rows of a node set")
                                          : fmt::format("rows of node set '{}'", schema.node_sets[set].name))
                           : domain == Domain::kEdges ? fmt::format("edges of '{}'", schema.edge_sets[set].name)
                                                      : std::string("one row per graph");
  fail(fmt::format("{} must be {}, but is {}", what, want, describe(p)));
}

void ModuleContext::fail(const std::string& what) const {
  throw std::invalid_argument(fmt::format("model.module '{}' ({}): {}", module.name(), module_kind(module).name, what));
}

}  // namespace gnnrt::model
