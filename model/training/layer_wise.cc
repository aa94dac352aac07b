#include "model/training/layer_wise.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/training/sampled_batches.h"

namespace gnnrt::model {

using runtime::Core;

namespace {

// The graph of a split layer's halo programs: this rank's in-edges (and loops).
constexpr const char* kHaloGraph = "halo.edges";

// Whether a module computes each row from that row alone (a convolution:
// once its aggregate is given). ShardedLayerWise evaluates chains of these
// alone: its programs see a chunk of a rank's own rows (a GRAPH layer
// norm's or a pool's statistics would be the chunk's).
bool row_wise(const proto::Module& m) {
  switch (m.kind_case()) {
    case proto::Module::kGin:
    case proto::Module::kSage:
    case proto::Module::kGcn:
    case proto::Module::kGat:
    case proto::Module::kLinear:
    case proto::Module::kMlp:
    case proto::Module::kResidualMlp:
    case proto::Module::kRelu:
    case proto::Module::kElu:
    case proto::Module::kActivation:
    case proto::Module::kDropout:  // evaluation: the identity
    case proto::Module::kSlice:
    case proto::Module::kScale:
      return true;
    case proto::Module::kLayerNorm:
      return m.layer_norm().mode() == proto::LayerNormModule::NODE;
    default:
      return false;
  }
}

}  // namespace

LayerWise::LayerWise(const NodeShard& shard, const proto::Model& model, const Schema& schema, int hops,
                     std::vector<std::string> outputs, const EdgeList* pairs)
    : shard_(shard), model_(model), schema_(schema), hops_(hops), outputs_(std::move(outputs)), pairs_(pairs) {
  const int64_t n = shard.num_nodes, e = static_cast<int64_t>(shard.indices.size());
  shape_.node_rows.assign(static_cast<size_t>(hops) + 1, n);
  shape_.edge_rows.assign(static_cast<size_t>(hops), e);
  shape_.self_loop_edges.assign(static_cast<size_t>(hops), e + n);
  if (pairs_) {
    shape_.edge_rows.push_back(pairs_->size());
    shape_.self_loop_edges.push_back(pairs_->size() + n);
  }
  shape_.graph_rows = 1;
  shape_.padded = false;
  // No eval loss: the step's metrics stay the training's.
  schema_.node_sets[0].target = false;
  for (auto& s : schema_.edge_sets) s.target = false;
}

Network LayerWise::build() const { return build_module_inference(model_, schema_, shape_, false, outputs_); }

void LayerWise::compile(Core& core) {
  if (!program_) program_ = core.compile(build().program, {});
}

std::vector<Tensor> LayerWise::run(Core& core, const runtime::RunContext& context) {
  const int64_t n = shard_.num_nodes;
  if (!edges_) {
    std::vector<int32_t> src(shard_.indices.begin(), shard_.indices.end()), dst(src.size());
    for (int64_t v = 0; v < n; ++v) {
      std::fill(dst.begin() + shard_.indptr[v], dst.begin() + shard_.indptr[v + 1], static_cast<int32_t>(v));
    }
    edges_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, n, n));
    // GCN's and GAT's graph (24 bytes an edge: built only for them).
    const bool loops = std::any_of(model_.module().begin(), model_.module().end(),
                                   [](const proto::Module& m) { return m.has_gcn() || m.has_gat(); });
    for (int64_t v = 0; loops && v < n; ++v) {  // the shard holds no loops: one per node
      src.push_back(static_cast<int32_t>(v));
      dst.push_back(static_cast<int32_t>(v));
    }
    if (loops) loops_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, n, n));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t v = 0; v < n; ++v) ids[v] = static_cast<int32_t>(v);
    identity_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(ids, ids, n, n));
    if (pairs_) {
      pair_graph_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(pairs_->src, pairs_->dst, n, n));
      pairs_reversed_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(pairs_->dst, pairs_->src, n, n));
    }
    compile(core);
  }
  auto& mem = core.memory();
  for (int h = 0; h < hops_; ++h) {
    mem.put(features_name(hop_set_name(h)), Tensor(DType::kF32, {n, 0}));
    core.bind_graph(block_set_name(h), edges_);
    if (loops_) core.bind_graph(self_loop_graph_name(block_set_name(h)), loops_);
    core.bind_graph(prefix_graph_name(block_set_name(h)), identity_);
  }
  if (pairs_) {
    core.bind_graph(kPairsSet, pair_graph_);
    core.bind_graph(reversed_graph_name(kPairsSet), pairs_reversed_);
  }
  mem.put(features_name(hop_set_name(hops_)), Tensor::from<float>(shard_.x, {n, shard_.num_features}));
  core.run(*program_, context);
  std::vector<Tensor> out;
  for (const std::string& name : outputs_) out.push_back(core.read(*program_, name));
  return out;
}

