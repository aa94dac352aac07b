// Sparse input features give the dense path's numbers. For every layer type
// that starts with a linear map (GCN, SAGE mean, GAT with concatenated and
// averaged heads, GIN with and without eps, a linear layer), with dropout on
// (input dropout, attention dropout) and off: the gradient of every
// parameter at each of 3 SGD steps (momentum 0.9), the parameters after them and the
// inference logits of the sparse path equal the dense path's within rtol
// 1e-5 of the largest magnitude, and the sparse path gives the same bits on
// 1 and 2 threads (the data large enough that the sparse kernels, spmm and
// the gathers run their parallel paths, the thread tuner off so that every
// op of the 2-thread runs is on both threads). Also: the feature form the job asks for (auto by density,
// forced dense or sparse, refused where the first layer cannot take it),
// normalize_features on the CSR form, and sparse shards.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <omp.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "model/data/dataset.h"
#include "model/data/partition.h"
#include "model/data/shard.h"
#include "model/job.h"
#include "model/modules/network.h"
#include "model/training/halo_plans.h"
#include "model/training/state_dict.h"
#include "model/training/full_graph.h"
#include "runtime/core.h"
#include "runtime/device.h"
#include "runtime/npy.h"
#include "tests/common/compiled_job.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;

// 10% of the feature values non-zero, some negative: about 38,000 stored
// values, so the first layer's product (stored values x width 8 and more)
// and the aggregations of width 8 (2 x 2,400 rows x 8) are above the
// kernels' serial threshold (ops/segment_reduce.h, kParallelWork).
constexpr const char* kData =
    "synthetic:nodes=2400,classes=3,avg_degree=6,features=160,seed=5,feature_density=0.1,"
    "train_per_class=12,num_val=200,num_test=400";

struct ModelCase {
  std::string name, layers;
};

const std::vector<ModelCase>& models() {
  static const std::vector<ModelCase> list = {
      {"gcn", R"(layer { type: DROPOUT p: 0.5 } layer { type: GCN out: 8 } layer { type: RELU }
                 layer { type: DROPOUT p: 0.5 } layer { type: GCN })"},
      {"sage_mean", R"(layer { type: DROPOUT p: 0.3 } layer { type: SAGE out: 8 aggr: MEAN }
                       layer { type: RELU } layer { type: SAGE aggr: MEAN })"},
      // 16 columns: the pair's one walk over both weights (ops/sparse_matmul.h).
      {"sage_mean16", R"(layer { type: DROPOUT p: 0.3 } layer { type: SAGE out: 16 aggr: MEAN }
                         layer { type: RELU } layer { type: SAGE aggr: MEAN })"},
      {"gat_concat", R"(layer { type: DROPOUT p: 0.6 }
                        layer { type: GAT out: 4 heads: 2 attention_dropout: 0.3 }
                        layer { type: ELU } layer { type: GAT heads: 1 concat: false })"},
      {"gat_mean", R"(layer { type: GAT out: 4 heads: 3 concat: false attention_dropout: 0.2 }
                      layer { type: ELU } layer { type: LINEAR })"},
      {"gin_eps", R"(layer { type: DROPOUT p: 0.2 } layer { type: GIN out: 8 hidden: 6 eps: 0.3 }
                     layer { type: RELU } layer { type: GIN })"},
      {"gin", R"(layer { type: DROPOUT p: 0.5 } layer { type: GIN out: 8 } layer { type: RELU }
                 layer { type: GCN })"},
      // eps trained: the same parameter order (the draws) in both forms.
      {"gin_train_eps", R"(layer { type: DROPOUT p: 0.2 } layer { type: GIN out: 8 hidden: 6 eps: 0.3 train_eps: true }
                           layer { type: RELU } layer { type: GIN train_eps: true })"},
      {"linear", R"(layer { type: DROPOUT p: 0.4 } layer { type: LINEAR out: 8 bias: false }
                    layer { type: RELU } layer { type: GCN })"},
  };
  return list;
}

// SGD with momentum, not the default Adam with L2 decay: the parameters after
// a step are then linear in the gradients, so comparing them at rtol 1e-5
// tests the gradients that produced them. Adam amplifies rounding where the
// decayed gradient g + 5e-4 p is near 0 (within a few eps = 1e-8): the
// gradients of both paths agreeing to 1e-10 became weights 2.4e-6 apart.
proto::Job job_for(const ModelCase& m, const std::string& features, bool dropout) {
  proto::Job job = parse_job("dataset { path: \"" + std::string(kData) + "\" } model { " + m.layers +
                                 " } optimizer { kind: SGD momentum: 0.9 } seed: 3",
                             m.name);
  apply_override(job, "dataset.features=" + features);
  if (!dropout) {
    for (auto& l : *job.mutable_model()->mutable_layer()) {
      if (l.type() == proto::Layer::DROPOUT) l.set_p(0);
      l.set_attention_dropout(0);
    }
  }
  validate(job);
  return job;
}

