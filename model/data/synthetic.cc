// The synthetic dataset (make_synthetic, docs/file-formats.md): a
// stochastic block model with planted classes, drawn from counter-based
// RNG streams so that any rank generates the same graph.
#include "model/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/data/spec_text.h"
#include "ops/rng.h"

namespace gnnrt::model {
namespace {

// ---------------------------------------------------------------------------
// Synthetic spec

constexpr std::array<SpecKey<SyntheticSpec>, 12> kSpecKeys = {{
    {"nodes", &SyntheticSpec::nodes},
    {"classes", &SyntheticSpec::classes},
    {"avg_degree", &SyntheticSpec::avg_degree},
    {"features", &SyntheticSpec::features},
    {"seed", &SyntheticSpec::seed},
    {"homophily", &SyntheticSpec::homophily},
    {"feature_noise", &SyntheticSpec::feature_noise},
    {"signal", &SyntheticSpec::signal},
    {"train_per_class", &SyntheticSpec::train_per_class},
    {"num_val", &SyntheticSpec::num_val},
    {"num_test", &SyntheticSpec::num_test},
    {"feature_density", &SyntheticSpec::feature_density},
}};

void validate(const SyntheticSpec& s, const std::string& where) {
  const auto require = [&](bool ok, std::string_view key, auto value, std::string_view rule) {
    if (!ok) throw DatasetError(where, fmt::format("{}={} is out of range: {}", key, value, rule));
  };
  require(s.nodes >= 1 && s.nodes < kMaxNodes, "nodes", s.nodes, "1 <= nodes < 2^31");
  require(s.classes >= 1 && s.classes <= s.nodes && s.classes <= kMaxClasses, "classes", s.classes,
          "1 <= classes <= min(nodes, 2^20)");
  // Bounds on the products keep E and x below 2^32 entries: no overflow,
  // and a typo fails here instead of in a multi-GiB allocation.
  require(s.avg_degree >= 0 && s.avg_degree <= (int64_t{1} << 32) / s.nodes, "avg_degree",
          s.avg_degree, "0 <= avg_degree and nodes * avg_degree <= 2^32");
  require(s.features >= 1 && s.features <= (int64_t{1} << 32) / s.nodes, "features", s.features,
          "1 <= features and nodes * features <= 2^32");
  require(s.homophily >= 0.0 && s.homophily <= 1.0, "homophily", s.homophily, "0 <= homophily <= 1");
  require(std::isfinite(s.feature_noise) && s.feature_noise >= 0.0, "feature_noise", s.feature_noise,
          "finite and >= 0");
  require(std::isfinite(s.signal) && s.signal >= 0.0, "signal", s.signal, "finite and >= 0");
  require(s.feature_density >= 0.0 && s.feature_density <= 1.0, "feature_density", s.feature_density,
          "0 <= feature_density <= 1");
  // Below 2^31 each, the split's integer scaling cannot overflow.
  require(s.train_per_class >= 0 && s.train_per_class < kMaxNodes, "train_per_class", s.train_per_class,
          "0 <= train_per_class < 2^31");
  require(s.num_val >= 0 && s.num_val < kMaxNodes, "num_val", s.num_val, "0 <= num_val < 2^31");
  require(s.num_test >= 0 && s.num_test < kMaxNodes, "num_test", s.num_test, "0 <= num_test < 2^31");
}

// ---------------------------------------------------------------------------
// Synthetic generator: random numbers
//
// Every draw comes from ops/rng.h (Philox4x64-10 keyed by (seed, stream) at a
// counter made of the indices it is for (node, slot)), so draws do not
// depend on the order or thread they are made in, and normals are the same
// bits on every machine.

using ops::below;
using ops::normals;
using ops::unit;
enum Stream : uint64_t { kPermutation = 1, kEdges = 2, kClassMeans = 3, kFeatures = 4, kFeatureMask = 5 };

ops::RngWords draw(uint64_t seed, Stream stream, uint64_t a, uint64_t b) {
  return ops::philox(seed, stream, {a, b, 0, 0});
}

// ---------------------------------------------------------------------------
// Synthetic generator: the graph

// Classes are planted through a seeded permutation: the node at position p
// has class p % C and is the (p / C)-th member of its class, so classes are
// balanced (sizes differ by at most one), the k-th member of class c is
// perm[k * C + c], and the first 20 * C positions hold exactly 20 per class.
// (Divisions by C are done once here: the edge loop would otherwise pay
// several 64-bit divisions per edge.)
struct Planting {
  int64_t classes;
  std::vector<int64_t> perm;        // position -> node
  std::vector<int64_t> class_of;    // node -> class
  std::vector<int64_t> rank;        // node -> index among its class's members
  std::vector<int64_t> class_size;  // class -> members