bool ShardedLayerWise::splits(const proto::Model& model, int hops) {
  std::string input = features_name(hop_set_name(hops));
  for (const proto::Module& m : model.module()) {
    if (m.input_size() != 1 || m.input(0) != input || !row_wise(m)) return false;
    input = m.name();
  }
  return true;
}

ShardedLayerWise::ShardedLayerWise(const NodeShard& shard, const proto::Model& model, int hops, collectives::Communicator& comm)
    : shard_(shard), hops_(hops) {
  // The segments: convolution k and what follows it.
  int segment = -1;
  bool loops = false;
  for (const proto::Module& m : model.module()) {
    const bool conv = m.has_gcn() || m.has_sage() || m.has_gat() || m.has_gin();
    if (conv || segment < 0) {
      if (conv && segment >= 0 && !segments_[static_cast<size_t>(segment)].has_conv) {
        // The modules before the first convolution stay with it.
      } else {
        segments_.emplace_back();
        ++segment;
      }
    }
    Segment& g = segments_[static_cast<size_t>(segment)];
    proto::Module copy = m;
    if (g.model.module_size() == 0) {
      copy.clear_input();
      copy.add_input(features_name(hop_set_name(1)));
    }
    if (conv) {
      g.has_conv = true;
      gcn_ = gcn_ || m.has_gcn();
      loops = loops || m.has_gcn() || m.has_gat();
      const std::string block = block_set_name(0);
      if (copy.has_gcn()) copy.mutable_gcn()->set_edges(block);
      if (copy.has_sage()) copy.mutable_sage()->set_edges(block);
      if (copy.has_gat()) copy.mutable_gat()->set_edges(block);
      if (copy.has_gin()) copy.mutable_gin()->set_edges(block);
    }
    *g.model.add_module() = std::move(copy);
    g.out = m.name();
  }
  // This rank's nodes first, then the halo (in-neighbours owned elsewhere).
  const int64_t owned = shard.owned();
  for (const int32_t u : shard.indices) {
    if (!shard.owns(u)) halo_.push_back(u);
  }
  std::sort(halo_.begin(), halo_.end());
  halo_.erase(std::unique(halo_.begin(), halo_.end()), halo_.end());
  exchange_ = std::make_unique<OwnerExchange>(halo_, shard, comm);
  const auto rows = owned + static_cast<int64_t>(halo_.size());
  std::vector<int32_t> src(shard.indices.size()), dst(shard.indices.size());
  for (int64_t v = 0; v < owned; ++v) {
    for (int64_t k = shard.indptr[v]; k < shard.indptr[v + 1]; ++k) {
      const int32_t u = shard.indices[static_cast<size_t>(k)];
      src[k] = shard.owns(u) ? static_cast<int32_t>(shard.local(u))
                             : static_cast<int32_t>(owned + (std::lower_bound(halo_.begin(), halo_.end(), u) -
                                                             halo_.begin()));
      dst[k] = static_cast<int32_t>(v);
    }
  }
  const auto e = static_cast<int64_t>(src.size());
  edges_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, rows, owned));
  // GCN's and GAT's graph: the in-edges and a loop a node (24 bytes an edge:
  // built only for them). GCN's weights with the graph's degrees (in-edges
  // and the loop); the halo's degrees from their owners.
  if (loops) {
    for (int64_t v = 0; v < owned; ++v) {
      src.push_back(static_cast<int32_t>(v));
      dst.push_back(static_cast<int32_t>(v));
    }
    loops_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, rows, owned));
  }
  if (gcn_) {
    std::vector<int32_t> degree(static_cast<size_t>(owned));
    for (int64_t v = 0; v < owned; ++v) degree[v] = static_cast<int32_t>(shard.indptr[v + 1] - shard.indptr[v] + 1);
    const std::vector<int32_t> halo_degree = exchange_->fetch<int32_t>(degree, 1);
    const auto degree_of = [&](int32_t r) {
      return static_cast<double>(r < owned ? degree[r] : halo_degree[static_cast<size_t>(r - owned)]);
    };
    norm_.resize(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      norm_[i] = static_cast<float>(1.0 / std::sqrt(degree_of(src[i])) / std::sqrt(degree_of(dst[i])));
    }
  }
  shape_.node_rows = {owned, rows};
  shape_.edge_rows = {e};
  shape_.self_loop_edges = {e + owned};
  shape_.graph_rows = 1;
  shape_.padded = false;
  // Column blocks whose halo rows hold at most about a quarter of a
  // layer's own rows; every rank takes as many blocks (each is an exchange).
  const int64_t halo = rows - owned;
  int64_t blocks[1] = {halo == 0 ? 1 : (4 * halo + std::max<int64_t>(owned, 1) - 1) / std::max<int64_t>(owned, 1)};
  comm.allreduce<int64_t>(std::span<int64_t>(blocks), collectives::ReduceOp::max);
  blocks_ = blocks[0];
}