struct StepRun {
  std::map<std::string, std::vector<float>> values;  // "grad <param> <step>", "<param>", "logits"
  bool sparse = false;
  runtime::MemoryPlan plan;  // the train step's
  int64_t nnz = 0, nodes = 0, features = 0;
  double step_flops = 0;     // the cost model's, over the train step
};

// 3 SGD steps and an inference on one core, reading every gradient.
StepRun run_steps(const proto::Job& job, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Dataset data = load_dataset(job.dataset().path());
  prepare_features(data, job);
  runtime::CoreOptions options;
  options.tune_threads = false;  // every op on all threads
  runtime::Core core(runtime::DeviceProfile::named("trn1"), options);
  const testing::CompiledJob compiled = testing::compile_job(core, job, bind_dataset(core, data, job.model()));
  const Network& train_net = compiled.train_net;
  const auto& step = compiled.step;
  const auto& infer = compiled.infer;
  initialize_parameters(core, train_net.params, job.seed());
  StepRun r;
  r.sparse = data.x_sparse.has_value();
  r.plan = step->plan;
  r.nnz = data.x_sparse ? data.x_sparse->nnz() : 0;
  r.nodes = data.num_nodes;
  r.features = data.num_features;
  for (const runtime::Op& op : step->program.ops) r.step_flops += runtime::op_cost(step->program, op).flops;
  for (int s = 1; s <= 3; ++s) {
    core.run(*step, {.step = s, .lr = 0.01, .seed = job.seed()});
    for (size_t i = 0; i < train_net.params.size(); ++i) {
      r.values["grad " + train_net.params[i].name + " " + std::to_string(s)] =
          core.read(*step, step->grads[i]).to_vector<float>();
    }
  }
  for (const ParamDecl& p : train_net.params) r.values[p.name] = core.read(p.name).to_vector<float>();
  core.run(*infer, {.step = 4, .lr = 0, .seed = job.seed()});
  r.values["logits"] = core.read(*infer, kLogits).to_vector<float>();
  omp_set_num_threads(saved);
  return r;
}

// |a - b| <= rtol * max |b| per tensor.
void expect_close(const StepRun& a, const StepRun& b, const std::string& what, double rtol = 1e-5) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  for (const auto& [key, vb] : b.values) {
    const auto& va = a.values.at(key);
    ASSERT_EQ(va.size(), vb.size()) << what << " " << key;
    double scale = 0;
    for (float v : vb) scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (size_t i = 0; i < va.size(); ++i) {
      ASSERT_LE(std::abs(static_cast<double>(va[i]) - vb[i]), rtol * std::max(scale, 1e-30))
          << what << ": " << key << "[" << i << "] = " << va[i] << ", dense " << vb[i];
    }
  }
}

void expect_same_bits(const StepRun& a, const StepRun& b, const std::string& what) {
  for (const auto& [key, vb] : b.values) {
    const auto& va = a.values.at(key);
    ASSERT_EQ(va.size(), vb.size()) << what << " " << key;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << what << ": " << key;
  }
}

class SparseEqualsDense : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(SparseEqualsDense, GradientsParametersLogitsAndThreads) {
  const ModelCase& m = models()[static_cast<size_t>(std::get<0>(GetParam()))];
  const bool dropout = std::get<1>(GetParam());
  const std::string what = m.name + (dropout ? " (dropout on)" : " (dropout off)");
  const StepRun dense = run_steps(job_for(m, "dense", dropout), 1);
  const StepRun sparse = run_steps(job_for(m, "sparse", dropout), 1);
  const StepRun sparse2 = run_steps(job_for(m, "sparse", dropout), 2);
  ASSERT_FALSE(dense.sparse);
  ASSERT_TRUE(sparse.sparse);
  expect_close(sparse, dense, what);
  expect_same_bits(sparse2, sparse, what + ", 2 threads against 1");
}

INSTANTIATE_TEST_SUITE_P(AllLayers, SparseEqualsDense,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(models().size())),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return models()[static_cast<size_t>(std::get<0>(info.param))].name +
                                  (std::get<1>(info.param) ? "_dropout" : "_no_dropout");
                         });

