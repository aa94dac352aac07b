// The products-like graph (model/data/products.h).
#include "model/data/products.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "model/data/spec_text.h"
#include "ops/rng.h"

namespace gnnrt::model {
namespace {

constexpr std::array<SpecKey<ProductsSpec>, 11> kKeys = {{
    {"nodes", &ProductsSpec::nodes},
    {"edges", &ProductsSpec::edges},
    {"features", &ProductsSpec::features},
    {"classes", &ProductsSpec::classes},
    {"seed", &ProductsSpec::seed},
    {"homophily", &ProductsSpec::homophily},
    {"exponent", &ProductsSpec::exponent},
    {"max_degree", &ProductsSpec::max_degree},
    {"signal", &ProductsSpec::signal},
    {"train_fraction", &ProductsSpec::train_fraction},
    {"val_fraction", &ProductsSpec::val_fraction},
}};
constexpr std::string_view kPrefix = "products";

void validate(const ProductsSpec& s, const std::string& where) {
  const auto require = [&](bool ok, std::string_view key, auto value, std::string_view rule) {
    if (!ok) throw DatasetError(where, fmt::format("{}={} is out of range: {}", key, value, rule));
  };
  require(s.nodes >= 2 && s.nodes < kMaxNodes, "nodes", s.nodes, "2 <= nodes < 2^31");
  // Each rank's in-edges are indexed by int64; the bound keeps a typo from a
  // multi-TiB allocation.
  require(s.edges >= 0 && s.edges <= (int64_t{1} << 34), "edges", s.edges, "0 <= edges <= 2^34");
  require(s.features >= 1 && s.features <= 4096, "features", s.features, "1 <= features <= 4096");
  require(s.classes >= 1 && s.classes <= std::min<int64_t>(s.nodes, 4096), "classes", s.classes,
          "1 <= classes <= min(nodes, 4096)");
  require(s.homophily >= 0 && s.homophily <= 1, "homophily", s.homophily, "0 <= homophily <= 1");
  require(s.exponent > 2 && s.exponent <= 100, "exponent", s.exponent, "2 < exponent <= 100");
  require(s.max_degree >= 1, "max_degree", s.max_degree, ">= 1");
  require(std::isfinite(s.signal) && s.signal >= 0, "signal", s.signal, "finite and >= 0");
  require(s.train_fraction >= 0 && s.train_fraction <= 1, "train_fraction", s.train_fraction, "in [0, 1]");
  require(s.val_fraction >= 0 && s.train_fraction + s.val_fraction <= 1, "val_fraction", s.val_fraction,
          "in [0, 1 - train_fraction]");
}

// Philox streams; counters are (what, index, ...).
enum Stream : uint64_t { kNode = 0x70726f6401, kMeans, kFeatures, kTileCount, kTileEnds };
constexpr int64_t kChunkBits = 16, kChunk = int64_t{1} << kChunkBits;

struct NodeDraw {
  int32_t cls;
  double theta;
  int split;  // 0 train, 1 val, 2 test
};

// The generator's fixed tables: class probabilities, theta's cap.
struct Tables {
  std::vector<double> class_cum;  // [C]: cumulative class probabilities
  double theta_cap = 0;
};

Tables tables(const ProductsSpec& s) {
  Tables t;
  double sum = 0;
  for (int64_t c = 0; c < s.classes; ++c) {
    sum += std::pow(static_cast<double>(c + 1), -0.9);  // Zipf-like class sizes
    t.class_cum.push_back(sum);
  }
  for (double& v : t.class_cum) v /= sum;
  // theta ~ Pareto(1, exponent - 1) has mean (exponent - 1) / (exponent - 2):
  // a node of theta t expects about avg_degree * t / mean edges.
  const double mean = (s.exponent - 1) / (s.exponent - 2);
  const double avg_degree = 2.0 * static_cast<double>(s.edges) / static_cast<double>(s.nodes);
  t.theta_cap = std::max(1.0, static_cast<double>(s.max_degree) / std::max(avg_degree, 1e-9) * mean);
  return t;
}

NodeDraw node_draw(const ProductsSpec& s, const Tables& t, int64_t v) {
  const ops::RngWords w = ops::philox(s.seed, kNode, {static_cast<uint64_t>(v), 0, 0, 0});
  const double u = ops::unit(w[0]);
  const auto c = std::upper_bound(t.class_cum.begin(), t.class_cum.end() - 1, u) - t.class_cum.begin();
  const double theta = std::min(std::pow(ops::unit_nonzero(w[1]), -1.0 / (s.exponent - 1)), t.theta_cap);
  const double r = ops::unit(w[2]);
  const int split = r < s.train_fraction ? 0 : r < s.train_fraction + s.val_fraction ? 1 : 2;
  return {static_cast<int32_t>(c), theta, split};
}

// One chunk's nodes sorted by class (ascending ids within a class) with the
// running sums of their weights: drawing a node in proportion to theta,
// within the chunk or within one class of it, is a binary search.
struct Chunk {
  int64_t first = 0;
  std::vector<int32_t> node;      // by class
  std::vector<double> cum;        // [n + 1], cum[0] = 0
  std::vector<int32_t> class_at;  // [C + 1]: class c's nodes are node[class_at[c] .. class_at[c+1])
  double total() const { return cum.back(); }
  double class_total(int64_t c) const { return cum[class_at[c + 1]] - cum[class_at[c]]; }
  // The node at weight position `u` in [0, 1) of positions [lo, hi).
  int32_t pick(double u, int32_t lo, int32_t hi) const {
    const double target = cum[lo] + u * (cum[hi] - cum[lo]);
    auto at = std::upper_bound(cum.begin() + lo + 1, cum.begin() + hi + 1, target) - cum.begin() - 1;
    return node[std::clamp<int64_t>(at, lo, hi - 1)];
  }
};

struct Graphwide {
  std::vector<Chunk> chunks;
  std::vector<double> class_total;  // [C]
  double total = 0, class_square_sum = 0;
  std::vector<int32_t> split[3];
};

Graphwide chunk_tables(const ProductsSpec& s, const Tables& t) {
  Graphwide g;
  const int64_t count = (s.nodes + kChunk - 1) / kChunk;
  g.chunks.resize(static_cast<size_t>(count));
  std::vector<std::vector<int32_t>> splits(static_cast<size_t>(count) * 3);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < count; ++k) {
    Chunk& ch = g.chunks[static_cast<size_t>(k)];
    ch.first = k * kChunk;
    const int64_t n = std::min(kChunk, s.nodes - ch.first);
    std::vector<NodeDraw> d(static_cast<size_t>(n));
    ch.class_at.assign(static_cast<size_t>(s.classes) + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      d[i] = node_draw(s, t, ch.first + i);
      ++ch.class_at[d[i].cls + 1];
      splits[static_cast<size_t>(k) * 3 + d[i].split].push_back(static_cast<int32_t>(ch.first + i));
    }
    std::partial_sum(ch.class_at.begin(), ch.class_at.end(), ch.class_at.begin());
    std::vector<int32_t> at(ch.class_at.begin(), ch.class_at.end() - 1);
    ch.node.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ch.node[at[d[i].cls]++] = static_cast<int32_t>(i);
    ch.cum.assign(static_cast<size_t>(n) + 1, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      ch.cum[i + 1] = ch.cum[i] + d[ch.node[i]].theta;
      ch.node[i] += static_cast<int32_t>(ch.first);
    }
  }
  g.class_total.assign(static_cast<size_t>(s.classes), 0.0);
  for (const Chunk& ch : g.chunks) {
    g.total += ch.total();
    for (int64_t c = 0; c < s.classes; ++c) g.class_total[c] += ch.class_total(c);
  }
  for (const double v : g.class_total) g.class_square_sum += v * v;
  for (int k = 0; k < 3; ++k) {
    for (int64_t c = 0; c < count; ++c) {
      const auto& part = splits[static_cast<size_t>(c) * 3 + k];
      g.split[k].insert(g.split[k].end(), part.begin(), part.end());
    }
  }
  return g;
}

// Stochastic rounding of an expected count, keyed by the tile and part.
int64_t tile_count(const ProductsSpec& s, double expected, uint64_t tile, uint64_t part) {
  const double whole = std::floor(expected);
  const ops::RngWords w = ops::philox(s.seed, kTileCount, {tile, part, 0, 0});
  return static_cast<int64_t>(whole) + (ops::unit(w[0]) < expected - whole ? 1 : 0);
}

// The pairs of tile (I, J), I <= J: part 0 draws both ends over the chunks'
// weights; part 1 + c both ends within class c. Appends (u, v) pairs.
void tile_pairs(const ProductsSpec& s, const Graphwide& g, int64_t I, int64_t J, std::vector<int32_t>& out) {
  const Chunk &a = g.chunks[static_cast<size_t>(I)], &b = g.chunks[static_cast<size_t>(J)];
  const double m = static_cast<double>(s.edges), twice = I == J ? 1.0 : 2.0;
  const auto tile = static_cast<uint64_t>(I) * g.chunks.size() + static_cast<uint64_t>(J);
  const auto draw = [&](uint64_t part, int64_t count, int32_t alo, int32_t ahi, int32_t blo, int32_t bhi) {
    for (int64_t k = 0; k < count; ++k) {
      const ops::RngWords w = ops::philox(s.seed, kTileEnds, {tile, part, static_cast<uint64_t>(k), 0});
      out.push_back(a.pick(ops::unit(w[0]), alo, ahi));
      out.push_back(b.pick(ops::unit(w[1]), blo, bhi));
    }
  };
  if (g.total > 0 && s.homophily < 1) {
    const double expected = m * (1 - s.homophily) * twice * a.total() * b.total() / (g.total * g.total);
    draw(0, tile_count(s, expected, tile, 0), 0, static_cast<int32_t>(a.node.size()), 0,
         static_cast<int32_t>(b.node.size()));
  }
  if (g.class_square_sum <= 0 || s.homophily <= 0) return;
  for (int64_t c = 0; c < s.classes; ++c) {
    const double expected = m * s.homophily * twice * a.class_total(c) * b.class_total(c) / g.class_square_sum;
    const auto part = static_cast<uint64_t>(c + 1);
    const int64_t count = tile_count(s, expected, tile, part);
    if (count > 0) draw(part, count, a.class_at[c], a.class_at[c + 1], b.class_at[c], b.class_at[c + 1]);
  }
}

// The owned nodes' in-edges from every tile touching the range, in tile
// order; then each node's sources sorted, without repeats or loops.
void draw_edges(const ProductsSpec& s, const Graphwide& g, NodeShard& shard) {
  const auto chunks = static_cast<int64_t>(g.chunks.size());
  const int64_t lo = shard.begin >> kChunkBits, hi = shard.end == shard.begin ? lo - 1 : (shard.end - 1) >> kChunkBits;
  std::vector<std::pair<int64_t, int64_t>> tiles;
  for (int64_t I = 0; I < chunks; ++I) {
    for (int64_t J = I; J < chunks; ++J) {
      if ((I >= lo && I <= hi) || (J >= lo && J <= hi)) tiles.emplace_back(I, J);
    }
  }
  std::vector<std::vector<int32_t>> pairs(tiles.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t t = 0; t < tiles.size(); ++t) {
    std::vector<int32_t> all;
    tile_pairs(s, g, tiles[t].first, tiles[t].second, all);
    std::vector<int32_t>& mine = pairs[t];  // (dst, src), owned dst only
    for (size_t k = 0; k < all.size(); k += 2) {
      const int32_t u = all[k], v = all[k + 1];
      if (u == v) continue;
      if (shard.owns(v)) mine.insert(mine.end(), {v, u});
      if (shard.owns(u)) mine.insert(mine.end(), {u, v});
    }
  }
  const int64_t n = shard.owned();
  std::vector<int64_t> start(static_cast<size_t>(n) + 1, 0);
  for (const auto& p : pairs) {
    for (size_t k = 0; k < p.size(); k += 2) ++start[p[k] - shard.begin + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<int32_t> src(static_cast<size_t>(start[n]));
  std::vector<int64_t> at(start.begin(), start.end() - 1);
  for (auto& p : pairs) {
    for (size_t k = 0; k < p.size(); k += 2) src[at[p[k] - shard.begin]++] = p[k + 1];
    std::vector<int32_t>().swap(p);
  }
  shard.indptr.assign(static_cast<size_t>(n) + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    const auto first = src.begin() + start[v], last = src.begin() + start[v + 1];
    std::sort(first, last);
    shard.indptr[v + 1] = std::unique(first, last) - first;
  }
  std::partial_sum(shard.indptr.begin(), shard.indptr.end(), shard.indptr.begin());
  shard.indices.resize(static_cast<size_t>(shard.indptr[n]));
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    std::copy_n(src.begin() + start[v], shard.indptr[v + 1] - shard.indptr[v], shard.indices.begin() + shard.indptr[v]);
  }
}

// x[v] = signal * mean[class(v)] + N(0, I); y[v] = class(v).
void draw_features(const ProductsSpec& s, const Tables& t, NodeShard& shard) {
  const int64_t f = s.features, blocks = (f + 3) / 4;
  std::vector<double> mean(static_cast<size_t>(s.classes * f));
  for (int64_t c = 0; c < s.classes; ++c) {
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = ops::normals(ops::philox(s.seed, kMeans, {static_cast<uint64_t>(c), static_cast<uint64_t>(b), 0, 0}));
      for (int64_t k = 0; k < 4 && 4 * b + k < f; ++k) mean[c * f + 4 * b + k] = z[k];
    }
  }
  const int64_t n = shard.owned();
  shard.x.resize(static_cast<size_t>(n * f));
  shard.y.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = shard.begin + i;
    const int32_t c = node_draw(s, t, v).cls;
    shard.y[i] = c;
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = ops::normals(ops::philox(s.seed, kFeatures, {static_cast<uint64_t>(v), static_cast<uint64_t>(b), 0, 0}));
      for (int64_t k = 0; k < 4 && 4 * b + k < f; ++k) {
        shard.x[i * f + 4 * b + k] = static_cast<float>(s.signal * mean[c * f + 4 * b + k] + z[k]);
      }
    }
  }
}

}  // namespace