Tensor ShardedLayerWise::run(Core& core, const runtime::RunContext& context) {
  // One layer's input at a time: its rows of this rank's nodes, dropped
  // once the layer has run.
  Tensor out = Tensor::from<float>(shard_.x, {shard_.owned(), shard_.num_features});
  for (Segment& g : segments_) {
    out = run_segment(core, context, g, std::move(out));
  }
  return out;
}

Tensor ShardedLayerWise::run_segment(Core& core, const runtime::RunContext& context, Segment& g, Tensor in) {
  const int64_t owned = shard_.owned(), width = in.shape()[1];
  if (g.schema.node_sets.empty()) {  // the first run
    g.schema = sampled_schema(1, width, 1);
    g.schema.node_sets[0].target = false;
  }
  if (g.has_conv && g.aggregation.width == 0) {  // the first run
    g.aggregation.part = AggregationSplit::Part::kMessages;
    Network messages = build_split_inference(g.model, g.schema, own_rows_shape(owned), g.aggregation, {});
    if (!g.aggregation.from_input) g.messages = core.compile(std::move(messages.program), {});
  }
  auto& mem = core.memory();
  const std::string hop1 = features_name(hop_set_name(1)), hop0 = features_name(hop_set_name(0));
  const std::string block = block_set_name(0);
  const auto bind_own_rows = [&](int64_t rows) {  // the split programs' graphs
    const auto& [none, identity] = own_rows_graphs(rows);
    core.bind_graph(block, none);
    core.bind_graph(self_loop_graph_name(block), identity);
    core.bind_graph(prefix_graph_name(block), identity);
  };
  Tensor agg;
  if (g.has_conv) {
    mem.put(hop1, std::move(in));
    mem.put(hop0, Tensor(DType::kF32, {owned, 0}));
    bind_own_rows(owned);
    Tensor messages;
    if (g.messages) {
      core.run(*g.messages, context);
      messages = core.read(*g.messages, kMessagesName);
    }
    const Tensor& m = g.messages ? messages : mem.at(hop1);
    Tensor alpha;  // GAT's weights, [edges, heads]
    if (g.aggregation.heads > 0) {
      // The scores are the messages program's (GAT's messages are x Wᵀ).
      if (!g.messages) throw std::logic_error("an attention split without a messages program");
      alpha = attention(core, context, g.aggregation, core.read(*g.messages, kSourceScoresName),
                        core.read(*g.messages, kDestinationScoresName));
    }
    agg = aggregate(core, context, g.aggregation, m.values<float>(), std::move(alpha));
    messages = Tensor();
    in = std::move(mem.at(hop1));
    mem.erase(hop1);
  }
  // The rest of the layer (a segment without a convolution: all of it) on
  // own rows in row chunks (every module works row by row: splits()), so
  // its work space is a chunk's, not all own rows'.
  const int64_t chunk = std::max<int64_t>(1, (owned + kTransformChunks - 1) / kTransformChunks);
  Tensor out;
  int64_t begin = 0;
  do {
    const int64_t rows = std::min(chunk, owned - begin);
    auto& program = g.transforms[rows];
    if (!program) {
      AggregationSplit transform;
      transform.part = AggregationSplit::Part::kTransform;
      program = core.compile(
          (g.has_conv ? build_split_inference(g.model, g.schema, own_rows_shape(rows), transform, {g.out})
                      : build_module_inference(g.model, g.schema, own_rows_shape(rows), false, {g.out}))
              .program,
          {});
    }
    const auto slice = [&](const Tensor& t) {  // rows [begin, begin + rows) of t
      const int64_t w = t.shape()[1];
      const auto v = t.values<float>().subspan(static_cast<size_t>(begin * w), static_cast<size_t>(rows * w));
      return Tensor::from<float>(v, {rows, w});
    };
    mem.put(hop1, rows == owned ? std::move(in) : slice(in));
    mem.put(hop0, Tensor(DType::kF32, {rows, 0}));
    if (g.has_conv) mem.put(kAggregateName, rows == owned ? std::move(agg) : slice(agg));
    bind_own_rows(rows);
    core.run(*program, context);
    const Tensor part = core.read(*program, g.out);
    if (rows == owned) {
      out = part;
    } else {
      const int64_t w = part.shape()[1];
      if (begin == 0) out = Tensor(DType::kF32, {owned, w});
      const auto pv = part.values<float>();
      std::copy(pv.begin(), pv.end(), out.values<float>().begin() + begin * w);
    }
    begin += rows;
  } while (begin < owned);
  mem.erase(hop1);
  if (g.has_conv) mem.erase(kAggregateName);
  return out;
}

