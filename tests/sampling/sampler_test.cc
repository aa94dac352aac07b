// The neighbour sampler against the independent reference's golden file
// (tests/reference/make_sampler_golden.py), the uniformity of its draws,
// its thread-count independence, and the seed batches.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "model/data/products.h"
#include "model/sampling/neighbor_sampler.h"
#include "model/sampling/seed_batches.h"

namespace gnnrt::model {
namespace {

nlohmann::json golden() {
  std::ifstream in(GNNRT_SAMPLING_GOLDEN_DIR "/sampler.json");
  EXPECT_TRUE(in) << "cannot open the sampler golden file";
  return nlohmann::json::parse(in);
}

// The golden graph as one shard holding every node.
NodeShard golden_shard(const nlohmann::json& g) {
  NodeShard s;
  s.num_nodes = g["num_nodes"].get<int64_t>();
  s.begin = 0;
  s.end = s.num_nodes;
  s.indptr = g["indptr"].get<std::vector<int64_t>>();
  s.indices = g["indices"].get<std::vector<int32_t>>();
  return s;
}

TEST(Sampler, EqualsTheReferenceNodeListForNodeList) {
  const nlohmann::json doc = golden();
  const NodeShard shard = golden_shard(doc["graph"]);
  ASSERT_GE(doc["cases"].size(), 7u);
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    SamplerOptions o{c["fanouts"].get<std::vector<int>>(), c["replace"].get<bool>(), c["disjoint"].get<bool>()};
    const SampleKey key{c["key"]["seed"].get<uint64_t>(), c["key"]["epoch"].get<int64_t>(),
                        c["key"]["batch"].get<int64_t>()};
    NeighborSampler sampler(o, shard.num_nodes);
    ShardNeighbors source(shard);
    const auto seeds = c["seeds"].get<std::vector<int32_t>>();
    // Twice: the sampler's reused state must not leak into the next batch.
    for (int round = 0; round < 2; ++round) {
      const SampledBlocks b = sampler.sample(seeds, key, source);
      const auto& e = c["expected"];
      EXPECT_EQ(b.nodes, e["nodes"].get<std::vector<int32_t>>());
      EXPECT_EQ(b.frontier, e["frontier"].get<std::vector<int64_t>>());
      EXPECT_EQ(b.seed_rows, e["seed_rows"].get<std::vector<int32_t>>());
      if (o.disjoint) {
        EXPECT_EQ(b.tree, e["tree"].get<std::vector<int32_t>>());
      }
      ASSERT_EQ(b.blocks.size(), e["blocks"].size());
      for (size_t h = 0; h < b.blocks.size(); ++h) {
        EXPECT_EQ(b.blocks[h].src, e["blocks"][h]["src"].get<std::vector<int32_t>>()) << "hop " << h;
        EXPECT_EQ(b.blocks[h].dst, e["blocks"][h]["dst"].get<std::vector<int32_t>>()) << "hop " << h;
      }
    }
  }
}

TEST(Sampler, SeedOrderEqualsTheReference) {
  const nlohmann::json doc = golden();
  const auto seeds = doc["seed_orders"]["seeds"].get<std::vector<int32_t>>();
  for (const auto& o : doc["seed_orders"]["orders"]) {
    SeedBatches batches(seeds, 4, true, false, o["seed"].get<uint64_t>());
    EXPECT_EQ(batches.order(o["epoch"].get<int64_t>()), o["order"].get<std::vector<int32_t>>());
  }
}

// Every 3-subset of 10 in-edges equally likely (chi-square over the 120
// subsets, 24,000 keys: 200 expected each); with replacement every
// position's draw uniform over the 10.
TEST(Sampler, DrawsAreUniform) {
  std::vector<int32_t> in(10);
  for (int i = 0; i < 10; ++i) in[i] = 100 + i;
  std::map<std::vector<int32_t>, int> subsets;
  std::vector<std::vector<int>> position(3, std::vector<int>(10));
  constexpr int kKeys = 24000;
  for (int k = 0; k < kKeys; ++k) {
    std::vector<int32_t> out;
    draw_in_neighbors(in, 7, 1, 3, false, {42, k / 100, k % 100}, out);
    ASSERT_EQ(out.size(), 3u);
    std::sort(out.begin(), out.end());
    ASSERT_TRUE(std::adjacent_find(out.begin(), out.end()) == out.end()) << "a repeated draw without replacement";
    ++subsets[out];
    out.clear();
    draw_in_neighbors(in, 7, 1, 3, true, {42, k / 100, k % 100}, out);
    for (int p = 0; p < 3; ++p) ++position[p][out[p] - 100];
  }
  ASSERT_EQ(subsets.size(), 120u);
  double chi2 = 0;
  for (const auto& [s, n] : subsets) chi2 += (n - 200.0) * (n - 200.0) / 200.0;
  // 119 degrees of freedom: mean 119, sd 15.4; 200 is beyond p = 1e-6.
  EXPECT_LT(chi2, 200.0);
  for (int p = 0; p < 3; ++p) {
    double c = 0;
    for (const int n : position[p]) c += (n - 2400.0) * (n - 2400.0) / 2400.0;
    EXPECT_LT(c, 40.0) << "position " << p;  // 9 degrees of freedom; 40 is beyond p = 1e-5
  }
}

ProductsSpec small_products() { return parse_products_spec("products:nodes=3000,edges=30000,features=8,classes=5"); }

TEST(Sampler, OneAndTwoThreadsDrawTheSameBits) {
  const NodeShard shard = make_products_shard(small_products(), 0, 1);
  for (const bool replace : {false, true}) {
    SamplerOptions o{{10, 5, -1}, replace, false};
    NeighborSampler a(o, shard.num_nodes), b(o, shard.num_nodes);
    ShardNeighbors one(shard, 1), two(shard, 2);
    std::vector<int32_t> seeds(shard.train.begin(), shard.train.begin() + 64);
    const SampledBlocks x = a.sample(seeds, {1, 0, 0}, one), y = b.sample(seeds, {1, 0, 0}, two);
    EXPECT_EQ(x.nodes, y.nodes);
    for (size_t h = 0; h < 3; ++h) EXPECT_EQ(x.blocks[h].src, y.blocks[h].src);
    EXPECT_GT(x.num_edges(), 1000);
  }
}

// A seed's tree depends on its keys only: sampled alone or beside others,
// its hop-0 draws are the same nodes.
TEST(Sampler, ASeedsDrawsDoNotDependOnItsBatch) {
  const NodeShard shard = make_products_shard(small_products(), 0, 1);
  NeighborSampler s({{4, 3}, false, false}, shard.num_nodes);
  ShardNeighbors source(shard);
  const std::vector<int32_t> many(shard.train.begin(), shard.train.begin() + 50);
  const SampledBlocks all = s.sample(many, {5, 1, 2}, source);
  const int32_t seed = many[17];
  const SampledBlocks alone = s.sample(std::vector<int32_t>{seed}, {5, 1, 2}, source);
  std::set<int32_t> in_batch, by_itself;
  for (size_t k = 0; k < all.blocks[0].dst.size(); ++k) {
    if (all.blocks[0].dst[k] == all.seed_rows[17]) in_batch.insert(all.nodes[all.blocks[0].src[k]]);
  }
  for (const int32_t r : alone.blocks[0].src) by_itself.insert(alone.nodes[r]);
  EXPECT_EQ(in_batch, by_itself);
  EXPECT_FALSE(by_itself.empty());
}

TEST(Sampler, BadFanoutsAndSeedsAreRefusedByName) {
  for (const std::vector<int>& f : {std::vector<int>{}, {3, 0}, {-2}}) {
    try {
      NeighborSampler s({f, false, false}, 10);
      ADD_FAILURE() << "accepted a bad fanout list";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("sampling.fanout"), std::string::npos) << e.what();
    }
  }
  const NodeShard shard = make_products_shard(small_products(), 0, 1);
  NeighborSampler s({{2}, false, false}, shard.num_nodes);
  ShardNeighbors source(shard);
  try {
    s.sample(std::vector<int32_t>{3, 3000}, {}, source);
    ADD_FAILURE() << "accepted a seed out of range";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("seed 3000 (position 1"), std::string::npos) << e.what();
  }
  // The refused batch left no state behind.
  const SampledBlocks b = s.sample(std::vector<int32_t>{3}, {}, source);
  EXPECT_EQ(b.nodes.front(), 3);
}

