// Layer-wise full-neighbourhood inference for sampled jobs
// (docs/sampling.md, "Evaluation"): every node's output of each layer from
// all its in-neighbours, without sampling noise, as PyG's examples compute
// their test accuracy.
//   - LayerWise (one rank): the model's program with every hop holding all
//     nodes and every block all in-edges, bound before each run (the steps
//     bind their batches under the same names); a link model's "pairs"
//     edge set holds the pairs to score.
//   - ShardedLayerWise (many ranks, or one whose core cannot hold
//     LayerWise's program): each rank its own nodes a layer at a time, the
//     halo's columns a block at a time from their owners.
//   - ShardedLinkScores (many ranks): a link model's pairs scored over
//     node shards, each rank its share of the pairs.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "model/data/node_shard.h"
#include "model/job.pb.h"
#include "model/modules/module_graph.h"
#include "model/sampling/distributed_neighbors.h"
#include "model/sampling/link_split.h"
#include "runtime/core.h"

namespace gnnrt::model {

class LayerWise {
 public:
  // `pairs`: the node pairs a link model scores (its schema's "pairs" edge
  // set, after the blocks), kept by reference; none for node models.
  LayerWise(const NodeShard& shard, const proto::Model& model, const Schema& schema, int hops,
            std::vector<std::string> outputs, const EdgeList* pairs = nullptr);

  // The program (its parameters), built on first use.
  Network build() const;
  // Compiles the program ahead of the first run (runtime::CapacityError
  // when it does not fit the device).
  void compile(runtime::Core& core);
  // The outputs' rows: [nodes, width], or [pairs, width] for a module on the pairs.
  std::vector<Tensor> run(runtime::Core& core, const runtime::RunContext& context);

 private:
  const NodeShard& shard_;
  const proto::Model& model_;
  Schema schema_;
  const int hops_;
  const std::vector<std::string> outputs_;
  const EdgeList* pairs_;
  BucketShape shape_;
  std::shared_ptr<const runtime::CompiledProgram> program_;
  std::shared_ptr<const runtime::Core::Adjacency> edges_, loops_, identity_, pair_graph_, pairs_reversed_;
};

// Layer-wise inference over node shards (many ranks): each rank computes
// its own nodes' rows of each layer from all their in-neighbours, whose
// rows of the layer before come from their owners (the halo). A chain of
// modules that work row by row (convolutions, linear maps, activations, a
// NODE layer norm, ...) splits into layers: each convolution with the
// modules after it up to the next (the modules before the first go with
// it); other module graphs are not evaluated on many ranks. Collective:
// every rank runs it alike.
//
// Every convolution's layer runs split at its aggregation
// (AggregationSplit): the messages of this rank's nodes, then the
// aggregate a column block at a time (the halo's columns of the block from
// their owners), then the transform, so a rank holds its own rows and one
// block of the halo's, never a layer's rows of all nodes. GAT's attention
// weights come first, from its per-head scores (the halo's whole: heads
// floats a node); its blocks keep to whole heads or pieces of one.
class ShardedLayerWise {
 public:
  // Whether the model is such a chain.
  static bool splits(const proto::Model& model, int hops);

  ShardedLayerWise(const NodeShard& shard, const proto::Model& model, int hops, collectives::Communicator& comm);

  // The model's last rows of this rank's nodes, [owned, width].
  Tensor run(runtime::Core& core, const runtime::RunContext& context);
  // The column blocks a split layer's aggregation aims at (every rank's;
  // column_blocks() makes them).
  int64_t blocks() const { return blocks_; }

  // Columns [begin, end) of a layer's messages, and the attention heads
  // [head, head + heads) that weigh them (none without attention).
  struct Block {
    int64_t begin, end, head, heads;
    bool operator==(const Block&) const = default;
  };
  // The blocks of `width` columns for `blocks`: each at most
  // ceil(width / blocks) columns wide; with `heads` (attention), each
  // within whole heads or a piece of one head (so a few more blocks).
  static std::vector<Block> column_blocks(int64_t width, int64_t heads, int64_t blocks);

