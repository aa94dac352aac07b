// Module kinds: VectorWorld's layers (QCNet's attention, DiT blocks, context fusion, query tokens, the VAE's reparameterisation).
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "model/modules/kinds.h"

namespace gnnrt::model::kinds {
namespace {

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

}  // namespace

void define_scene(ModuleRows& rows) {
  rows[proto::Module::kResidualMlpFieldNumber] = {"residual_mlp", residual_mlp};
  rows[proto::Module::kAttentionFieldNumber] = {"attention", attention};
  rows[proto::Module::kDitBlockFieldNumber] = {"dit_block", dit_block};
  rows[proto::Module::kDitFinalFieldNumber] = {"dit_final", dit_final};
  rows[proto::Module::kContextFusionFieldNumber] = {"context_fusion", context_fusion};
  rows[proto::Module::kTokenFieldNumber] = {"token", token};
  rows[proto::Module::kReparameterizeFieldNumber] = {"reparameterize", reparameterize};
}

}  // namespace gnnrt::model::kinds
