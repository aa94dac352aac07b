// The products-like generator: the same graph at any rank count, the
// shape it promises (undirected, no loops or repeats, power-law degrees,
// the split's fractions), and its spec's errors. Node shards written to
// disk and read back (model/data/node_shard_files.h): the same arrays, and
// every wrong one refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "model/data/node_shard_files.h"
#include "model/data/products.h"
#include "model/data/shard_files.h"
#include "runtime/atomic_file.h"
#include "runtime/npy.h"

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

// A loaded graph's shards under both ownerships, written and read back:
// every rank's arrays are the in-memory shard's.
TEST(NodeShardFiles, ReadBackEqualsTheShardsMadeInMemory) {
  Dataset d;
  d.name = "ring";
  d.num_nodes = 50;
  d.num_features = 3;
  d.num_classes = 4;
  for (int64_t v = 0; v < d.num_nodes; ++v) {
    for (const int64_t step : {1, 7}) {
      d.src.push_back(v);
      d.dst.push_back((v + step) % d.num_nodes);
    }
    for (int k = 0; k < 3; ++k) d.x.push_back(static_cast<float>(v * 3 + k) / 7.0f);
    d.y.push_back(v % 4);
    d.train_mask.push_back(v % 3 == 0);
    d.val_mask.push_back(v % 3 == 1);
    d.test_mask.push_back(v % 3 == 2);
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gnnrt_node_shards_" + std::to_string(::getpid()));
  for (const bool metis : {false, true}) {
    proto::Job job;
    job.mutable_dataset()->set_path("ring");
    job.mutable_sampling()->set_undirected(true);
    if (metis) job.mutable_sampling()->set_ownership(proto::Sampling::METIS);
    const int ranks = 3;
    const std::vector<int32_t> owner = metis ? metis_owners(d, ranks, 0) : std::vector<int32_t>{};
    const auto make = [&](int r) { return node_shard(d, r, ranks, true, owner); };
    const proto::ShardManifest m = write_node_shards(dir, job, ranks, make);
    EXPECT_EQ(m.num_edges(), 4 * d.num_nodes);  // each ring edge both ways, no repeats
    for (int r = 0; r < ranks; ++r) {
      const NodeShard want = make(r), got = read_node_shard(dir, r, ranks, job, true);
      EXPECT_EQ(got.name, want.name);
      EXPECT_EQ(got.begin, want.begin);
      EXPECT_EQ(got.end, want.end);
      EXPECT_EQ(got.owner, want.owner);
      EXPECT_EQ(got.owned_nodes, want.owned_nodes);
      EXPECT_EQ(got.indptr, want.indptr);
      EXPECT_EQ(got.indices, want.indices);
      EXPECT_EQ(got.x, want.x);
      EXPECT_EQ(got.y, want.y);
      EXPECT_EQ(got.train, want.train);
      EXPECT_EQ(got.val, want.val);
      EXPECT_EQ(got.test, want.test);
      EXPECT_EQ(got.rank, r);
    }
    // Rank `rank`'s read of `j` on `n` ranks is refused, naming `message`.
    const auto refused = [&](const proto::Job& j, int n, int rank, const std::string& message) {
      try {
        read_node_shard(dir, rank, n, j, true);
        ADD_FAILURE() << "not refused: " << message;
      } catch (const ShardError& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      }
    };
    // Another rank count, direction or ownership: refused by name.
    refused(job, 2, 0, "holds shards for 3 ranks, but the job runs on 2");
    proto::Job directed = job;
    directed.mutable_sampling()->set_undirected(false);
    refused(directed, 3, 0, "was written with sampling.undirected = true, the job has false");
    proto::Job other = job;
    other.mutable_sampling()->set_ownership(metis ? proto::Sampling::RANGES : proto::Sampling::METIS);
    refused(other, 3, 0, metis ? "owns nodes by metis" : "owns nodes by ranges");
    // An array edited with its checksum made to agree: still refused by
    // value, before any row is read out of bounds.
    const auto edit = [&](const char* name, auto change) {
      const auto file = dir / "rank-1" / (std::string(name) + ".npy");
      const Tensor before = read_npy(file);
      const Tensor edited = change(before);
      write_npy(file, edited);
      proto::ShardManifest patched = shard_files::read_manifest(dir, kNodeShardFormat);
      for (auto& a : *patched.mutable_rank(1)->mutable_array()) {
        if (a.name() == name) a.set_xxh64(shard_files::hash_bytes(edited.bytes()));
      }
      write_file_atomically(dir / shard_files::kManifest, shard_files::text_of(patched));
      return before;
    };
    {  // offsets that go down mid-way: row 1 would read past the edges
      const Tensor before = edit("indptr", [](const Tensor& t) {
        std::vector<int64_t> v = t.to_vector<int64_t>();
        v[1] = v.back() + 50;
        return Tensor::from<int64_t>(v, t.shape());
      });
      refused(job, ranks, 1, "rank-1/indptr.npy: row 2 holds");
      edit("indptr", [&](const Tensor&) { return before; });
    }
    // A label out of range, its checksum made to agree.
    if (!metis) {
      edit("y", [](const Tensor& t) {
        std::vector<int32_t> labels = t.to_vector<int32_t>();
        labels[2] = 4;
        return Tensor::from<int32_t>(labels, t.shape());
      });
      refused(job, ranks, 1, "rank-1/y.npy: row 2 holds 4, outside [0, 4)");
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gnnrt::model