// Wider: 2,500 x 400 features at 5% (50,000 stored values), hidden 24 (a
// register block and a tail).
TEST(SparseEqualsDense, ParallelPathsSameBitsOnOneAndTwoThreads) {
  const std::string data =
      "synthetic:nodes=2500,classes=4,avg_degree=6,features=400,seed=9,feature_density=0.05,"
      "train_per_class=40,num_val=200,num_test=400";
  const ModelCase gcn{"gcn_wide", R"(layer { type: DROPOUT p: 0.5 } layer { type: GCN out: 24 }
                                      layer { type: RELU } layer { type: GCN })"};
  const auto job = [&](const std::string& features) {
    proto::Job j = job_for(gcn, features, true);
    j.mutable_dataset()->set_path(data);
    return j;
  };
  const StepRun dense = run_steps(job("dense"), 1);
  const StepRun sparse = run_steps(job("sparse"), 1);
  const StepRun sparse2 = run_steps(job("sparse"), 2);
  ASSERT_TRUE(sparse.sparse);
  ASSERT_GT(sparse.nnz, 40000);
  expect_close(sparse, dense, "gcn_wide");
  expect_same_bits(sparse2, sparse, "gcn_wide, 2 threads against 1");
}

TEST(FeatureForm, AutoByDensityAndTheFirstLayer) {
  const ModelCase& gcn = models()[0];
  EXPECT_TRUE(run_steps(job_for(gcn, "auto", true), 1).sparse);  // 10% non-zero
  proto::Job dense_data = job_for(gcn, "auto", true);
  apply_override(dense_data, "dataset.sparse_density=0.05");
  EXPECT_FALSE(run_steps(dense_data, 1).sparse);
  // A first layer that cannot take sparse features: auto stays dense.
  proto::Job max = job_for({"sage_max", R"(layer { type: SAGE aggr: MAX })"}, "auto", true);
  Dataset data = load_dataset(kData);
  prepare_features(data, max);
  EXPECT_FALSE(data.x_sparse.has_value());
}

// The memory plan and the cost model see the sparse form: its values and
// pattern (nnz-based) instead of the N x F matrix, and 2 nnz M flops for the
// first layer instead of 2 N F M.
TEST(FeatureForm, MemoryPlanAndCostModelCountStoredValues) {
  const ModelCase& gcn = models()[0];
  const StepRun dense = run_steps(job_for(gcn, "dense", false), 1);
  const StepRun sparse = run_steps(job_for(gcn, "sparse", false), 1);
  const int64_t x_bytes = dense.nodes * dense.features * 4;
  // Resident: x [N, F] against x.values [nnz]; the pattern: 24 bytes per
  // stored value plus row and column pointers, counted with the graphs.
  const auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };  // the plan's alignment
  EXPECT_EQ(dense.plan.persistent_bytes - sparse.plan.persistent_bytes,
            aligned(x_bytes) - aligned(4 * sparse.nnz));
  EXPECT_EQ(sparse.plan.graph_bytes - dense.plan.graph_bytes,
            8 * (sparse.features + sparse.nodes + 2) + 24 * sparse.nnz);
  // Forward and weight gradient of the first layer (hidden 8).
  EXPECT_DOUBLE_EQ(dense.step_flops - sparse.step_flops,
                   2 * 2 * 8 * (static_cast<double>(dense.nodes * dense.features) - sparse.nnz));
}

TEST(FeatureForm, BadChoicesAreRefusedNamingTheField) {
  const auto message = [](const std::string& text) {
    try {
      validate(parse_job(text, "job"));
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"(dataset { features: CSR } model { layer { type: GCN } })"),
            "job: line 1, column 25: Unknown enumeration value of \"CSR\" for field \"features\".");
  EXPECT_EQ(message(R"(dataset { sparse_density: 1.5 } model { layer { type: GCN } })"),
            "job: dataset.sparse_density = 1.5 is not in [0, 1]");
  EXPECT_EQ(message(R"(dataset { features: SPARSE } model { layer { type: SAGE aggr: MAX } })"),
            "job: dataset.features = SPARSE: layer 0 is SAGE with aggr MAX, which does not commute "
            "with its linear map (MEAN does)");
  EXPECT_EQ(message(R"(dataset { features: SPARSE }
                       model { layer { type: DROPOUT } layer { type: RELU } layer { type: GCN } })"),
            "job: dataset.features = SPARSE: layer 1 is RELU, not a layer that starts with a linear "
            "map (GCN, GAT, LINEAR, GIN, SAGE MEAN)");
}