Tensor ShardedLayerWise::with_halo(std::span<const float> own, int64_t width, int64_t begin, int64_t end) {
  const int64_t owned = shard_.owned(), w = end - begin;
  Tensor x(DType::kF32, {shape_.node_rows[1], w});
  auto xv = x.values<float>();
  for (int64_t r = 0; r < owned; ++r) std::copy_n(own.begin() + r * width + begin, w, xv.begin() + r * w);
  exchange_->fetch_columns_into<float>(own, width, begin, end, xv.subspan(static_cast<size_t>(owned * w)));
  return x;
}

BucketShape ShardedLayerWise::own_rows_shape(int64_t rows) const {
  BucketShape shape = shape_;
  shape.node_rows = {rows, rows};
  shape.edge_rows = {0};
  shape.self_loop_edges = {rows};
  return shape;
}

const std::pair<std::shared_ptr<const Core::Adjacency>, std::shared_ptr<const Core::Adjacency>>&
ShardedLayerWise::own_rows_graphs(int64_t rows) {
  auto& graphs = own_rows_graphs_[rows];
  if (!graphs.first) {
    std::vector<int32_t> ids(static_cast<size_t>(rows)), none;
    std::iota(ids.begin(), ids.end(), 0);
    graphs = {std::make_shared<const Core::Adjacency>(Core::Adjacency::build(none, none, rows, rows)),
              std::make_shared<const Core::Adjacency>(Core::Adjacency::build(ids, ids, rows, rows))};
  }
  return graphs;
}

Tensor ShardedLayerWise::attention(Core& core, const runtime::RunContext& context, const AggregationSplit& a,
                                   const Tensor& src, const Tensor& dst) {
  static constexpr const char* kSrc = "halo.scores.src";
  static constexpr const char* kDst = "halo.scores.dst";
  static constexpr const char* kWeights = "halo.attention";
  const int64_t owned = shard_.owned(), rows = shape_.node_rows[1], edges = shape_.self_loop_edges[0];
  // GAT over a block is homogeneous: its graph has a loop a destination.
  if (!a.self_loops) throw std::logic_error("an attention split over a graph without loops");
  // The sources' scores: own rows, then the halo's whole (heads floats a node).
  Tensor scores = with_halo(src.values<float>(), a.heads, 0, a.heads);
  auto& program = attentions_[{a.heads, a.negative_slope}];
  if (!program) {
    runtime::Builder b("halo_attention");
    const int32_t graph = b.graph(kHaloGraph, rows, owned, edges);
    const runtime::ValueId alpha =
        attention_weights(b, graph, b.input(kSrc, DType::kF32, {rows, a.heads}),
                          b.input(kDst, DType::kF32, {owned, a.heads}), a.negative_slope);
    b.program().value(alpha).name = kWeights;
    b.output(alpha);
    program = core.compile(b.take(), {});
  }
  auto& mem = core.memory();
  core.bind_graph(kHaloGraph, loops_);
  mem.put(kSrc, std::move(scores));
  mem.put(kDst, dst);
  core.run(*program, context);
  mem.erase(kSrc);
  mem.erase(kDst);
  return core.read(*program, kWeights);
}

