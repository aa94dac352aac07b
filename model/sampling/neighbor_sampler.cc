#include "model/sampling/neighbor_sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "ops/rng.h"

namespace gnnrt::model {
namespace {

// How many sources node v of in-degree d draws.
int64_t draw_count(int64_t d, int fanout, bool replace) {
  if (d == 0) return 0;
  if (fanout < 0) return d;
  return replace ? fanout : std::min<int64_t>(d, fanout);
}

// Writes node v's draws to out[0 .. draw_count(...)).
void draw_into(std::span<const int32_t> in, int64_t v, int hop, int fanout, bool replace, const SampleKey& key,
               int32_t* out) {
  const auto d = static_cast<int64_t>(in.size());
  if (d == 0) return;
  if (fanout < 0 || (!replace && d <= fanout)) {
    std::copy(in.begin(), in.end(), out);
    return;
  }
  const uint64_t hop_word = static_cast<uint64_t>(hop) << 32;
  ops::RngWords w{};
  const auto word = [&](int m) {
    if (m % 4 == 0) {
      w = ops::philox(key.seed, kSampleStream,
                      {static_cast<uint64_t>(key.epoch), static_cast<uint64_t>(key.batch),
                       hop_word | static_cast<uint64_t>(m / 4), static_cast<uint64_t>(v)});
    }
    return w[m % 4];
  };
  const auto u = static_cast<uint64_t>(d);
  if (replace) {
    for (int m = 0; m < fanout; ++m) out[m] = in[ops::below(word(m), u)];
    return;
  }
  // Floyd's algorithm: for j = d - k .. d - 1 draw t in [0, j]; take t,
  // or j when t is taken. Every k-subset is equally likely.
  constexpr int kScan = 64;  // linear membership scans up to here
  std::vector<int64_t> large;
  int64_t small[kScan];
  int64_t* picked = fanout <= kScan ? small : (large.resize(static_cast<size_t>(fanout)), large.data());
  for (int m = 0; m < fanout; ++m) {
    const int64_t j = d - fanout + m;
    int64_t t = static_cast<int64_t>(ops::below(word(m), static_cast<uint64_t>(j + 1)));
    if (std::find(picked, picked + m, t) != picked + m) t = j;
    picked[m] = t;
    out[m] = in[t];
  }
}

}  // namespace

void check_fanouts(std::span<const int> fanouts, const char* field) {
  if (fanouts.empty()) throw std::invalid_argument(fmt::format("{} is empty: give one fanout per hop", field));
  for (size_t h = 0; h < fanouts.size(); ++h) {
    if (fanouts[h] == 0 || fanouts[h] < -1) {
      throw std::invalid_argument(
          fmt::format("{}[{}] = {}: a fanout is >= 1, or -1 for every in-edge", field, h, fanouts[h]));
    }
  }
}

void draw_in_neighbors(std::span<const int32_t> in, int64_t v, int hop, int fanout, bool replace, const SampleKey& key,
                       std::vector<int32_t>& out) {
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(draw_count(static_cast<int64_t>(in.size()), fanout, replace)));
  draw_into(in, v, hop, fanout, replace, key, out.data() + at);
}

void ShardNeighbors::draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace, const SampleKey& key,
                          Draws& out) {
  const auto n = static_cast<int64_t>(nodes.size());
  out.offsets.resize(static_cast<size_t>(n) + 1);
  out.offsets[0] = 0;
  // The loops below read each node's in-edge offsets and list at random
  // places of the graph: prefetching a few nodes ahead overlaps the misses.
  constexpr int64_t kAhead = 16;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n && shard_.owns(nodes[i + kAhead])) {
      __builtin_prefetch(shard_.indptr.data() + shard_.local(nodes[i + kAhead]));
    }
    const int32_t v = nodes[i];
    if (!shard_.owns(v)) {
      throw std::logic_error(fmt::format("node {} drawn on rank {}'s shard, which does not own it", v, shard_.rank));
    }
    out.offsets[i + 1] = out.offsets[i] + draw_count(shard_.in_degree(v), fanout, replace);
  }
  out.neighbors.resize(static_cast<size_t>(out.offsets[n]));
  // Each node writes its own slots: the result does not depend on threads.