  int64_t member(int64_t c, int64_t k) const { return perm[k * classes + c]; }
};

Planting plant_classes(const SyntheticSpec& s) {
  const int64_t n = s.nodes, classes = s.classes;
  Planting p{classes, std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n),
             std::vector<int64_t>(classes)};
  std::iota(p.perm.begin(), p.perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(p.perm[i], p.perm[below(draw(s.seed, kPermutation, i, 0)[0], i + 1)]);
  }
  for (int64_t i = 0; i < n; ++i) {
    p.class_of[p.perm[i]] = i % classes;
    p.rank[p.perm[i]] = i / classes;
  }
  for (int64_t c = 0; c < classes; ++c) p.class_size[c] = (n - 1 - c) / classes + 1;
  return p;
}

// Node v draws avg_degree / 2 edges (the odd half edge with probability 1/2);
// each stays in v's class with probability homophily (a uniform other member,
// never v itself) and otherwise goes to a uniform member of a uniform other
// class. The union of both directions, without duplicates, is sorted by
// (src, dst): PyG's coalesce order.
void draw_edges(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t n = s.nodes, half = s.avg_degree / 2, slots = half + s.avg_degree % 2;
  std::vector<int32_t> other(n * slots, -1);  // -1: no edge in this slot
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    const int64_t c = p.class_of[v];
    for (int64_t j = 0; j < slots; ++j) {
      const ops::RngWords w = draw(s.seed, kEdges, v, j);
      if (j == half && (w[3] >> 63) == 0) continue;
      int64_t u = -1;
      if (s.classes == 1 || unit(w[0]) < s.homophily) {
        const int64_t size = p.class_size[c];
        if (size < 2) continue;
        int64_t k = static_cast<int64_t>(below(w[2], size - 1));
        if (k >= p.rank[v]) ++k;
        u = p.member(c, k);
      } else {
        const int64_t k = static_cast<int64_t>(below(w[1], s.classes - 1));
        const int64_t c2 = k < c ? k : k + 1;
        u = p.member(c2, static_cast<int64_t>(below(w[2], p.class_size[c2])));
      }
      other[v * slots + j] = static_cast<int32_t>(u);
    }
  }

  // Both directions into per-source rows (a counting sort), then each row
  // sorted and deduplicated on its own: the result does not depend on threads.
  std::vector<int64_t> row_start(n + 1, 0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t u = other[v * slots + j];
      if (u < 0) continue;
      ++row_start[v + 1];
      ++row_start[u + 1];
    }
  }
  std::partial_sum(row_start.begin(), row_start.end(), row_start.begin());
  std::vector<int32_t> adj(row_start[n]);
  std::vector<int64_t> cursor(row_start.begin(), row_start.end() - 1);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t u = other[v * slots + j];
      if (u < 0) continue;
      adj[cursor[v]++] = static_cast<int32_t>(u);
      adj[cursor[u]++] = static_cast<int32_t>(v);
    }
  }
  std::vector<int64_t>().swap(cursor);
  std::vector<int32_t>().swap(other);

  std::vector<int64_t> out_start(n + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    const auto first = adj.begin() + row_start[v], last = adj.begin() + row_start[v + 1];
    std::sort(first, last);
    out_start[v + 1] = std::unique(first, last) - first;
  }
  std::partial_sum(out_start.begin(), out_start.end(), out_start.begin());
  d.src.resize(out_start[n]);
  d.dst.resize(out_start[n]);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t k = 0; k < out_start[v + 1] - out_start[v]; ++k) {
      d.src[out_start[v] + k] = v;
      d.dst[out_start[v] + k] = adj[row_start[v] + k];
    }
  }
}