Tensor ShardedLayerWise::aggregate(Core& core, const runtime::RunContext& context, const AggregationSplit& a,
                                   std::span<const float> messages, Tensor alpha) {
  static constexpr const char* kRows = "halo.rows";
  static constexpr const char* kWeight = "halo.weight";
  const int64_t owned = shard_.owned(), rows = shape_.node_rows[1], width = a.width;
  const int64_t edges = a.self_loops ? shape_.self_loop_edges[0] : shape_.edge_rows[0];
  auto& mem = core.memory();
  core.bind_graph(kHaloGraph, a.self_loops ? loops_ : edges_);
  if (a.gcn_norm) mem.put(kWeight, Tensor::from<float>(norm_, {edges, 1}));
  Tensor agg(DType::kF32, {owned, width});
  auto av = agg.values<float>();
  // Every rank the same blocks (the width, heads and blocks_ are every rank's).
  int64_t bound = -1;  // the head whose weights are bound (pieces of one head share them)
  for (const Block& block : column_blocks(width, a.heads, blocks_)) {
    const int64_t begin = block.begin, w = block.end - block.begin;
    Tensor x = with_halo(messages, width, begin, block.end);
    // The edges' weights: GCN's (bound above), or the attention of the
    // block's heads: all of alpha when they are all its heads (moved once),
    // else a copy of their columns.
    const int64_t weights = a.gcn_norm ? 1 : block.heads;
    if (a.heads > 0 && block.heads == a.heads && bound < 0) {
      mem.put(kWeight, std::move(alpha));
      bound = 0;
    } else if (a.heads > 0 && block.heads < a.heads && block.head != bound) {
      Tensor wt(DType::kF32, {edges, weights});
      const auto all = alpha.values<float>();
      auto wv = wt.values<float>();
      for (int64_t e = 0; e < edges; ++e) {
        std::copy_n(all.begin() + e * a.heads + block.head, weights, wv.begin() + e * weights);
      }
      mem.put(kWeight, std::move(wt));
      bound = block.head;
    }
    auto& program = aggregations_[{static_cast<int>(a.reduce), a.self_loops, weights, w}];
    if (!program) {
      runtime::Builder b("halo_aggregate");
      const int32_t graph = b.graph(kHaloGraph, rows, owned, edges);
      const runtime::ValueId x = b.input(kRows, DType::kF32, {rows, w});
      const runtime::ValueId weight = weights > 0 ? b.input(kWeight, DType::kF32, {edges, weights}) : runtime::kNoValue;
      const runtime::ValueId y = b.aggregate(a.reduce, graph, x, weight);
      b.program().value(y).name = kAggregateName;
      b.output(y);
      program = core.compile(b.take(), {});
    }
    mem.put(kRows, std::move(x));
    core.run(*program, context);
    const Tensor y = core.read(*program, kAggregateName);
    mem.erase(kRows);
    const auto yv = y.values<float>();
    for (int64_t r = 0; r < owned; ++r) std::copy_n(yv.begin() + r * w, w, av.begin() + r * width + begin);
  }
  if (a.gcn_norm || a.heads > 0) mem.erase(kWeight);
  return agg;
}

std::vector<ShardedLayerWise::Block> ShardedLayerWise::column_blocks(int64_t width, int64_t heads, int64_t blocks) {
  // Blocks of at most `step` columns.
  const int64_t step = std::max<int64_t>(1, (width + blocks - 1) / blocks);
  std::vector<Block> out;
  if (heads == 0) {
    for (int64_t begin = 0; begin < width; begin += step) out.push_back({begin, std::min(width, begin + step), 0, 0});
    return out;
  }
  // Attention: a block never straddles a head boundary, so one weight an
  // edge applies to each column: whole heads a block, or pieces of a head.
  const int64_t channels = width / heads;
  if (channels <= step) {
    const int64_t per = std::max<int64_t>(1, step / std::max<int64_t>(channels, 1));
    for (int64_t h = 0; h < heads; h += per) {
      const int64_t k = std::min(per, heads - h);
      out.push_back({h * channels, (h + k) * channels, h, k});
    }
    return out;
  }
  const int64_t pieces = (channels + step - 1) / step, piece = (channels + pieces - 1) / pieces;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t c = 0; c < channels; c += piece) {
      out.push_back({h * channels + c, h * channels + std::min(channels, c + piece), h, 1});
    }
  }
  return out;
}