TEST(NormalizeFeatures, SparseFormGivesTheDenseBits) {
  Dataset dense = load_dataset(kData);
  // The synthetic values are signed: shift them so that the minimum is 0
  // and normalisation keeps the zeros.
  for (float& v : dense.x) v = std::abs(v);
  Dataset sparse = dense;
  make_features_sparse(sparse);
  ASSERT_LT(sparse.x_sparse->nnz(), dense.num_nodes * dense.num_features / 5);
  normalize_features(dense);
  normalize_features(sparse);
  ASSERT_TRUE(sparse.x_sparse.has_value());
  const std::vector<float> back = to_dense(*sparse.x_sparse, sparse.num_features);
  EXPECT_EQ(std::memcmp(back.data(), dense.x.data(), back.size() * sizeof(float)), 0);

  // A negative minimum fills every zero: the features turn dense, same bits.
  Dataset signed_dense = load_dataset(kData);
  Dataset signed_sparse = signed_dense;
  make_features_sparse(signed_sparse);
  normalize_features(signed_dense);
  normalize_features(signed_sparse);
  ASSERT_FALSE(signed_sparse.x_sparse.has_value());
  EXPECT_EQ(signed_sparse.x, signed_dense.x);
}

TEST(SparseShards, WrittenReadAndTheSameRows) {
  proto::Job job = job_for(models()[0], "sparse", true);
  Dataset data = load_dataset(kData);
  prepare_features(data, job);
  ASSERT_TRUE(data.x_sparse.has_value());
  const PartitionOptions options = partition_options(job, 3);
  const EdgePartition partition = partition_edges(data.num_nodes, data.src, data.dst, options);
  const fs::path dir = fs::path(::testing::TempDir()) / "gnnrt_sparse_shards";
  const proto::ShardManifest m = write_job_shards(dir, data, partition, options, job);
  EXPECT_EQ(m.features(), "sparse");
  const std::vector<float> x = to_dense(*data.x_sparse, data.num_features);
  for (int r = 0; r < 3; ++r) {
    const Shard s = read_shard(dir, r, 3, job);
    ASSERT_TRUE(s.x_sparse.has_value());
    EXPECT_TRUE(s.x.empty());
    const std::vector<float> local = to_dense(*s.x_sparse, s.num_features);
    for (int64_t i = 0; i < s.num_local(); ++i) {
      const int64_t v = s.global_id[static_cast<size_t>(i)];
      EXPECT_EQ(std::memcmp(&local[static_cast<size_t>(i * s.num_features)],
                            &x[static_cast<size_t>(v * data.num_features)],
                            static_cast<size_t>(s.num_features) * sizeof(float)), 0)
          << "rank " << r << " vertex " << v;
    }
  }
  fs::remove_all(dir);
}

// A shard whose checksums match but whose CSR is wrong (written so by hand,
// or by a buggy writer) is refused by name, never handed to the kernels.
TEST(SparseShards, AnInvalidCsrIsRefusedEvenWithMatchingChecksums) {
  proto::Job job = job_for(models()[0], "sparse", true);
  Dataset data = load_dataset(kData);
  prepare_features(data, job);
  const PartitionOptions options = partition_options(job, 2);
  const EdgePartition partition = partition_edges(data.num_nodes, data.src, data.dst, options);
  const fs::path dir = fs::path(::testing::TempDir()) / "gnnrt_bad_sparse_shards";
  // Rewrites one array of rank 0 and its checksum in the manifest.
  const auto rewrite = [&](const std::string& name, const std::function<void(Tensor&)>& edit) {
    write_job_shards(dir, data, partition, options, job);
    const fs::path file = dir / "rank-0" / (name + ".npy");
    Tensor t = read_npy(file);
    edit(t);
    write_npy(file, t);
    proto::ShardManifest m = read_manifest(dir);
    for (proto::ShardArray& a : *m.mutable_rank(0)->mutable_array()) {
      if (a.name() == name) a.set_xxh64(XXH64(t.bytes().data(), t.bytes().size(), 0));
    }
    std::string text;
    google::protobuf::TextFormat::PrintToString(m, &text);
    std::ofstream(dir / "manifest.pbtxt") << text;
  };
  const auto message = [&] {
    try {
      read_shard(dir, 0, 2, job);
    } catch (const ShardError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  rewrite("x_col", [&](Tensor& t) { t.values<int32_t>()[0] = static_cast<int32_t>(data.num_features); });
  EXPECT_NE(message().find("x_rowptr/x_col are not a valid CSR of the features"), std::string::npos)
      << message();
  rewrite("x_rowptr", [](Tensor& t) { t.values<int64_t>()[1] = -1; });  // going down
  EXPECT_NE(message().find("x_rowptr/x_col are not a valid CSR of the features"), std::string::npos)
      << message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gnnrt::model