#pragma omp parallel for schedule(dynamic, 256) num_threads(threads_) if (threads_ > 1)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(shard_.in_neighbors(nodes[i + kAhead]).data());
    draw_into(shard_.in_neighbors(nodes[i]), nodes[i], hop, fanout, replace, key, out.neighbors.data() + out.offsets[i]);
  }
}

int64_t SampledBlocks::num_edges() const {
  int64_t e = 0;
  for (const Block& b : blocks) e += static_cast<int64_t>(b.src.size());
  return e;
}

NeighborSampler::NeighborSampler(SamplerOptions options, int64_t num_nodes)
    : options_(std::move(options)), num_nodes_(num_nodes) {
  check_fanouts(options_.fanouts, "sampling.fanout");
  if (!options_.disjoint) row_.assign(static_cast<size_t>(num_nodes), -1);
}

SampledBlocks NeighborSampler::sample(std::span<const int32_t> seeds, const SampleKey& key, NeighborSource& source) {
  SampledBlocks out;
  std::unordered_map<uint64_t, int32_t> tree_rows;  // disjoint: (tree, id) -> row
  const auto row_of = [&](int32_t v, int32_t t) {
    if (options_.disjoint) {
      const auto [it, fresh] = tree_rows.try_emplace(static_cast<uint64_t>(t) << 32 | static_cast<uint32_t>(v),
                                                     static_cast<int32_t>(out.nodes.size()));
      if (fresh) {
        out.nodes.push_back(v);
        out.tree.push_back(t);
      }
      return it->second;
    }
    int32_t& r = row_[static_cast<size_t>(v)];
    if (r < 0) {
      r = static_cast<int32_t>(out.nodes.size());
      out.nodes.push_back(v);
    }
    return r;
  };
  out.seed_rows.reserve(seeds.size());
  for (size_t i = 0; i < seeds.size(); ++i) {
    if (seeds[i] < 0 || seeds[i] >= num_nodes_) {
      reset(out);
      throw std::invalid_argument(
          fmt::format("seed {} (position {} of the batch) is not a node id in [0, {})", seeds[i], i, num_nodes_));
    }
    out.seed_rows.push_back(row_of(seeds[i], static_cast<int32_t>(i)));
  }
  out.frontier.push_back(static_cast<int64_t>(out.nodes.size()));
  // A draw that throws (an exchange that timed out, say) leaves the row map
  // clean for the next batch.
  try {
    hops(out, key, source, row_of);
  } catch (...) {
    reset(out);
    throw;
  }
  reset(out);
  return out;
}

template <typename RowOf>
void NeighborSampler::hops(SampledBlocks& out, const SampleKey& key, NeighborSource& source, RowOf& row_of) {
  for (size_t h = 0; h < options_.fanouts.size(); ++h) {
    const int64_t n = out.frontier[h];
    source.draw(std::span<const int32_t>(out.nodes).first(static_cast<size_t>(n)), static_cast<int>(h),
                options_.fanouts[h], options_.replace, key, draws_);
    Block& b = out.blocks.emplace_back();
    b.src.resize(draws_.neighbors.size());
    b.dst.resize(draws_.neighbors.size());
    const auto drawn = static_cast<int64_t>(draws_.neighbors.size());
    for (int64_t i = 0; i < n; ++i) {
      const int32_t t = options_.disjoint ? out.tree[static_cast<size_t>(i)] : 0;
      for (int64_t k = draws_.offsets[i]; k < draws_.offsets[i + 1]; ++k) {
        // The row map is read at random (a node id each): ahead, as above.
        if (!options_.disjoint && k + 32 < drawn) __builtin_prefetch(row_.data() + draws_.neighbors[k + 32]);
        b.src[k] = row_of(draws_.neighbors[k], t);
        b.dst[k] = static_cast<int32_t>(i);
      }
    }
    out.frontier.push_back(static_cast<int64_t>(out.nodes.size()));
  }
}

void NeighborSampler::reset(const SampledBlocks& out) {
  if (options_.disjoint) return;
  for (const int32_t v : out.nodes) row_[static_cast<size_t>(v)] = -1;
}

}  // namespace gnnrt::model
