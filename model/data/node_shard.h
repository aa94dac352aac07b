// NodeShard: a rank's part of a graph for sampled mini-batch training
// (docs/sampling.md): the nodes it owns, a contiguous range of the
// graph's ids, with their in-edges (CSC: each owned node's sources,
// ascending, no duplicates), features and labels; and the whole graph's
// train/val/test node lists, which every rank needs to cut the same global
// batches. No rank holds another's edges or features.
//
// Made from a loaded Dataset (node_shard) or generated per rank
// (model/data/products.h). Node ids are 32-bit (below 2^31), in-edge
// offsets 64-bit.
#pragma once

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
  int64_t begin = 0, end = 0;    // owned nodes [begin, end)
  std::vector<int64_t> indptr{0};  // [owned + 1]
  std::vector<int32_t> indices;    // sources of the owned nodes' in-edges
  std::vector<float> x;            // [owned, F]
  std::vector<int32_t> y;          // [owned]
  std::vector<int32_t> train, val, test;  // the whole graph's split, ascending ids

  int64_t owned() const { return end - begin; }
  bool owns(int64_t v) const { return v >= begin && v < end; }
  int64_t in_degree(int64_t v) const { return indptr[v - begin + 1] - indptr[v - begin]; }
  std::span<const int32_t> in_neighbors(int64_t v) const {
    return {indices.data() + indptr[v - begin], static_cast<size_t>(in_degree(v))};
  }
  std::span<const float> features(int64_t v) const {
    return {x.data() + (v - begin) * num_features, static_cast<size_t>(num_features)};
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
// sampler draws distinct neighbours). Throws DatasetError for features with
// NaN or Inf, naming the row and column.
NodeShard node_shard(const Dataset& d, int rank, int ranks, bool undirected);

}  // namespace gnnrt::model
