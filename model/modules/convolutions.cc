// Module kinds: convolutions over an edge set (GIN, SAGE, GCN, GAT), the
// one definition of each: the layer chain (network.cc) builds its layers
// through them too.
#include <fmt/format.h>

#include "model/modules/kinds.h"

namespace gnnrt::model::kinds {
namespace {

// GINConv: nn((1 + eps) x_dst + sum_{j -> i} x_src[j]). eps is a
// parameter with train_eps, else a buffer (PyG's), declared first either
// way (parameters are drawn by their index). With sparse features the
// first linear map runs before the sum:
// W((1 + eps) x_i + sum x_j) = (1 + eps) W x_i + sum W x_j.
Port gin(ModuleContext& c) {
  const auto& m = c.module.gin();
  const EdgeInputs in = edge_inputs(c, m.edges());
  if (in.src.width != in.dst.width) {
    c.fail(fmt::format("sources have width {}, destinations {}: GIN adds them", in.src.width, in.dst.width));
  }
  const int64_t width = in.src.width, out = positive(c, m.out(), "out");
  const int64_t hidden = m.hidden() > 0 ? m.hidden() : out;
  ValueId eps = runtime::kNoValue;
  if (m.train_eps()) {
    eps = c.param("eps", {1}, ParamDecl::Init::kConstant, 1, 1, m.eps());
  } else {
    c.buffer("eps", {static_cast<float>(m.eps())});
  }
  const int64_t rows = c.shape.node_rows[static_cast<size_t>(in.dst.set)];
  const auto self = [&](ValueId v) { return gin_self_term(c.b, v, rows, m.eps(), eps); };
  const int32_t g = c.graph(in.edges);
  ValueId h;
  if (in.src.sparse()) {
    const ValueId y = c.project(in.src, c.param("nn.0.weight", {hidden, width}, Init::kTorchLinear, width, hidden));
    h = c.b.add(self(y), c.aggregate(ops::Reduce::kSum, g, y));
    h = c.b.relu(c.b.bias_add(h, c.param("nn.0.bias", {hidden}, Init::kTorchLinear, width, hidden)));
  } else {
    const ValueId agg = c.aggregate(ops::Reduce::kSum, g, in.src.value);
    h = c.b.add(self(in.dst.value), agg);
    h = c.b.relu(c.linear("nn.0", h, width, hidden, true));
  }
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, c.linear("nn.2", h, hidden, out, true)));
}

// SAGEConv: lin_l(aggr_{j -> i} x_src[j]) + lin_r(x_dst), lin_r without bias.
// With sparse features the linear map runs first: lin_l(mean(x)) =
// mean(lin_l(x)) for a linear aggregation (what the compiler's reordering
// does to the dense form when the layer narrows).
Port sage(ModuleContext& c) {
  const auto& m = c.module.sage();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const int64_t out = positive(c, m.out(), "out");
  const ops::Reduce reduce = reduce_named(proto::SageModule::Aggr_Name(m.aggr()));
  const int64_t width = in.src.width;
  ValueId h;
  if (in.src.sparse()) {
    const ValueId lin_l = c.param("lin_l.weight", {out, width}, Init::kTorchLinear, width, out);
    h = c.aggregate(reduce, c.graph(in.edges), c.project(in.src, lin_l));
    h = c.b.bias_add(h, c.param("lin_l.bias", {out}, Init::kTorchLinear, width, out));
    h = c.b.add(h, c.project(in.dst, c.param("lin_r.weight", {out, width}, Init::kTorchLinear, width, out)));
  } else {
    const ValueId agg = c.aggregate(reduce, c.graph(in.edges), in.src.value);
    h = c.linear("lin_l", agg, width, out, true);
    h = c.b.add(h, c.linear("lin_r", in.dst.value, in.dst.width, out, false));
  }
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, h));
}

