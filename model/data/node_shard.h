// NodeShard: a rank's part of a graph for sampled mini-batch training
// (docs/sampling.md): the nodes it owns, a contiguous range of the
// graph's ids (the default) or a METIS part (sampling.ownership METIS:
// then every rank also holds the whole owner table), with their in-edges
// (CSC: each owned node's sources, ascending, no duplicates), features
// and labels; and the whole graph's train/val/test node lists, which every
// rank needs to cut the same global batches. No rank holds another's edges
// or features.
//
// Made from a loaded Dataset (node_shard) or generated per rank
// (model/data/products.h). Node ids are 32-bit (below 2^31), in-edge
// offsets 64-bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/data/dataset.h"

namespace gnnrt::model {

struct NodeShard {
  std::string name;
  int64_t num_nodes = 0;   // the whole graph's
  int64_t num_features = 0, num_classes = 0;
  int64_t begin = 0, end = 0;    // ranges: owned nodes [begin, end)
  // METIS ownership: each node's rank [N] and this rank's nodes, ascending;
  // both empty for ranges.
  std::vector<int32_t> owner, owned_nodes;
  int rank = 0;
  std::vector<int64_t> indptr{0};  // [owned + 1]
  std::vector<int32_t> indices;    // sources of the owned nodes' in-edges
  std::vector<float> x;            // [owned, F]
  std::vector<int32_t> y;          // [owned]
  std::vector<int32_t> train, val, test;  // the whole graph's split, ascending ids

  bool by_ranges() const { return owner.empty(); }
  int64_t owned() const { return by_ranges() ? end - begin : static_cast<int64_t>(owned_nodes.size()); }
  bool owns(int64_t v) const { return by_ranges() ? v >= begin && v < end : owner[static_cast<size_t>(v)] == rank; }
  // An owned node's row in this shard, and back.
  int64_t local(int64_t v) const {
    return by_ranges() ? v - begin
                       : std::lower_bound(owned_nodes.begin(), owned_nodes.end(), static_cast<int32_t>(v)) -
                             owned_nodes.begin();
  }
  int64_t global(int64_t row) const { return by_ranges() ? begin + row : owned_nodes[static_cast<size_t>(row)]; }
  // The rank that owns node v (of `ranks`).
  int owner_of(int64_t v, int ranks) const;
  int64_t in_degree(int64_t v) const {
    const int64_t r = local(v);
    return indptr[r + 1] - indptr[r];
  }
  std::span<const int32_t> in_neighbors(int64_t v) const {
    const int64_t r = local(v);
    return {indices.data() + indptr[r], static_cast<size_t>(indptr[r + 1] - indptr[r])};
  }
  std::span<const float> features(int64_t v) const {
    return {x.data() + local(v) * num_features, static_cast<size_t>(num_features)};
  }
};

// x [nodes.size(), F]: the features of `nodes` (all owned), in order.
void gather_features(const NodeShard& shard, std::span<const int32_t> nodes, std::vector<float>& x);

// Rank r's range of a graph of n nodes on `ranks` ranks: [n r / R, n (r+1) / R).
int64_t range_begin(int64_t n, int rank, int ranks);
// The rank whose range holds node v.
int owner_of(int64_t v, int64_t n, int ranks);

// Rank `rank`'s shard of a loaded dataset (dense features). undirected: each
// edge in both directions. Self loops and repeated edges are dropped (a
// sampler draws distinct neighbours). `owner`: each node's rank (METIS
// ownership), empty for contiguous ranges. Throws DatasetError for features
// with NaN or Inf, naming the row and column.
NodeShard node_shard(const Dataset& d, int rank, int ranks, bool undirected, std::vector<int32_t> owner = {});

// Each node's rank under METIS ownership: a k-way vertex partition of the
// symmetrised graph balancing nodes and in-edges (model/data/partition.h's
// metis, seeded by `seed`); the same on every rank.
std::vector<int32_t> metis_owners(const Dataset& d, int ranks, uint64_t seed);

}  // namespace gnnrt::model