// A source whose second hop throws (an exchange that timed out): the
// sampler's row map stays clean, so the next batch is the clean one's.
TEST(Sampler, ADrawThatThrowsLeavesNoStateBehind) {
  const NodeShard shard = make_products_shard(small_products(), 0, 1);
  struct Failing : NeighborSource {
    ShardNeighbors inner;
    explicit Failing(const NodeShard& s) : inner(s) {}
    void draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace, const SampleKey& key,
              Draws& out) override {
      if (hop == 1) throw std::runtime_error("exchange timed out");
      inner.draw(nodes, hop, fanout, replace, key, out);
    }
  } failing(shard);
  ShardNeighbors source(shard);
  const std::vector<int32_t> seeds(shard.train.begin(), shard.train.begin() + 20);
  NeighborSampler clean({{5, 5}, false, false}, shard.num_nodes), used({{5, 5}, false, false}, shard.num_nodes);
  EXPECT_THROW(used.sample(seeds, {1, 0, 0}, failing), std::runtime_error);
  const SampledBlocks want = clean.sample(seeds, {1, 0, 0}, source), got = used.sample(seeds, {1, 0, 0}, source);
  EXPECT_EQ(got.nodes, want.nodes);
  EXPECT_EQ(got.blocks[1].src, want.blocks[1].src);
}

TEST(SeedBatches, CutsTheEpochAndRefusesBadSizes) {
  std::vector<int32_t> seeds(10);
  for (int i = 0; i < 10; ++i) seeds[i] = i * 2;
  SeedBatches keep(seeds, 4, false, false, 0), drop(seeds, 4, false, true, 0);
  EXPECT_EQ(keep.batches_per_epoch(), 3);
  EXPECT_EQ(drop.batches_per_epoch(), 2);
  EXPECT_EQ(std::vector<int32_t>(keep.batch(0, 2).begin(), keep.batch(0, 2).end()), (std::vector<int32_t>{16, 18}));
  // Shares of a batch of 2 over 3 ranks: one rank gets none.
  const auto last = keep.batch(0, 2);
  EXPECT_EQ(SeedBatches::share(last, 0, 3).size() + SeedBatches::share(last, 1, 3).size() +
                SeedBatches::share(last, 2, 3).size(),
            2u);
  EXPECT_TRUE(SeedBatches::share(last, 0, 3).empty());
  EXPECT_THROW(SeedBatches(seeds, 0, true, false, 0), std::invalid_argument);
  EXPECT_THROW(SeedBatches({}, 4, true, false, 0), std::invalid_argument);
  // A shuffled epoch is a permutation, another epoch another one.
  SeedBatches shuffled(seeds, 4, true, false, 3);
  auto a = shuffled.order(0), b = shuffled.order(1);
  EXPECT_NE(a, b);
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, seeds);
}

}  // namespace
}  // namespace gnnrt::model
