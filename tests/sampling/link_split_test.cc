// Link prediction's split and metrics: no edge in two splits, no held-out
// edge in a graph it is scored on, no true edge among the negatives, the
// same split every time; AUC, Hits@K and MRR against the numpy reference
// (tests/reference/make_link_golden.py); bad fractions by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "model/data/products.h"
#include "model/sampling/link_split.h"

namespace gnnrt::model {
namespace {

using Pair = std::pair<int32_t, int32_t>;

std::set<Pair> pairs(const EdgeList& l, bool both) {
  std::set<Pair> s;
  for (int64_t i = 0; i < l.size(); ++i) {
    s.insert({l.src[i], l.dst[i]});
    if (both) s.insert({l.dst[i], l.src[i]});
  }
  return s;
}

// A products-like graph's edges (undirected: both directions listed).
void graph(std::vector<int64_t>& src, std::vector<int64_t>& dst, int64_t& n) {
  const NodeShard g = make_products_shard(parse_products_spec("products:nodes=2000,edges=10000,features=4"), 0, 1);
  n = g.num_nodes;
  for (int64_t v = 0; v < n; ++v) {
    for (const int32_t u : g.in_neighbors(v)) {
      src.push_back(u);
      dst.push_back(v);
    }
  }
}

TEST(LinkSplit, SplitsAreDisjointAndHeldOutEdgesStayOutOfTheirGraphs) {
  std::vector<int64_t> src, dst;
  int64_t n = 0;
  graph(src, dst, n);
  for (const double disjoint : {0.0, 0.3}) {
    LinkSplitOptions o;
    o.val = 0.1;
    o.test = 0.2;
    o.disjoint_train_ratio = disjoint;
    o.seed = 4;
    const LinkSplit s = split_links(n, src, dst, o);
    const auto train = pairs(s.train, true), val = pairs(s.val, true), test = pairs(s.test, true);
    EXPECT_EQ(s.train.size() + s.val.size() + s.test.size(), static_cast<int64_t>(src.size() / 2));
    EXPECT_EQ(s.val.size(), static_cast<int64_t>(0.1 * static_cast<double>(src.size() / 2)));
    for (const Pair& p : val) EXPECT_FALSE(train.count(p) || test.count(p)) << "a val edge in another split";
    for (const Pair& p : test) EXPECT_FALSE(train.count(p)) << "a test edge in train";
    const auto train_graph = pairs(s.train_graph, false), test_graph = pairs(s.test_graph, false);
    for (const Pair& p : val) EXPECT_FALSE(train_graph.count(p)) << "a val edge in the training graph";
    for (const Pair& p : test) EXPECT_FALSE(test_graph.count(p)) << "a test edge in the test graph";
    for (const Pair& p : val) EXPECT_TRUE(test_graph.count(p)) << "the test graph lacks a val edge";
    const auto val_graph = pairs(s.val_graph, false);
    for (const Pair& p : val) EXPECT_FALSE(val_graph.count(p)) << "a val edge in the validation graph";
    for (const Pair& p : train) {
      EXPECT_TRUE(val_graph.count(p) && test_graph.count(p)) << "a training edge missing from the val or test graph";
    }
    // Disjoint supervision: those edges are not passed messages over.
    for (const Pair& p : pairs(s.train_supervision, true)) {
      EXPECT_EQ(train_graph.count(p) == 0, disjoint > 0) << "supervision edge and the training graph";
    }
    for (const EdgeList* neg : {&s.val_negatives, &s.test_negatives}) {
      EXPECT_EQ(neg->size(), neg == &s.val_negatives ? s.val.size() : s.test.size());
      for (const Pair& p : pairs(*neg, false)) {
        EXPECT_NE(p.first, p.second);
        EXPECT_FALSE(train.count(p) || val.count(p) || test.count(p)) << "a true edge among the negatives";
      }
    }
    const EdgeList fresh = training_negatives(s, 500, 4, 3, true);
    for (const Pair& p : pairs(fresh, false)) EXPECT_FALSE(train.count(p) || val.count(p) || test.count(p));
    EXPECT_NE(pairs(fresh, false), pairs(training_negatives(s, 500, 4, 4, true), false)) << "the same every epoch";
    // The same split and negatives every time.
    const LinkSplit again = split_links(n, src, dst, o);
    EXPECT_EQ(again.test.src, s.test.src);
    EXPECT_EQ(again.val_negatives.dst, s.val_negatives.dst);
  }
}

TEST(LinkSplit, BadFractionsAndTooManyNegativesAreRefusedByName) {
  const std::vector<int64_t> src{0, 1, 2}, dst{1, 2, 3};
  const auto message = [&](LinkSplitOptions o) {
    try {
      split_links(4, src, dst, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  LinkSplitOptions o;
  o.val = 0.7;
  o.test = 0.6;
  EXPECT_THAT(message(o), ::testing::HasSubstr("link.val_fraction + link.test_fraction = 0.7 + 0.6 is above 1"));
  o = {};
  o.val = -0.1;
  EXPECT_THAT(message(o), ::testing::HasSubstr("link.val_fraction = -0.1"));
  o = {};
  o.val = o.test = 0.34;  // one val and one test edge; 4 nodes have 3 non-edges
  o.negative_ratio = 2;
  EXPECT_THAT(message(o), ::testing::HasSubstr("asks for 4 evaluation negatives; the graph has only 3 non-edges"));
}

TEST(LinkMetrics, EqualTheNumpyReference) {
  std::ifstream in(GNNRT_LINKS_GOLDEN_DIR "/metrics.json");
  ASSERT_TRUE(in);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    const auto pos = c["positive"].get<std::vector<float>>(), neg = c["negative"].get<std::vector<float>>();
    EXPECT_NEAR(link_auc(pos, neg), c["auc"].get<double>(), 1e-12);
    EXPECT_NEAR(link_mrr(pos, neg), c["mrr"].get<double>(), 1e-12);
    for (const auto& [k, v] : c["hits"].items()) {
      EXPECT_NEAR(link_hits(pos, neg, std::stoi(k)), v.get<double>(), 1e-12) << "hits@" << k;
    }
  }
}

}  // namespace
}  // namespace gnnrt::model