 private:
  struct Segment {
    proto::Model model;
    Schema schema;
    bool has_conv = false;  // else the model has none: it runs on own rows alone
    std::string out;
    AggregationSplit aggregation;
    std::shared_ptr<const runtime::CompiledProgram> messages;
    std::map<int64_t, std::shared_ptr<const runtime::CompiledProgram>> transforms;  // by chunk rows
  };
  // A split layer's transform runs in this many row chunks.
  static constexpr int64_t kTransformChunks = 4;
  // One segment: its input's rows of this rank's nodes in, its output's out.
  Tensor run_segment(runtime::Core& core, const runtime::RunContext& context, Segment& g, Tensor in);
  // The split programs' shape and graphs over `rows` of this rank's nodes
  // (all of them, or a chunk): no halo, an empty block; the graphs are
  // (no edges, the identity), made once a row count.
  BucketShape own_rows_shape(int64_t rows) const;
  const std::pair<std::shared_ptr<const runtime::Core::Adjacency>, std::shared_ptr<const runtime::Core::Adjacency>>&
  own_rows_graphs(int64_t rows);
  // Columns [begin, end) of `own` [owned, width] and of the halo's rows
  // (from their owners, collective): [owned + halo, end - begin].
  Tensor with_halo(std::span<const float> own, int64_t width, int64_t begin, int64_t end);
  // GAT's attention weights [edges and loops, heads] over this rank's
  // in-edges from the scores of its own nodes as sources (src) and
  // destinations (dst), the halo's source scores from their owners.
  Tensor attention(runtime::Core& core, const runtime::RunContext& context, const AggregationSplit& a,
                   const Tensor& src, const Tensor& dst);
  // The aggregation of `messages` [owned, a.width] over this rank's
  // in-edges, the halo's columns a block at a time; weighted by `alpha`
  // (attention()) when a.heads > 0.
  Tensor aggregate(runtime::Core& core, const runtime::RunContext& context, const AggregationSplit& a,
                   std::span<const float> messages, Tensor alpha);

  const NodeShard& shard_;
  const int hops_;
  std::vector<Segment> segments_;
  bool gcn_ = false;
  std::vector<int32_t> halo_;
  std::unique_ptr<OwnerExchange> exchange_;
  // The in-edges (sources: own rows, then the halo's), and with a loop a
  // node (GCN and GAT).
  std::shared_ptr<const runtime::Core::Adjacency> edges_, loops_;
  std::vector<float> norm_;
  BucketShape shape_;
  int64_t blocks_ = 1;  // column blocks of a split layer's aggregation (the same on every rank)
  // The aggregation programs, by (reduce, loops, weights an edge, block width).
  std::map<std::tuple<int, bool, int64_t, int64_t>, std::shared_ptr<const runtime::CompiledProgram>> aggregations_;
  // The attention programs, by (heads, negative slope).
  std::map<std::pair<int64_t, double>, std::shared_ptr<const runtime::CompiledProgram>> attentions_;
  std::map<int64_t, std::pair<std::shared_ptr<const runtime::Core::Adjacency>,
                              std::shared_ptr<const runtime::Core::Adjacency>>> own_rows_graphs_;  // by rows
};

// A link model's evaluation over node shards (many ranks): the embeddings
// of this rank's nodes over the evaluation's message-passing graph by
// ShardedLayerWise (`embeddings`: the model's chain up to its embeddings),
// then each rank scores a contiguous share of the pairs with `decoder` (the
// model's modules after the embeddings, reading them as hop 0's features),
// the endpoints' rows fetched from their owners. Collective.
class ShardedLinkScores {
 public:
  ShardedLinkScores(const NodeShard& graph, const proto::Model& embeddings, proto::Model decoder, int hops,
                    const EdgeList& pairs, collectives::Communicator& comm);

  // Every pair's score, in the pairs' order, on every rank.
  std::vector<float> run(runtime::Core& core, const runtime::RunContext& context);

 private:
  ShardedLayerWise embed_;
  proto::Model decoder_;
  collectives::Communicator& comm_;
  std::vector<int32_t> endpoints_;  // this rank's share's endpoints, distinct, ascending
  std::vector<size_t> shares_;      // each rank's pair count
  std::unique_ptr<OwnerExchange> exchange_;
  std::shared_ptr<const runtime::Core::Adjacency> pairs_, reversed_;
  BucketShape shape_;
  std::shared_ptr<const runtime::CompiledProgram> program_;
};

}  // namespace gnnrt::model
