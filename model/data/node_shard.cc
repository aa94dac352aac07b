#include "model/data/node_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/data/partition.h"

namespace gnnrt::model {

int64_t range_begin(int64_t n, int rank, int ranks) {
  return static_cast<int64_t>((static_cast<__int128>(n) * rank) / ranks);
}

int owner_of(int64_t v, int64_t n, int ranks) {
  // The largest r with range_begin(n, r) <= v: r = floor(((v + 1) R - 1) / n).
  return static_cast<int>((static_cast<__int128>(v + 1) * ranks - 1) / n);
}

int NodeShard::owner_of(int64_t v, int ranks) const {
  return by_ranges() ? model::owner_of(v, num_nodes, ranks) : owner[static_cast<size_t>(v)];
}

std::vector<int32_t> metis_owners(const Dataset& d, int ranks, uint64_t seed) {
  PartitionOptions o;
  o.method = proto::Partition::METIS;
  o.parts = ranks;
  o.seed = seed;
  return partition_edges(d.num_nodes, d.src, d.dst, o).master;
}

void gather_features(const NodeShard& shard, std::span<const int32_t> nodes, std::vector<float>& x) {
  const int64_t f = shard.num_features, n = static_cast<int64_t>(nodes.size());
  x.resize(static_cast<size_t>(n * f));
  // Rows at random places: prefetch a few ahead, every cache line of the row.
  constexpr int64_t kAhead = 8;
  for (int64_t r = 0; r < n; ++r) {
    if (r + kAhead < n) {
      const char* row = reinterpret_cast<const char*>(shard.features(nodes[r + kAhead]).data());
      for (int64_t b = 0; b < f * 4; b += 64) __builtin_prefetch(row + b);
    }
    const auto row = shard.features(nodes[r]);
    std::copy(row.begin(), row.end(), x.begin() + r * f);
  }
}

NodeShard node_shard(const Dataset& d, int rank, int ranks, bool undirected, std::vector<int32_t> owner) {
  if (d.x_sparse) throw DatasetError(d.name, "sampled training needs dense features (dataset.features: DENSE)");
  NodeShard s;
  s.name = d.name;
  s.num_nodes = d.num_nodes;
  s.num_features = d.num_features;
  s.num_classes = d.num_classes;
  s.rank = rank;
  if (!owner.empty()) {
    if (static_cast<int64_t>(owner.size()) != d.num_nodes) throw std::logic_error("an owner table of another graph");
    s.owner = std::move(owner);
    for (int64_t v = 0; v < d.num_nodes; ++v) {
      if (s.owner[static_cast<size_t>(v)] == rank) s.owned_nodes.push_back(static_cast<int32_t>(v));
    }
  } else {
    s.begin = range_begin(d.num_nodes, rank, ranks);
    s.end = range_begin(d.num_nodes, rank + 1, ranks);
  }
  const int64_t n = s.owned(), f = d.num_features;
  s.x.resize(static_cast<size_t>(n * f));
  s.y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = s.global(i);
    for (int64_t k = 0; k < f; ++k) {
      const float value = d.x[static_cast<size_t>(v * f + k)];
      if (!std::isfinite(value)) {
        throw DatasetError(d.name, fmt::format("feature x[{}, {}] is {}: sampled training needs finite features", v,
                                               k, value));
      }
      s.x[static_cast<size_t>(i * f + k)] = value;
    }
    s.y[static_cast<size_t>(i)] = static_cast<int32_t>(d.y[static_cast<size_t>(v)]);
  }
  // In-edges of the owned nodes (and out-edges reversed when undirected).
  std::vector<std::vector<int32_t>> in(static_cast<size_t>(n));
  const auto add = [&](int64_t from, int64_t to) {
    if (from != to && s.owns(to)) in[static_cast<size_t>(s.local(to))].push_back(static_cast<int32_t>(from));
  };
  for (int64_t e = 0; e < d.num_edges(); ++e) {
    add(d.src[e], d.dst[e]);
    if (undirected) add(d.dst[e], d.src[e]);
  }
  for (int64_t v = 0; v < n; ++v) {
    auto& list = in[v];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    s.indptr.push_back(s.indptr.back() + static_cast<int64_t>(list.size()));
    s.indices.insert(s.indices.end(), list.begin(), list.end());
  }
  for (int64_t v = 0; v < d.num_nodes; ++v) {
    if (d.train_mask[v]) s.train.push_back(static_cast<int32_t>(v));
    if (d.val_mask[v]) s.val.push_back(static_cast<int32_t>(v));
    if (d.test_mask[v]) s.test.push_back(static_cast<int32_t>(v));
  }
  return s;
}

}  // namespace gnnrt::model
