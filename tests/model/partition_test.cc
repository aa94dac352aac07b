// Edge partitioners: the vertex-cut invariants for every method and part
// count (checked against replicas recomputed here from the edges), hand-worked
// statistics, METIS finding the one cut of two joined cliques, partition
// quality against random on a community graph, determinism and bad input.
#include "model/data/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "model/data/dataset.h"

namespace gnnrt::model {
namespace {

constexpr PartitionMethod kMethods[] = {proto::Partition::RANDOM, proto::Partition::DESTINATION,
                                        proto::Partition::GRID, proto::Partition::HDRF,
                                        proto::Partition::METIS};

EdgePartition run(const Dataset& d, PartitionMethod method, int parts, uint64_t seed = 0) {
  PartitionOptions options;
  options.method = method;
  options.parts = parts;
  options.seed = seed;
  return partition_edges(d.num_nodes, d.src, d.dst, options);
}

Dataset community_graph(double homophily) {
  SyntheticSpec spec;
  spec.nodes = 1500;
  spec.classes = 6;
  spec.avg_degree = 8;
  spec.features = 1;
  spec.homophily = homophily;
  return make_synthetic(spec);
}

TEST(Partition, VertexCutInvariantsForEveryMethodAndPartCount) {
  Dataset d = community_graph(0.9);
  // Vertices with no edges at all: they still need a master.
  d.num_nodes += 7;
  for (auto method : kMethods) {
    for (int parts : {1, 2, 3, 5, 8}) {
      SCOPED_TRACE(std::string(name(method)) + " parts " + std::to_string(parts));
      const EdgePartition part = run(d, method, parts);
      ASSERT_EQ(part.edge_part.size(), d.src.size());
      ASSERT_EQ(part.master.size(), static_cast<std::size_t>(d.num_nodes));
      std::vector<std::set<int>> expected(d.num_nodes);
      for (std::size_t e = 0; e < d.src.size(); ++e) {
        const int p = part.edge_part[e];
        ASSERT_TRUE(p >= 0 && p < parts) << "edge " << e;
        expected[d.src[e]].insert(p);
        expected[d.dst[e]].insert(p);
        if (method == proto::Partition::DESTINATION) {
          ASSERT_EQ(p, d.dst[e] * parts / d.num_nodes) << "edge " << e;
        }
        if (method == proto::Partition::METIS) {
          ASSERT_EQ(p, part.master[d.dst[e]]) << "edge " << e;
        }
      }
      for (int64_t v = 0; v < d.num_nodes; ++v) {
        const int m = part.master[v];
        ASSERT_TRUE(m >= 0 && m < parts) << "vertex " << v;
        if (method == proto::Partition::RANDOM || method == proto::Partition::HDRF ||
            method == proto::Partition::GRID) {
          // The master is one of the parts that own its edges, if it has any.
          if (!expected[v].empty()) {
            ASSERT_TRUE(expected[v].count(m)) << "vertex " << v;
          }
        }
        expected[v].insert(m);
        const auto got = part.replicas(v);
        ASSERT_EQ(std::vector<int>(got.begin(), got.end()),
                  std::vector<int>(expected[v].begin(), expected[v].end()))
            << "vertex " << v;
      }
      const PartitionStats s = part.stats();
      EXPECT_GE(s.replication_factor, 1.0);
      EXPECT_LE(s.replication_factor, parts);
      // Per part: edges, rows, masters and halo rows add up.
      int64_t edges = 0, rows = 0, masters = 0, halo = 0;
      for (int p = 0; p < parts; ++p) {
        edges += s.part_edges[p];
        rows += s.part_rows[p];
        masters += s.part_masters[p];
        halo += s.part_halo_rows[p];
      }
      EXPECT_EQ(edges, d.num_edges());
      EXPECT_EQ(rows, static_cast<int64_t>(part.replica_parts.size()));
      EXPECT_EQ(masters, d.num_nodes);
      EXPECT_EQ(halo, s.halo_rows);
      if (parts == 1) {
        EXPECT_EQ(s.replication_factor, 1.0);
        EXPECT_EQ(s.halo_rows, 0);
      }
    }
  }
}

// 0 -> 1 -> 2 -> 3 over 2 parts by destination: blocks {0, 1} and {2, 3};
// edge 0->1 in part 0, 1->2 and 2->3 in part 1, so vertex 1 is on both.
TEST(Partition, StatisticsOfASmallPathByHand) {
  const std::vector<int64_t> src{0, 1, 2}, dst{1, 2, 3};
  PartitionOptions options;
  options.method = proto::Partition::DESTINATION;
  options.parts = 2;
  const EdgePartition part = partition_edges(4, src, dst, options);
  EXPECT_EQ(part.edge_part, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(part.master, (std::vector<int32_t>{0, 0, 1, 1}));
  const PartitionStats s = part.stats();
  EXPECT_DOUBLE_EQ(s.replication_factor, 5.0 / 4.0);
  EXPECT_EQ(s.shared_vertices, 1);
  EXPECT_EQ(s.halo_rows, 2);                      // vertex 1: one row each way
  EXPECT_DOUBLE_EQ(s.edge_balance, 2.0 / 1.5);    // edges per part 1, 2
  EXPECT_DOUBLE_EQ(s.vertex_balance, 3.0 / 2.5);  // rows per part 2, 3
}

// Two 20-cliques joined by one edge (both directions): METIS cuts that edge,
// so exactly its two endpoints are shared.
TEST(Partition, MetisCutsTwoCliquesAtTheirBridge) {
  std::vector<int64_t> src, dst;
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 20; ++i) {
      for (int j = 0; j < 20; ++j) {
        if (i != j) {
          src.push_back(20 * c + i);
          dst.push_back(20 * c + j);
        }
      }
    }
  }
  src.insert(src.end(), {5, 27});
  dst.insert(dst.end(), {27, 5});
  PartitionOptions options;
  options.method = proto::Partition::METIS;
  options.parts = 2;
  const PartitionStats s = partition_edges(40, src, dst, options).stats();
  EXPECT_EQ(s.shared_vertices, 2);
  EXPECT_DOUBLE_EQ(s.replication_factor, 42.0 / 40.0);
  EXPECT_LE(s.edge_balance, 1.01);
}

TEST(Partition, MetisAndHdrfReplicateFarLessThanRandomOnACommunityGraph) {
  const Dataset d = community_graph(0.95);
  for (int parts : {2, 4, 8}) {
    SCOPED_TRACE(parts);
    const PartitionStats random = run(d, proto::Partition::RANDOM, parts).stats();
    const PartitionStats hdrf = run(d, proto::Partition::HDRF, parts).stats();
    const PartitionStats metis = run(d, proto::Partition::METIS, parts).stats();
    EXPECT_LT(hdrf.replication_factor, random.replication_factor);
    EXPECT_LT(metis.replication_factor, 0.8 * random.replication_factor);
    EXPECT_LT(metis.halo_rows, random.halo_rows / 2);
    // Balance stays within what their objectives allow.
    EXPECT_LE(hdrf.edge_balance, 1.1);
    EXPECT_LE(metis.vertex_balance, 1.5);  // rows include mirrors; METIS balances masters
  }
}

// METIS balances a part's vertices (the rows of every dense op) and its
// edges (the scatter work) at once. The graph: a dense community (500
// vertices of in-degree 16) beside a sparse one (1500 on a ring, in-degree
// 2): balancing one combined weight (1 + in-degree) would give one part
// about 400 vertices and the other about 1600.
TEST(Partition, MetisBalancesVerticesAndEdgesTogether) {
  Dataset d;
  d.num_nodes = 2000;
  const auto edge = [&](int64_t a, int64_t b) {
    d.src.insert(d.src.end(), {a, b});
    d.dst.insert(d.dst.end(), {b, a});
  };
  for (int64_t i = 0; i < 500; ++i) {
    for (int64_t k = 1; k <= 8; ++k) edge(i, (i + k) % 500);
  }
  for (int64_t j = 500; j < 2000; ++j) edge(j, j + 1 < 2000 ? j + 1 : 500);
  edge(0, 500);
  for (int parts : {2, 4}) {
    SCOPED_TRACE(parts);
    const PartitionStats s = run(d, proto::Partition::METIS, parts).stats();
    const auto [low, high] = std::minmax_element(s.part_masters.begin(), s.part_masters.end());
    EXPECT_LE(*high, 1.05 * d.num_nodes / parts) << "masters " << *low << ".." << *high;
    EXPECT_LE(s.edge_balance, 1.05);
  }
}

// The 2D grid: a vertex's replicas lie in its row and its column of the
// r x c grid, so at most r + c - 1 (about 2 sqrt(p)); its masters are
// balanced.
TEST(Partition, GridBoundsReplicationAndBalancesMasters) {
  const Dataset d = community_graph(0.3);  // mostly random edges: the worst case
  for (auto [parts, bound] : {std::pair{4, 3}, std::pair{6, 4}, std::pair{9, 5}, std::pair{16, 7}}) {
    SCOPED_TRACE(parts);
    const EdgePartition grid = run(d, proto::Partition::GRID, parts);
    for (int64_t v = 0; v < d.num_nodes; ++v) {
      ASSERT_LE(static_cast<int>(grid.replicas(v).size()), bound) << "vertex " << v;
    }
    const PartitionStats s = grid.stats();
    EXPECT_LT(s.replication_factor, run(d, proto::Partition::RANDOM, parts).stats().replication_factor);
    const auto [low, high] = std::minmax_element(s.part_masters.begin(), s.part_masters.end());
    EXPECT_LE(*high - *low, d.num_nodes / parts / 10 + 2) << "masters unbalanced";
  }
}

TEST(Partition, SameInputSameOptionsSamePartition) {
  const Dataset d = community_graph(0.8);
  for (auto method : kMethods) {
    const EdgePartition a = run(d, method, 4, 7), b = run(d, method, 4, 7);
    EXPECT_EQ(a.edge_part, b.edge_part) << name(method);
    EXPECT_EQ(a.master, b.master) << name(method);
  }
  EXPECT_NE(run(d, proto::Partition::RANDOM, 4, 7).edge_part,
            run(d, proto::Partition::RANDOM, 4, 8).edge_part);
}

TEST(Partition, BadInputNamesWhatAndWhere) {
  const std::vector<int64_t> src{0, 1, 5}, dst{1, 2, 0};
  PartitionOptions options;
  options.parts = 2;
  try {
    partition_edges(4, src, dst, options);
    FAIL() << "no error";
  } catch (const PartitionError& e) {
    EXPECT_NE(std::string(e.what()).find("edge 2 (5 -> 0)"), std::string::npos) << e.what();
  }
  options.parts = 0;
  EXPECT_THROW(partition_edges(6, src, dst, options), PartitionError);
  options.parts = 2;
  EXPECT_THROW(partition_edges(6, src, std::vector<int64_t>{1, 2}, options), PartitionError);
  try {
    parse_partition_method("grid3d");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'grid3d'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_partition_method("hdrf"), proto::Partition::HDRF);
  EXPECT_EQ(parse_partition_method("grid"), proto::Partition::GRID);
}

}  // namespace
}  // namespace gnnrt::model
