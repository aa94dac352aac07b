// Layer-wise neighbour sampling (docs/sampling.md): a batch of seed nodes
// and their sampled L-hop neighbourhood as L blocks (DGL's message-flow
// graphs).
//
// Hop 0's frontier is the seeds (each once). At hop h every node of the
// frontier draws up to fanout[h] of its in-edges (messages flow source ->
// destination): uniformly without replacement (Floyd's algorithm), with
// replacement when `replace`, every in-edge for -1 or when it has no more
// than fanout[h]. The next frontier is the frontier plus the newly reached
// sources, in the order first drawn. So the nodes are one list in which
// frontier h is a prefix; block h's edges run from frontier h + 1 rows to
// frontier h rows, and layer l of an L-layer model runs on block L - 1 - l.
//
// Keys: draw m of node v at hop h of global batch b in epoch e is word
// m % 4 of philox(seed, kSampleStream, {e, b, h << 32 | m / 4, v}), and a
// draw below n is ops::below(word, n). A seed's computation tree depends on
// these keys only: not on the rank or thread count, nor on which other seeds
// share its batch. disjoint: each seed grows its own tree (PyG's meaning;
// nodes are told apart by (tree, id), and `tree` says whose each row is).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/data/node_shard.h"

namespace gnnrt::model {

inline constexpr uint64_t kSampleStream = 0x73616d706c65;  // "sample"

struct SamplerOptions {
  std::vector<int> fanouts;  // per hop: >= 1, or -1 for every in-edge
  bool replace = false;
  bool disjoint = false;
};

struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t batch = 0;  // the global batch's index within the epoch
};

// What the nodes of a frontier drew at one hop: node i's sources are
// neighbors[offsets[i] .. offsets[i + 1]).
struct Draws {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> neighbors;
};

// The in-neighbours node v draws at `hop` (appended to `out`), from its
// in-edge list `in` by the rule and keys above.
void draw_in_neighbors(std::span<const int32_t> in, int64_t v, int hop, int fanout, bool replace, const SampleKey& key,
                       std::vector<int32_t>& out);

// Where the sampler's draws come from: the nodes' owners. A local source
// holds every node it is asked for; a distributed one asks the owners.
class NeighborSource {
 public:
  virtual ~NeighborSource() = default;
  // Replaces `out` with the draws of `nodes` at `hop`.
  virtual void draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace, const SampleKey& key,
                    Draws& out) = 0;
};

// The draws of the nodes a shard owns (every node asked must be owned),
// on `threads` OpenMP threads: the same bits at any thread count.
class ShardNeighbors final : public NeighborSource {
 public:
  explicit ShardNeighbors(const NodeShard& shard, int threads = 1) : shard_(shard), threads_(threads) {}
  void draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace, const SampleKey& key,
            Draws& out) override;

 private:
  const NodeShard& shard_;
  int threads_;
};

struct Block {
  std::vector<int32_t> src, dst;  // rows: src < frontier[h + 1], dst < frontier[h]
};

struct SampledBlocks {
  std::vector<int32_t> nodes;         // global ids; frontier h is nodes[0 .. frontier[h])
  std::vector<int32_t> tree;          // disjoint: each row's seed position; else empty
  std::vector<int64_t> frontier;      // [L + 1]
  std::vector<Block> blocks;          // [L]: block h's edges were drawn at hop h
  std::vector<int32_t> seed_rows;     // each seed's row (repeated seeds share one unless disjoint)
  int64_t num_edges() const;
};

// Samples the blocks of `seeds` (global ids below `num_nodes`). Throws
// std::invalid_argument for a bad fanout or seed id, naming it.
class NeighborSampler {
 public:
  NeighborSampler(SamplerOptions options, int64_t num_nodes);
  SampledBlocks sample(std::span<const int32_t> seeds, const SampleKey& key, NeighborSource& source);
  const SamplerOptions& options() const { return options_; }

 private:
  void reset(const SampledBlocks& out);  // row_ back to -1
  // sample()'s hops: each frontier's draws into a block.
  template <typename RowOf>
  void hops(SampledBlocks& out, const SampleKey& key, NeighborSource& source, RowOf& row_of);

  SamplerOptions options_;
  int64_t num_nodes_;
  std::vector<int32_t> row_;  // global id -> row in the current batch, -1 (not disjoint)
  Draws draws_;
};

// Checks a fanout list: non-empty, each >= 1 or -1; throws
// std::invalid_argument naming `field` and the bad value.
void check_fanouts(std::span<const int> fanouts, const char* field);

}  // namespace gnnrt::model
