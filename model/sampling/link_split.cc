#include "model/sampling/link_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include "ops/rng.h"

namespace gnnrt::model {
namespace {

constexpr uint64_t kLinkStream = 0x6c696e6b73;  // "links"
enum Draw : uint64_t { kOrder = 1, kValNegatives = 2, kTestNegatives = 3, kTrainNegatives = 4 };

uint64_t pair_key(int64_t u, int64_t v) { return static_cast<uint64_t>(u) << 32 | static_cast<uint32_t>(v); }

// The graph's edges as keys, both directions when undirected.
std::unordered_set<uint64_t> edge_keys(const std::vector<const EdgeList*>& lists, bool undirected) {
  std::unordered_set<uint64_t> keys;
  for (const EdgeList* l : lists) {
    for (int64_t i = 0; i < l->size(); ++i) {
      keys.insert(pair_key(l->src[i], l->dst[i]));
      if (undirected) keys.insert(pair_key(l->dst[i], l->src[i]));
    }
  }
  return keys;
}

// `count` distinct non-edges (u != v), drawn in order of the counter until
// enough are found; `taken` (the edges, and pairs already drawn) grows.
EdgeList draw_negatives(int64_t num_nodes, int64_t count, std::unordered_set<uint64_t>& taken, uint64_t seed,
                        uint64_t what, bool undirected) {
  EdgeList out;
  const auto n = static_cast<uint64_t>(num_nodes);
  for (uint64_t k = 0; out.size() < count; ++k) {
    const ops::RngWords w = ops::philox(seed, kLinkStream, {what, k, 0, 0});
    const auto u = static_cast<int64_t>(ops::below(w[0], n)), v = static_cast<int64_t>(ops::below(w[1], n));
    if (u == v || !taken.insert(pair_key(u, v)).second) continue;
    if (undirected) taken.insert(pair_key(v, u));
    out.src.push_back(static_cast<int32_t>(u));
    out.dst.push_back(static_cast<int32_t>(v));
  }
  return out;
}

void append(EdgeList& to, const EdgeList& from, bool both) {
  to.src.insert(to.src.end(), from.src.begin(), from.src.end());
  to.dst.insert(to.dst.end(), from.dst.begin(), from.dst.end());
  if (both) {
    to.src.insert(to.src.end(), from.dst.begin(), from.dst.end());
    to.dst.insert(to.dst.end(), from.src.begin(), from.src.end());
  }
}

// The non-edges of a graph with `edges` distinct edges (a pair counting
// both directions when undirected).
int64_t non_edges(int64_t num_nodes, int64_t edges, bool undirected) {
  const int64_t pairs = num_nodes * (num_nodes - 1);
  return undirected ? pairs / 2 - edges : pairs - edges;
}

}  // namespace

LinkSplit split_links(int64_t num_nodes, std::span<const int64_t> src, std::span<const int64_t> dst,
                      const LinkSplitOptions& o) {
  const auto fraction = [](double v, const char* field) {
    if (!(v >= 0 && v <= 1)) throw std::invalid_argument(fmt::format("{} = {} is not in [0, 1]", field, v));
  };
  fraction(o.val, "link.val_fraction");
  fraction(o.test, "link.test_fraction");
  fraction(o.disjoint_train_ratio, "link.disjoint_train_ratio");
  if (o.val + o.test > 1) {
    throw std::invalid_argument(fmt::format("link.val_fraction + link.test_fraction = {} + {} is above 1", o.val, o.test));
  }
  if (!(o.negative_ratio >= 0)) {
    throw std::invalid_argument(fmt::format("link.eval_negative_ratio = {} is below 0", o.negative_ratio));
  }
  if (num_nodes >= (int64_t{1} << 31)) throw std::invalid_argument("link prediction: node ids must fit 31 bits");
  // Each edge once: (min, max) when undirected; no loops, no repeats.
  std::vector<uint64_t> keys;
  keys.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    int64_t u = src[i], v = dst[i];
    if (u < 0 || v < 0 || u >= num_nodes || v >= num_nodes) {
      throw std::invalid_argument(fmt::format("edge {} ({} -> {}) has a node outside [0, {})", i, u, v, num_nodes));
    }
    if (u == v) continue;
    if (o.undirected && u > v) std::swap(u, v);
    keys.push_back(pair_key(u, v));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  // Fisher-Yates, draw i keyed by i.
  for (size_t i = keys.size(); i > 1; --i) {
    std::swap(keys[i - 1], keys[ops::below(ops::philox(o.seed, kLinkStream, {kOrder, i, 0, 0})[0], i)]);
  }
  const auto e = static_cast<int64_t>(keys.size());
  const auto num_val = static_cast<int64_t>(std::floor(o.val * static_cast<double>(e)));
  const auto num_test = static_cast<int64_t>(std::floor(o.test * static_cast<double>(e)));
  const int64_t num_train = e - num_val - num_test;
  const auto num_disjoint = static_cast<int64_t>(std::floor(o.disjoint_train_ratio * static_cast<double>(num_train)));
  LinkSplit s;
  s.num_nodes = num_nodes;
  const auto put = [](EdgeList& l, uint64_t k) {
    l.src.push_back(static_cast<int32_t>(k >> 32));
    l.dst.push_back(static_cast<int32_t>(k & 0xFFFFFFFF));
  };
  for (int64_t i = 0; i < e; ++i) {
    put(i < num_train ? s.train : i < num_train + num_val ? s.val : s.test, keys[i]);
  }
  // The first num_disjoint training edges supervise only (out of the
  // training graph); validation passes messages over every training edge,
  // the test over every training and validation edge (PyG's).
  EdgeList passing;
  for (int64_t i = 0; i < num_train; ++i) put(i < num_disjoint ? s.train_supervision : passing, keys[i]);
  if (num_disjoint == 0) s.train_supervision = s.train;
  append(s.train_graph, passing, o.undirected);
  append(s.val_graph, s.train, o.undirected);
  s.test_graph = s.val_graph;
  append(s.test_graph, s.val, o.undirected);
  const auto need = [&](int64_t positives) {
    return static_cast<int64_t>(std::ceil(o.negative_ratio * static_cast<double>(positives)));
  };
  const int64_t negatives = need(num_val) + need(num_test);
  if (negatives > non_edges(num_nodes, e, o.undirected)) {
    throw std::invalid_argument(fmt::format("link.eval_negative_ratio = {} asks for {} evaluation negatives; the graph "
                                            "has only {} non-edges", o.negative_ratio, negatives,
                                            non_edges(num_nodes, e, o.undirected)));
  }
  std::unordered_set<uint64_t> taken = edge_keys({&s.train, &s.val, &s.test}, o.undirected);
  s.val_negatives = draw_negatives(num_nodes, need(num_val), taken, o.seed, kValNegatives, o.undirected);
  s.test_negatives = draw_negatives(num_nodes, need(num_test), taken, o.seed, kTestNegatives, o.undirected);
  return s;
}

EdgeList training_negatives(const LinkSplit& s, int64_t count, uint64_t seed, int64_t epoch, bool undirected) {
  std::unordered_set<uint64_t> taken = edge_keys({&s.train, &s.val, &s.test}, undirected);
  const int64_t edges = s.train.size() + s.val.size() + s.test.size();
  if (count > non_edges(s.num_nodes, edges, undirected)) {
    throw std::invalid_argument(fmt::format("{} training negatives asked for; the graph has only {} non-edges", count,
                                            non_edges(s.num_nodes, edges, undirected)));
  }
  return draw_negatives(s.num_nodes, count, taken, seed, kTrainNegatives + (static_cast<uint64_t>(epoch) << 8),
                        undirected);
}

int64_t link_non_edges(const LinkSplit& s, bool undirected) {
  return non_edges(s.num_nodes, s.train.size() + s.val.size() + s.test.size(), undirected);
}

double link_auc(std::span<const float> positive, std::span<const float> negative) {
  if (positive.empty() || negative.empty()) return 0;
  std::vector<float> neg(negative.begin(), negative.end());
  std::sort(neg.begin(), neg.end());
  double wins = 0;
  for (const float p : positive) {
    const auto below = std::lower_bound(neg.begin(), neg.end(), p) - neg.begin();
    const auto tied = std::upper_bound(neg.begin(), neg.end(), p) - neg.begin() - below;
    wins += static_cast<double>(below) + 0.5 * static_cast<double>(tied);
  }
  return wins / (static_cast<double>(positive.size()) * static_cast<double>(neg.size()));
}

double link_hits(std::span<const float> positive, std::span<const float> negative, int64_t k) {
  if (k < 1) throw std::invalid_argument(fmt::format("Hits@K needs K >= 1, not {}", k));
  if (positive.empty()) return 0;
  if (static_cast<int64_t>(negative.size()) < k) return 1;
  std::vector<float> neg(negative.begin(), negative.end());
  std::nth_element(neg.begin(), neg.begin() + (k - 1), neg.end(), std::greater<>());
  const float kth = neg[static_cast<size_t>(k - 1)];
  int64_t hits = 0;
  for (const float p : positive) hits += p > kth;
  return static_cast<double>(hits) / static_cast<double>(positive.size());
}

double link_mrr(std::span<const float> positive, std::span<const float> negative) {
  if (positive.empty()) return 0;
  std::vector<float> neg(negative.begin(), negative.end());
  std::sort(neg.begin(), neg.end());
  double sum = 0;
  for (const float p : positive) {
    const auto above = neg.end() - std::upper_bound(neg.begin(), neg.end(), p);
    const auto tied = std::upper_bound(neg.begin(), neg.end(), p) - std::lower_bound(neg.begin(), neg.end(), p);
    sum += 1.0 / (1.0 + static_cast<double>(above) + 0.5 * static_cast<double>(tied));
  }
  return sum / static_cast<double>(positive.size());
}

}  // namespace gnnrt::model