// x[v] = signal * mean[class(v)] + feature_noise * N(0, I), mean[c] ~ N(0, I);
// with feature_density < 1 each value is kept with that probability, else 0
// (bag-of-words-like sparse features).
void draw_features(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t f = s.features, blocks = (f + 3) / 4;
  std::vector<double> mean(s.classes * f);
  for (int64_t c = 0; c < s.classes; ++c) {
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = normals(draw(s.seed, kClassMeans, c, b));
      for (int64_t t = 0; t < 4 && 4 * b + t < f; ++t) mean[c * f + 4 * b + t] = z[t];
    }
  }
  d.x.resize(s.nodes * f);
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < s.nodes; ++v) {
    const double* m = mean.data() + p.class_of[v] * f;
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = normals(draw(s.seed, kFeatures, v, b));
      const ops::RngWords keep = s.feature_density < 1 ? draw(s.seed, kFeatureMask, v, b) : ops::RngWords{};
      for (int64_t t = 0; t < 4 && 4 * b + t < f; ++t) {
        const int64_t j = 4 * b + t;
        const bool kept = s.feature_density >= 1 || unit(keep[t]) < s.feature_density;
        d.x[v * f + j] = kept ? static_cast<float>(s.signal * m[j] + s.feature_noise * z[t]) : 0.0f;
      }
    }
  }
}

// Planetoid's split over the planted positions: train_per_class of each class
// first, then num_val, then num_test. When they need more than N nodes, all
// three shrink by N / need (at least one training node per class).
void split_nodes(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t n = s.nodes;
  int64_t per_class = s.train_per_class, val = s.num_val, test = s.num_test;
  const int64_t need = per_class * s.classes + val + test;
  if (need > n) {
    per_class = per_class > 0 ? std::max<int64_t>(1, per_class * n / need) : 0;
    val = std::min(val * n / need, n - per_class * s.classes);
    test = std::min(test * n / need, n - per_class * s.classes - val);
  }
  d.train_mask.assign(n, 0);
  d.val_mask.assign(n, 0);
  d.test_mask.assign(n, 0);
  const int64_t train_end = per_class * s.classes, val_end = train_end + val, test_end = val_end + test;
  for (int64_t i = 0; i < test_end; ++i) {
    auto& mask = i < train_end ? d.train_mask : i < val_end ? d.val_mask : d.test_mask;
    mask[p.perm[i]] = 1;
  }
}

}  // namespace

SyntheticSpec parse_synthetic_spec(std::string_view spec) {
  const std::string where = fmt::format("synthetic spec '{}'", spec);
  SyntheticSpec s;
  parse_spec(spec, "synthetic", kSpecKeys, where, s);
  validate(s, where);
  return s;
}

std::string to_string(const SyntheticSpec& spec) { return spec_string("synthetic", kSpecKeys, spec); }

Dataset make_synthetic(const SyntheticSpec& spec) {
  validate(spec, fmt::format("synthetic spec '{}'", to_string(spec)));
  Dataset d;
  d.name = "synthetic";
  d.num_nodes = spec.nodes;
  d.num_features = spec.features;
  d.num_classes = spec.classes;
  const Planting planting = plant_classes(spec);
  d.y = planting.class_of;
  draw_edges(spec, planting, d);
  draw_features(spec, planting, d);
  split_nodes(spec, planting, d);
  return d;
}

}  // namespace gnnrt::model