bool is_products_spec(std::string_view spec) {
  return spec == kPrefix || (spec.starts_with(kPrefix) && spec.size() > kPrefix.size() && spec[kPrefix.size()] == ':');
}

ProductsSpec parse_products_spec(std::string_view spec) {
  const std::string where = fmt::format("products spec '{}'", spec);
  ProductsSpec s;
  parse_spec(spec, kPrefix, kKeys, where, s);
  validate(s, where);
  return s;
}

std::string to_string(const ProductsSpec& spec) { return spec_string(kPrefix, kKeys, spec); }

NodeShard make_products_shard(const ProductsSpec& spec, int rank, int ranks) {
  validate(spec, fmt::format("products spec '{}'", to_string(spec)));
  const Tables t = tables(spec);
  Graphwide g = chunk_tables(spec, t);
  NodeShard shard;
  shard.name = "products";
  shard.num_nodes = spec.nodes;
  shard.num_features = spec.features;
  shard.num_classes = spec.classes;
  shard.begin = range_begin(spec.nodes, rank, ranks);
  shard.end = range_begin(spec.nodes, rank + 1, ranks);
  shard.rank = rank;
  shard.train = std::move(g.split[0]);
  shard.val = std::move(g.split[1]);
  shard.test = std::move(g.split[2]);
  draw_edges(spec, g, shard);
  draw_features(spec, t, shard);
  return shard;
}

}  // namespace gnnrt::model
