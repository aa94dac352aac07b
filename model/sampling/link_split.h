// Link prediction's edge split and negatives (docs/sampling.md, "Link
// prediction"), with PyG's RandomLinkSplit meaning:
//   - undirected: a pair and its reverse are one edge (the split keeps them
//     together); directed graphs split edges as given;
//   - the edges in an order drawn from the seed; the last val + test of
//     them held out: val, then test; the rest train;
//   - message passing: training sees the training edges, validation every
//     training edge, the test every training and validation edge (both
//     directions when undirected); held-out edges are never in a graph
//     they are scored on;
//   - disjoint_train_ratio: that share of the training edges supervises
//     only (out of the training graph; validation and test still pass
//     messages over them, PyG's disjoint_train_ratio);
//   - evaluation negatives drawn at split time, `ratio` per positive:
//     uniform pairs (u, v), u != v, that are no edge of the graph in either
//     direction (undirected) or as given; training negatives fresh each
//     epoch by the same rule, keyed by the epoch.
// Every draw is Philox keyed by (seed, "links", what, index), so the split
// does not depend on threads or ranks. Bad fractions, or more negatives
// than non-edges, throw std::invalid_argument naming the field and value.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gnnrt::model {

struct LinkSplitOptions {
  double val = 0.1, test = 0.2;
  double disjoint_train_ratio = 0;
  double negative_ratio = 1;  // evaluation negatives per positive (link.eval_negative_ratio)
  bool undirected = true;
  uint64_t seed = 0;
};

// Directed pairs src[i] -> dst[i].
struct EdgeList {
  std::vector<int32_t> src, dst;
  int64_t size() const { return static_cast<int64_t>(src.size()); }
};

struct LinkSplit {
  int64_t num_nodes = 0;
  EdgeList train, val, test;          // positives (one direction when undirected)
  EdgeList train_supervision;         // the training positives the loss sees
  EdgeList val_negatives, test_negatives;
  EdgeList train_graph, val_graph, test_graph;  // message passing (both directions when undirected)
};

// Splits the edges src -> dst of a graph of `num_nodes` nodes. Self loops
// and repeated edges (and, undirected, reverses) count once.
LinkSplit split_links(int64_t num_nodes, std::span<const int64_t> src, std::span<const int64_t> dst,
                      const LinkSplitOptions& options);

// `count` training negatives for `epoch`: uniform non-edges of the whole
// graph (split.train + val + test), keyed by (seed, epoch).
EdgeList training_negatives(const LinkSplit& split, int64_t count, uint64_t seed, int64_t epoch, bool undirected);

// The pairs (u, v), u != v, that are no edge of the split's graph (a pair
// counting both directions when undirected): the most negatives there are.
int64_t link_non_edges(const LinkSplit& split, bool undirected);

// Ranking metrics of positive and negative scores.
// AUC: the probability that a positive outscores a negative, ties half
// (the Mann-Whitney statistic, sklearn's roc_auc_score).
double link_auc(std::span<const float> positive, std::span<const float> negative);
// Hits@K (OGB's): the share of positives scoring above the K-th highest
// negative (every positive when there are fewer than K negatives); K >= 1.
double link_hits(std::span<const float> positive, std::span<const float> negative, int64_t k);
// MRR against the shared negatives: each positive's rank among them,
// 1 + (#negatives above + #negatives tied / 2) (OGB's optimistic and
// pessimistic ranks averaged), reciprocal, averaged over the positives.
double link_mrr(std::span<const float> positive, std::span<const float> negative);

}  // namespace gnnrt::model