// GCNConv: D^-1/2 (A + I) D^-1/2 X W^T + b over the self-loop graph (lin
// first, as PyG writes it; the compiler moves the matmul to the narrower side).
// On a sampled block, PyG's GCNConv on the block's edges as a graph over
// its sources: a loop on every source; degrees counted there, so a source
// that is no destination has degree 1 (its weights come with the batch).
Port gcn(ModuleContext& c) {
  const auto& m = c.module.gcn();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const auto& info = c.schema.edge_sets[in.edges];
  if (info.source != info.destination && !info.block) {
    c.fail(fmt::format("GCN needs an edge set that joins a node set to itself; '{}' is bipartite", info.name));
  }
  if (info.block && c.inputs.size() != 1) {
    c.fail(fmt::format("GCN on block '{}' takes one input (its destinations are its sources' first rows)", info.name));
  }
  const int64_t width = in.src.width, out = positive(c, m.out(), "out");
  const int32_t g = c.self_loop_graph(in.edges);
  ValueId h = c.project(in.src, c.param("lin.weight", {out, width}, Init::kGlorot, width, out));
  h = c.aggregate(ops::Reduce::kSum, g, h, c.gcn_norm(g));
  if (m.bias()) h = c.b.bias_add(h, c.param("bias", {out}, Init::kZeros, width, out));
  return c.nodes(in.dst.set, out, c.zero_padding(in.dst.set, h));
}

// GATConv; bipartite: lin_src on the sources, lin_dst on the destinations,
// no self loops (PyG's add_self_loops=False, required for (x_src, x_dst)).
// On a sampled block, the homogeneous layer on the block's edges: one
// lin, a loop on every destination.
Port gat(ModuleContext& c) {
  const auto& m = c.module.gat();
  const EdgeInputs in = edge_inputs(c, m.edges());
  const auto& info = c.schema.edge_sets[in.edges];
  const int64_t channels = positive(c, m.out(), "out"), heads = positive(c, m.heads(), "heads");
  if (!(m.attention_dropout() >= 0 && m.attention_dropout() < 1)) {
    c.fail(fmt::format("attention_dropout = {} is not in [0, 1)", m.attention_dropout()));
  }
  const bool bipartite = info.source != info.destination && !info.block;
  if (info.block && c.inputs.size() != 1) {
    c.fail(fmt::format("GAT on block '{}' takes one input (its destinations are its sources' first rows)", info.name));
  }
  const int64_t hc = heads * channels;
  const int32_t g = bipartite ? c.graph(in.edges) : c.self_loop_graph(in.edges);
  const ValueId h_src =
      c.project(in.src, c.param("lin_src.weight", {hc, in.src.width}, Init::kGlorot, in.src.width, hc));
  const ValueId h_dst = bipartite ? c.b.linear(in.dst.value, c.param("lin_dst.weight", {hc, in.dst.width},
                                                                      Init::kGlorot, in.dst.width, hc))
                                  : h_src;
  // PyG's lin_dst is lin_src for an int in_channels: its state_dict lists both.
  if (!bipartite) c.alias("lin_dst.weight", "lin_src.weight");
  const ValueId att_src = c.param("att_src", {1, heads, channels}, Init::kGlorot, heads, channels);
  const ValueId att_dst = c.param("att_dst", {1, heads, channels}, Init::kGlorot, heads, channels);
  ValueId a_dst = c.b.head_dot(h_dst, att_dst, heads);
  if (info.block) a_dst = c.narrow(in.edges, a_dst);  // the destinations' rows of the sources' scores
  ValueId out = c.attend(g, h_src, c.b.head_dot(h_src, att_src, heads), a_dst, heads, m.negative_slope(),
                         m.attention_dropout());
  int64_t width = hc;
  if (!m.concat()) {
    if (heads > 1) out = c.b.head_mean(out, heads);
    width = channels;
  }
  if (m.bias()) out = c.b.bias_add(out, c.param("bias", {width}, Init::kZeros, in.src.width, width));
  return c.nodes(in.dst.set, width, c.zero_padding(in.dst.set, out));
}

}  // namespace

void define_convolutions(ModuleRows& rows) {
  rows[proto::Module::kGinFieldNumber] = {"gin", gin};
  rows[proto::Module::kSageFieldNumber] = {"sage", sage};
  rows[proto::Module::kGcnFieldNumber] = {"gcn", gcn};
  rows[proto::Module::kGatFieldNumber] = {"gat", gat};
}

}  // namespace gnnrt::model::kinds
