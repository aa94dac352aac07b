// Module kinds: between node sets, graphs and edges (pool, broadcast, gather, edge_dot).
#include <fmt/format.h>

#include "model/modules/kinds.h"

namespace gnnrt::model::kinds {
namespace {

// ---- between node sets, graphs and edges ----
Port pool(ModuleContext& c) {
  const Port x = one_input(c);
  c.expect_domain(x, Domain::kNodes, -1, "its input");
  const ops::Reduce r = reduce_named(proto::PoolModule::Reduce_Name(c.module.pool().reduce()));
  Port p{Domain::kGraphs, 0, x.width, c.b.aggregate(r, c.pool_graph(x.set), x.value), ""};
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

// <x_src[src(e)], x_dst[dst(e)]> per edge: [E, 1].
Port edge_dot(ModuleContext& c) {
  const EdgeInputs in = edge_inputs(c, c.module.edge_dot().edges());
  if (in.src.width != in.dst.width) {
    c.fail(fmt::format("cannot take dot products of {} and {}", c.describe(in.src), c.describe(in.dst)));
  }
  if (in.src.sparse() || in.dst.sparse()) c.fail("takes dense rows");
  return Port{Domain::kEdges, in.edges, 1, c.b.sddmm_dot(c.graph(in.edges), in.src.value, in.dst.value, 1), ""};
}

}  // namespace

void define_graph_ops(ModuleRows& rows) {
  rows[proto::Module::kPoolFieldNumber] = {"pool", pool};
  rows[proto::Module::kBroadcastFieldNumber] = {"broadcast", broadcast};
  rows[proto::Module::kGatherFieldNumber] = {"gather", gather};
  rows[proto::Module::kEdgeDotFieldNumber] = {"edge_dot", edge_dot};
}

}  // namespace gnnrt::model::kinds
