// The products-like generator: the same graph at any rank count, the
// shape it promises (undirected, no loops or repeats, power-law degrees,
// the split's fractions), and its spec's errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/data/products.h"

namespace gnnrt::model {
namespace {

ProductsSpec spec() { return parse_products_spec("products:nodes=140000,edges=700000,features=12,classes=7"); }

TEST(Products, EveryRankCountGivesTheSameGraph) {
  const NodeShard whole = make_products_shard(spec(), 0, 1);
  for (const int ranks : {2, 3}) {
    std::vector<int64_t> indptr{0};
    std::vector<int32_t> indices;
    std::vector<float> x;
    for (int r = 0; r < ranks; ++r) {
      const NodeShard s = make_products_shard(spec(), r, ranks);
      EXPECT_EQ(s.train, whole.train);
      EXPECT_EQ(s.val, whole.val);
      EXPECT_EQ(s.test, whole.test);
      EXPECT_TRUE(std::equal(s.y.begin(), s.y.end(), whole.y.begin() + s.begin)) << "labels, rank " << r;
      EXPECT_EQ(s.begin, range_begin(whole.num_nodes, r, ranks));
      for (int64_t v = s.begin; v < s.end; ++v) {
        const auto in = s.in_neighbors(v);
        indices.insert(indices.end(), in.begin(), in.end());
        indptr.push_back(static_cast<int64_t>(indices.size()));
        EXPECT_EQ(owner_of(v, whole.num_nodes, ranks), r);
      }
      x.insert(x.end(), s.x.begin(), s.x.end());
    }
    EXPECT_EQ(indptr, whole.indptr) << ranks << " ranks";
    EXPECT_EQ(indices, whole.indices) << ranks << " ranks";
    EXPECT_EQ(x, whole.x) << ranks << " ranks";
  }
}

TEST(Products, UndirectedWithoutLoopsOrRepeatsAndPowerLawDegrees) {
  const NodeShard g = make_products_shard(spec(), 0, 1);
  int64_t max_degree = 0;
  for (int64_t v = 0; v < g.num_nodes; ++v) {
    const auto in = g.in_neighbors(v);
    ASSERT_TRUE(std::is_sorted(in.begin(), in.end()));
    ASSERT_TRUE(std::adjacent_find(in.begin(), in.end()) == in.end()) << "a repeated edge into " << v;
    for (const int32_t u : in) {
      ASSERT_NE(u, v) << "a self loop";
      const auto back = g.in_neighbors(u);
      ASSERT_TRUE(std::binary_search(back.begin(), back.end(), static_cast<int32_t>(v)))
          << u << " -> " << v << " has no reverse";
    }
    max_degree = std::max(max_degree, g.in_degree(v));
  }
  const double mean = static_cast<double>(g.indices.size()) / static_cast<double>(g.num_nodes);
  EXPECT_GT(mean, 9.0);  // 10 drawn per node; repeats between heavy nodes dropped
  EXPECT_LE(mean, 10.0);
  EXPECT_GT(static_cast<double>(max_degree), 20 * mean) << "no heavy tail";
  const double n = static_cast<double>(g.num_nodes);
  EXPECT_NEAR(static_cast<double>(g.train.size()) / n, 0.08, 0.005);
  EXPECT_NEAR(static_cast<double>(g.val.size()) / n, 0.016, 0.003);
  EXPECT_EQ(g.train.size() + g.val.size() + g.test.size(), static_cast<size_t>(g.num_nodes));
}

TEST(Products, SpecErrorsNameTheKey) {
  const auto message = [](const char* s) {
    try {
      parse_products_spec(s);
    } catch (const DatasetError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("products:nodes=1").find("nodes=1 is out of range"), std::string::npos);
  EXPECT_NE(message("products:exponent=2").find("exponent=2"), std::string::npos);
  EXPECT_NE(message("products:train_fraction=0.9,val_fraction=0.2").find("val_fraction=0.2"), std::string::npos);
  EXPECT_NE(message("products:colour=3").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(message("productsx").find("expected products"), std::string::npos);
  EXPECT_EQ(parse_products_spec(to_string(spec())), spec());
}

}  // namespace
}  // namespace gnnrt::model
