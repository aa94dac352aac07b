#include "model/training/sampled_batches.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace gnnrt::model {
namespace {

using runtime::Core;

// Dropout keys of the padding and of edges: the pad rows' after the
// graph's nodes; a block edge's its destination's id and its position
// among that destination's draws; a loop's the destination's id and the
// last position; padded slots' far beyond.
constexpr int64_t kPadEdgeIds = int64_t{1} << 62;
int64_t edge_key(int64_t dst_node, int64_t k) { return dst_node << 32 | k; }
constexpr int64_t kLoopPosition = 0xFFFFFFFF;

std::shared_ptr<const Core::Adjacency> adjacency(const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                                                  int64_t ns, int64_t nd) {
  return std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, ns, nd));
}

// The pairs edge set padded to E pairs (padding: hop 0's sink to itself),
// their labels and mask, and the global pair count.
void bind_pairs(Core& core, const SampledBatch& batch, const std::vector<int32_t>& row, int64_t E, int64_t seed_rows) {
  const int64_t n = batch.pairs.size();
  if (n > E) throw std::logic_error("sampled pairs bound to a smaller bucket");
  const auto sink = static_cast<int32_t>(seed_rows - 1);
  std::vector<int32_t> src(static_cast<size_t>(E), sink), dst(static_cast<size_t>(E), sink);
  Tensor y(DType::kF32, {E, 1}), mask(DType::kBool, {E});
  for (int64_t i = 0; i < n; ++i) {
    src[i] = row[batch.pairs.src[i]];
    dst[i] = row[batch.pairs.dst[i]];
    y.values<float>()[i] = batch.pair_labels[i];
    mask.values<uint8_t>()[i] = 1;
  }
  core.bind_graph(kPairsSet, adjacency(src, dst, seed_rows, seed_rows));
  core.bind_graph(reversed_graph_name(kPairsSet), adjacency(dst, src, seed_rows, seed_rows));
  auto& mem = core.memory();
  mem.put(target_name(kPairsSet), std::move(y));
  mem.put(mask_name(kPairsSet), std::move(mask));
  mem.put(runtime::count_name(mask_name(kPairsSet)), Tensor::from<int64_t>(std::vector<int64_t>{batch.global_pairs}, {1}));
}

}  // namespace

std::string hop_set_name(int h) { return fmt::format("hop{}", h); }
std::string block_set_name(int h) { return fmt::format("block{}", h); }

Schema sampled_schema(int hops, int64_t features, int64_t classes, bool link) {
  Schema s;
  for (int h = 0; h <= hops; ++h) {
    auto& n = s.node_sets.emplace_back();
    n.name = hop_set_name(h);
    n.width = h == hops ? features : 0;
    if (h == 0 && !link) {
      n.target = n.classes = true;
      n.num_classes = classes;
    }
  }
  for (int h = 0; h < hops; ++h) {
    auto& e = s.edge_sets.emplace_back();
    e.name = block_set_name(h);
    e.source = h + 1;
    e.destination = h;
    e.block = true;
  }
  if (link) {
    auto& e = s.edge_sets.emplace_back();
    e.name = kPairsSet;
    e.target = true;
    e.target_width = 1;
  }
  return s;
}

int64_t ladder_rung(int64_t need, double growth) {
  int64_t v = 1;
  while (v < need) v = std::max(v + 1, static_cast<int64_t>(std::ceil(static_cast<double>(v) * growth)));
  return v;
}

BucketShape sampled_bucket(const SampledBlocks& b, double growth, int64_t pairs) {
  BucketShape shape;
  int64_t rows = 0, prev = 0;
  for (const int64_t f : b.frontier) {
    rows += ladder_rung(f - prev + 1, growth);  // the segment's new nodes and a sink
    shape.node_rows.push_back(rows);
    prev = f;
  }
  for (const Block& k : b.blocks) {
    shape.edge_rows.push_back(ladder_rung(std::max<int64_t>(1, static_cast<int64_t>(k.src.size())), growth));
  }
  if (pairs >= 0) shape.edge_rows.push_back(ladder_rung(std::max<int64_t>(1, pairs), growth));
  shape.graph_rows = 1;
  return shape;
}

