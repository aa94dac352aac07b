// Sampled blocks (model/sampling/neighbor_sampler.h) as the core takes
// them: the schema of an L-hop model, the shape bucket of a batch, and the
// binding of a batch padded to its bucket (docs/sampling.md).
//
// Schema: node sets "hop0" .. "hopL" and edge sets "block0" ..
// "block{L-1}"; block h runs from hop h + 1's rows to hop h's and is a
// block (modules.h: its destinations are its sources' first rows). Rows:
// hop h's are hop h - 1's followed by the nodes first reached at hop h, so
// each hop is a prefix of the next. The features are "hopL.x", the labels
// "hop0.y" (the seeds' rows).
//
// Padding: each hop's new nodes (a segment) and each block's edges are
// padded up to a rung of a geometric ladder; every segment keeps at least
// one padded row, the last of which is the sink every padded edge of the
// blocks into that hop points at. Padded rows have no real edges, are
// masked out of the loss and zeroed after each convolution, so no real
// row depends on them.
//
// Link prediction adds the edge set "pairs" (after the blocks) from hop 0
// to hop 0: each scored pair between its endpoints' seed rows, its label
// "pairs.y" ([pairs, 1], 1 for an edge, 0 for a negative) and mask; no
// node labels. Padded pairs join hop 0's sink to itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/modules/modules.h"
#include "model/sampling/link_split.h"
#include "model/sampling/neighbor_sampler.h"
#include "model/training/graph_batches.h"
#include "runtime/core.h"

namespace gnnrt::model {

std::string hop_set_name(int h);    // "hop<h>"
std::string block_set_name(int h);  // "block<h>"
inline constexpr const char* kPairsSet = "pairs";

// `link`: the pairs edge set instead of the seeds' labels.
Schema sampled_schema(int hops, int64_t features, int64_t classes, bool link = false);

// One sampled batch of a rank, ready to bind: its blocks, the features of
// its nodes (in row order) and the labels of its seeds.
struct SampledBatch {
  int64_t epoch = 0, index = 0;
  SampledBlocks blocks;
  std::vector<float> x;      // [frontier L, F]
  std::vector<int32_t> y;    // [frontier 0]; empty for link prediction
  int64_t global_seeds = 0;  // the global batch's seeds: the loss's divisor
  // Link prediction: the pairs to score, as rows of the seeds (src[i],
  // dst[i] < frontier 0), their labels, and the global batch's pair count
  // (the loss's divisor).
  EdgeList pairs;
  std::vector<float> pair_labels;
  int64_t global_pairs = 0;
  double sample_ms = 0;      // sampling and gathering it took
  int64_t bytes_sent = 0;    // to other ranks, making it
};

// The smallest rung of the ladder 1, 2, ..., v_{k+1} = max(v_k + 1,
// ceil(v_k * growth)) that holds `need`.
int64_t ladder_rung(int64_t need, double growth);

// The bucket of a batch: per hop its rows (segments padded to rungs),
// per block its edges; and the pairs' rung when `pairs` >= 0 (link prediction).
BucketShape sampled_bucket(const SampledBlocks& blocks, double growth, int64_t pairs = -1);

// Binds `batch` padded to `shape` (which must hold it) under the schema's
// names; `gcn_norms`: also each block's GCN weights (modules.h).
// `num_nodes` numbers the padding's dropout keys after the graph's nodes.
void bind_sampled(runtime::Core& core, const SampledBatch& batch, const BucketShape& shape, int64_t num_nodes,
                  int64_t features, bool gcn_norms, PaddingStats* stats);

}  // namespace gnnrt::model