ShardedLinkScores::ShardedLinkScores(const NodeShard& graph, const proto::Model& embeddings, proto::Model decoder,
                                     int hops, const EdgeList& pairs, collectives::Communicator& comm)
    : embed_(graph, embeddings, hops, comm), decoder_(std::move(decoder)), comm_(comm) {
  const int ranks = comm.size(), rank = comm.rank();
  const int64_t p = pairs.size();
  for (int q = 0; q < ranks; ++q) {
    shares_.push_back(static_cast<size_t>(range_begin(p, q + 1, ranks) - range_begin(p, q, ranks)));
  }
  const int64_t b = range_begin(p, rank, ranks), e = range_begin(p, rank + 1, ranks);
  endpoints_.assign(pairs.src.begin() + b, pairs.src.begin() + e);
  endpoints_.insert(endpoints_.end(), pairs.dst.begin() + b, pairs.dst.begin() + e);
  std::sort(endpoints_.begin(), endpoints_.end());
  endpoints_.erase(std::unique(endpoints_.begin(), endpoints_.end()), endpoints_.end());
  exchange_ = std::make_unique<OwnerExchange>(endpoints_, graph, comm);
  std::vector<int32_t> src, dst;
  const auto row = [&](int32_t v) {
    return static_cast<int32_t>(std::lower_bound(endpoints_.begin(), endpoints_.end(), v) - endpoints_.begin());
  };
  for (int64_t k = b; k < e; ++k) {
    src.push_back(row(pairs.src[k]));
    dst.push_back(row(pairs.dst[k]));
  }
  const auto m = static_cast<int64_t>(endpoints_.size());
  pairs_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, m, m));
  reversed_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(dst, src, m, m));
  shape_.node_rows = {m};
  shape_.edge_rows = {e - b};
  shape_.self_loop_edges = {e - b + m};
  shape_.graph_rows = 1;
  shape_.padded = false;
}

std::vector<float> ShardedLinkScores::run(Core& core, const runtime::RunContext& context) {
  const Tensor own = embed_.run(core, context);  // [owned, width]
  const int64_t width = own.shape()[1];
  Tensor rows(DType::kF32, {static_cast<int64_t>(endpoints_.size()), width});  // the endpoints'
  exchange_->fetch_into<float>(own.values<float>(), width, rows.values<float>());
  std::vector<float> mine;
  if (shape_.edge_rows[0] > 0) {
    const std::string& score = decoder_.module(decoder_.module_size() - 1).name();
    if (!program_) {
      Schema schema = sampled_schema(0, width, 1, true);
      for (auto& set : schema.edge_sets) set.target = false;
      program_ = core.compile(build_module_inference(decoder_, schema, shape_, false, {score}).program, {});
    }
    core.memory().put(features_name(hop_set_name(0)), std::move(rows));
    core.bind_graph(kPairsSet, pairs_);
    core.bind_graph(reversed_graph_name(kPairsSet), reversed_);
    core.run(*program_, context);
    const Tensor s = core.read(*program_, score);
    core.memory().erase(features_name(hop_set_name(0)));
    const auto sv = s.values<float>();
    mine.assign(sv.begin(), sv.end());
  }
  // Every rank's share to every rank, in rank order: the pairs' order.
  const int ranks = comm_.size();
  std::vector<float> send;
  for (int q = 0; q < ranks; ++q) send.insert(send.end(), mine.begin(), mine.end());
  const std::vector<size_t> out(static_cast<size_t>(ranks), mine.size());
  std::vector<float> all(std::accumulate(shares_.begin(), shares_.end(), size_t{0}));
  comm_.alltoallv<float>(send, out, all, shares_);
  return all;
}

}  // namespace gnnrt::model