void bind_sampled(Core& core, const SampledBatch& batch, const BucketShape& shape, int64_t num_nodes,
                  int64_t features, bool gcn_norms, PaddingStats* stats) {
  const SampledBlocks& b = batch.blocks;
  const int hops = static_cast<int>(b.blocks.size());
  const auto& P = shape.node_rows;
  const bool link = static_cast<int>(shape.edge_rows.size()) == hops + 1;
  if (static_cast<int>(P.size()) != hops + 1 || (!link && static_cast<int>(shape.edge_rows.size()) != hops)) {
    throw std::logic_error("a sampled batch bound to another model's bucket");
  }
  // Each sampled row's padded row: segment h's nodes start at P[h - 1].
  const int64_t n = b.frontier.back();
  std::vector<int32_t> row(static_cast<size_t>(n));
  for (int h = 0; h <= hops; ++h) {
    const int64_t first = h ? b.frontier[h - 1] : 0, base = h ? P[h - 1] : 0;
    if (b.frontier[h] - first + base >= P[h]) throw std::logic_error("a sampled batch bound to a smaller bucket");
    for (int64_t r = first; r < b.frontier[h]; ++r) row[r] = static_cast<int32_t>(base + r - first);
  }
  auto& mem = core.memory();
  // Per hop: real rows, dropout keys; hop L's features; hop 0's labels and mask.
  const int64_t rows_all = P[hops];
  std::vector<int64_t> ids(static_cast<size_t>(rows_all)), real(static_cast<size_t>(rows_all), 0);
  for (int64_t r = 0; r < rows_all; ++r) ids[r] = num_nodes + r;
  for (int64_t r = 0; r < n; ++r) {
    ids[row[r]] = b.nodes[r];
    real[row[r]] = 1;
  }
  for (int h = 0; h <= hops; ++h) {
    const auto count = static_cast<size_t>(P[h]);
    mem.put(real_rows_name(hop_set_name(h)),
            Tensor::from<int64_t>(std::vector<int64_t>(real.begin(), real.begin() + count), {P[h]}));
    mem.put(global_id_name(hop_set_name(h)),
            Tensor::from<int64_t>(std::vector<int64_t>(ids.begin(), ids.begin() + count), {P[h]}));
    if (h < hops) mem.put(features_name(hop_set_name(h)), Tensor(DType::kF32, {P[h], 0}));  // width 0: the schema's
  }
  Tensor x(DType::kF32, {rows_all, features});
  auto xv = x.values<float>();
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(batch.x.begin() + r * features, features, xv.begin() + static_cast<int64_t>(row[r]) * features);
  }
  mem.put(features_name(hop_set_name(hops)), std::move(x));
  if (link) {
    bind_pairs(core, batch, row, shape.edge_rows[hops], P[0]);
  } else {
    Tensor y(DType::kI64, {P[0]}), mask(DType::kBool, {P[0]});
    for (int64_t r = 0; r < b.frontier[0]; ++r) {
      y.values<int64_t>()[row[r]] = batch.y[r];
      mask.values<uint8_t>()[row[r]] = 1;
    }
    mem.put(target_name(hop_set_name(0)), std::move(y));
    mem.put(mask_name(hop_set_name(0)), std::move(mask));
    mem.put(runtime::count_name(mask_name(hop_set_name(0))),
            Tensor::from<int64_t>(std::vector<int64_t>{batch.global_seeds}, {1}));
  }
  if (stats) {
    stats->real_rows += n;
    stats->padded_rows += rows_all;
  }

  for (int h = 0; h < hops; ++h) {
    const Block& k = b.blocks[h];
    const int64_t E = shape.edge_rows[h], real_edges = static_cast<int64_t>(k.src.size());
    const int64_t ns = P[h + 1], nd = P[h];
    if (real_edges > E) throw std::logic_error("a sampled block bound to a smaller bucket");
    const auto sink_src = static_cast<int32_t>(ns - 1), sink_dst = static_cast<int32_t>(nd - 1);
    std::vector<int32_t> src(static_cast<size_t>(E), sink_src), dst(static_cast<size_t>(E), sink_dst);
    std::vector<int64_t> eid(static_cast<size_t>(E));
    std::vector<int64_t> in_count(static_cast<size_t>(nd), 0);
    for (int64_t i = 0; i < real_edges; ++i) {
      src[i] = row[k.src[i]];
      dst[i] = row[k.dst[i]];
      eid[i] = edge_key(b.nodes[k.dst[i]], in_count[dst[i]]++);
    }
    for (int64_t i = real_edges; i < E; ++i) eid[i] = kPadEdgeIds + i;
    const std::string name = block_set_name(h);
    core.bind_graph(name, adjacency(src, dst, ns, nd));
    mem.put(runtime::edge_id_name(name), Tensor::from<int64_t>(eid, {E}));

    // The self-loop graph: the block's edges, then one loop per destination
    // row (sink loops fill the padded edges' slots).
    std::vector<int32_t> ls(src.begin(), src.begin() + real_edges), ld(dst.begin(), dst.begin() + real_edges);
    std::vector<int64_t> lid(eid.begin(), eid.begin() + real_edges);
    for (int64_t r = 0; r < nd; ++r) {
      ls.push_back(static_cast<int32_t>(r));
      ld.push_back(static_cast<int32_t>(r));
      lid.push_back(edge_key(ids[r], kLoopPosition));
    }
    while (static_cast<int64_t>(ls.size()) < E + nd) {
      lid.push_back(kPadEdgeIds + (int64_t{1} << 40) + static_cast<int64_t>(ls.size()));
      ls.push_back(sink_dst);
      ld.push_back(sink_dst);
    }
    const std::string loops = self_loop_graph_name(name);
    core.bind_graph(loops, adjacency(ls, ld, ns, nd));
    mem.put(runtime::edge_id_name(loops), Tensor::from<int64_t>(lid, {E + nd}));
    if (gcn_norms) {
      // PyG's GCNConv on the block's edges over its sources, a loop on each:
      // a destination's degree is its edges plus its loop, a source that is
      // no destination has only its loop. Padded slots weigh nothing.
      std::vector<float> w(static_cast<size_t>(E + nd), 0.0f);
      const auto degree = [&](int64_t r) { return r < nd ? static_cast<double>(in_count[r] + 1) : 1.0; };
      for (int64_t i = 0; i < real_edges + nd; ++i) {
        w[i] = static_cast<float>(1.0 / std::sqrt(degree(ls[i])) / std::sqrt(degree(ld[i])));
      }
      mem.put(gcn_norm_name(loops), Tensor::from<float>(w, {E + nd}));
    }
    std::vector<int32_t> pre(static_cast<size_t>(nd));
    for (int64_t r = 0; r < nd; ++r) pre[r] = static_cast<int32_t>(r);
    core.bind_graph(prefix_graph_name(name), adjacency(pre, pre, ns, nd));
    if (stats) {
      stats->real_edges += real_edges;
      stats->padded_edges += E;
    }
  }
}

}  // namespace gnnrt::model
