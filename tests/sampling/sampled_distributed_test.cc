// Sampled training over node shards on N ranks (run under mpirun -np N):
// the parameters after 12 steps equal the one-rank run's, every rank takes
// every step when a batch's seeds do not split evenly, the layer-wise
// evaluation over the shards gives the one-rank accuracies, link
// prediction trains to the one-rank parameters too, and no rank holds
// another's edges.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "collectives/communicator.h"
#include "collectives/environment.h"
#include "model/data/dataset.h"
#include "model/data/node_shard.h"
#include "model/data/products.h"
#include "model/job.h"
#include "model/modules/module_graph.h"
#include "model/training/layer_wise.h"
#include "model/training/sampled_batches.h"
#include "model/training/sampled_source.h"
#include "model/training/state_dict.h"
#include "model/training/trainer.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<collectives::Communicator> world() {
  static auto comm = [] {
    spdlog::set_level(spdlog::level::warn);
    collectives::CommunicatorOptions options = collectives::CommunicatorOptions::from_environment();
    options.timeout_seconds = 60;
    return std::make_shared<collectives::Communicator>(collectives::Communicator::world(options));
  }();
  return comm;
}

// 3,000 nodes, 243 training seeds (no validation nodes: the last epoch's
// parameters are written on every rank count); batches of 100: 100, 100, 43,
// the last one split unevenly over 2 or 3 ranks.
constexpr const char* kGraph =
    "products:nodes=3000,edges=30000,features=8,classes=5,train_fraction=0.08,val_fraction=0";

proto::Job job() {
  proto::Job j = parse_job(R"pb(
    model {
      layer { type: SAGE out: 16 }
      layer { type: RELU }
      layer { type: SAGE }
    }
    optimizer { kind: ADAM lr: 0.01 }
    schedule { epochs: 4 }
    sampling { fanout: [4, 3] batch_size: 100 }
    seed: 5
  )pb", "test job");
  j.mutable_dataset()->set_path(kGraph);
  return j;
}

fs::path dir_for(const std::string& what) {
  return fs::path(::testing::TempDir()) /
         ("gnnrt_sampled_np" + std::to_string(world()->size()) + "_" + what + "_rank" +
          std::to_string(world()->rank()));
}

// `j` trained alone (no communicator: every rank runs the one-rank job)
// and over the ranks, each run's parameters in a folder of its own.
struct AloneAndShared {
  TrainResult one, many;
  fs::path one_params, many_params;
};
AloneAndShared train_alone_and_shared(const proto::Job& j, const std::string& what) {
  AloneAndShared r;
  TrainOptions alone;
  alone.progress = false;
  alone.no_cache = true;
  alone.threads = 1;
  alone.params_out = r.one_params = dir_for(what + "alone");
  fs::remove_all(alone.params_out);
  r.one = train(j, alone);
  TrainOptions many = alone;
  many.communicator = world();
  many.params_out = r.many_params = dir_for(what + "many");
  fs::remove_all(many.params_out);
  r.many = train(j, many);
  return r;
}

// The two runs' parameters within 1e-6 + 1e-5 |x|, file by file; `compared`
// counts the files. Use under ASSERT_NO_FATAL_FAILURE.
void expect_same_params(const AloneAndShared& r, int& compared) {
  compared = 0;
  for (const auto& entry : fs::directory_iterator(r.one_params)) {
    const auto a = read_npy(entry.path()).to_vector<double>();
    const auto b = read_npy(r.many_params / entry.path().filename()).to_vector<double>();
    ASSERT_EQ(a.size(), b.size()) << entry.path().filename();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i], a[i], 1e-6 + 1e-5 * std::abs(a[i])) << entry.path().filename() << "[" << i << "]";
    }
    ++compared;
  }
}

// Sampled ahead of the step (prefetch 2: the prefetch thread's exchanges
// on a communicator of their own) and in the step (prefetch 0).
class SampledAhead : public ::testing::TestWithParam<int> {};

TEST_P(SampledAhead, ManyRanksTrainToTheOneRankParameters) {
  ASSERT_TRUE(collectives::mpi_thread_multiple());
  // Ahead even with one core a rank (the default samples in the step there).
  setenv("GNNRT_SAMPLE_AHEAD", "1", 1);
  proto::Job j = job();
  j.mutable_sampling()->set_prefetch(GetParam());
  const AloneAndShared runs = train_alone_and_shared(j, "");
  unsetenv("GNNRT_SAMPLE_AHEAD");  // on every rank, before rank 0 alone goes on
  const TrainResult& one = runs.one;
  const TrainResult& r = runs.many;
  EXPECT_EQ(r.steps, 12);
  EXPECT_EQ(r.steps, one.steps);
  // Every rank took every step (a rank without seeds in the last batch too).
  std::vector<int64_t> steps(static_cast<size_t>(world()->size()));
  world()->allgather<int64_t>(std::vector<int64_t>{r.steps}, steps);
  for (const int64_t s : steps) EXPECT_EQ(s, 12);
  if (world()->rank() != 0) return;
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_same_params(runs, compared));
  EXPECT_EQ(compared, 6);
}

INSTANTIATE_TEST_SUITE_P(Prefetch, SampledAhead, ::testing::Values(2, 0));

// METIS ownership (a loaded graph, here the synthetic SBM with its classes
// spread over the ids): each rank owns a METIS part, not a range; the
// samples and so the parameters are the one-rank run's, and every node is
// owned once.
TEST(SampledDistributed, MetisOwnershipTrainsToTheOneRankParameters) {
  proto::Job j = job();
  j.mutable_dataset()->set_path("synthetic:nodes=2000,classes=5,avg_degree=8,features=8,train_per_class=60,"
                                "num_val=0,num_test=500");
  j.mutable_sampling()->set_ownership(proto::Sampling::METIS);
  j.mutable_schedule()->set_epochs(2);
  const AloneAndShared runs = train_alone_and_shared(j, "metis_");
  const TrainResult& one = runs.one;
  const TrainResult& r = runs.many;
  EXPECT_EQ(r.steps, one.steps);
  EXPECT_EQ(r.steps, 6);  // 300 seeds: 3 batches an epoch

  Dataset d = load_dataset(j.dataset().path());
  const NodeShard mine = node_shard(d, world()->rank(), world()->size(), false,
                                    metis_owners(d, world()->size(), j.seed()));
  std::vector<int64_t> owned(static_cast<size_t>(world()->size()));
  world()->allgather<int64_t>(std::vector<int64_t>{mine.owned()}, owned);
  EXPECT_EQ(std::accumulate(owned.begin(), owned.end(), int64_t{0}), 2000);
  if (world()->size() > 1) {
    EXPECT_FALSE(mine.by_ranges());
    // Not a range: METIS's part is spread over the ids.
    EXPECT_GT(mine.owned_nodes.back() - mine.owned_nodes.front() + 1, mine.owned());
  }
  if (world()->rank() != 0) return;
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_same_params(runs, compared));
  EXPECT_EQ(compared, 6);
}

// Link prediction over node shards: every rank splits the same edges,
// takes its run of each batch's pairs (positives, then negatives) and
// samples its endpoints through their owners; the one-rank parameters.
TEST(SampledDistributed, LinkPredictionTrainsToTheOneRankParameters) {
  proto::Job j = job();
  j.mutable_dataset()->set_path("products:nodes=1000,edges=6000,features=8,classes=5");
  j.mutable_schedule()->set_epochs(2);
  j.mutable_sampling()->set_batch_size(1000);
  apply_override(j, "model.layer[2].out=8");
  // No validation edges: the last epoch's parameters on every rank count.
  apply_override(j, "link.val_fraction=0");
  apply_override(j, "link.test_fraction=0.1");
  apply_override(j, "link.decoder=MLP");
  const AloneAndShared runs = train_alone_and_shared(j, "link_");
  const TrainResult& one = runs.one;
  const TrainResult& r = runs.many;
  EXPECT_EQ(r.steps, one.steps);
  EXPECT_GE(r.steps, 4);
  if (world()->rank() != 0) return;
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_same_params(runs, compared));
  EXPECT_EQ(compared, 10);  // 6 of the encoder, 4 of the MLP decoder
}

// Each epoch's validation and test figures (val_acc, test_acc) of `j`
// trained alone and over the ranks.
using Evaluations = std::vector<std::pair<double, double>>;
std::pair<Evaluations, Evaluations> evaluations_alone_and_shared(const proto::Job& j) {
  Evaluations one, many;
  TrainOptions alone;
  alone.progress = false;
  alone.no_cache = true;
  alone.threads = 1;
  alone.on_epoch = [&](const EpochMetrics& m) { one.emplace_back(m.val_acc, m.test_acc); };
  train(j, alone);
  TrainOptions shared = alone;
  shared.communicator = world();
  shared.on_epoch = [&](const EpochMetrics& m) { many.emplace_back(m.val_acc, m.test_acc); };
  train(j, shared);
  return {one, many};
}

// Layer-wise evaluation over the shards (each rank its nodes, the halo's
// rows from their owners) gives the one-rank accuracies, for GCN (whose
// weights need the halo's degrees) and SAGE.
TEST(SampledDistributed, ShardedEvaluationGivesTheOneRankAccuracies) {
  for (const char* conv : {"GCN", "SAGE"}) {
    proto::Job j = job();
    j.mutable_dataset()->set_path(
        "products:nodes=3000,edges=30000,features=8,classes=5,train_fraction=0.08,val_fraction=0.2");
    j.mutable_schedule()->set_epochs(2);
    // GCN's training on blocks depends on how a batch is split (a source's
    // degree is its block's, docs/sampling.md); a learning rate this small
    // keeps the parameters the same, so only the evaluations are compared.
    j.mutable_optimizer()->set_lr(1e-9);
    apply_override(j, std::string("model.layer[0].type=") + conv);
    apply_override(j, std::string("model.layer[2].type=") + conv);
    const auto [one, many] = evaluations_alone_and_shared(j);
    ASSERT_EQ(one.size(), 2u);
    ASSERT_EQ(many.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_GT(one[e].first, 0.0) << conv;
      // A node's argmax may flip on a last-bit difference: within 1 node.
      EXPECT_NEAR(many[e].first, one[e].first, 1.0 / 600) << conv << " validation, epoch " << e + 1;
      EXPECT_NEAR(many[e].second, one[e].second, 1.0 / 2000) << conv << " test, epoch " << e + 1;
    }
  }
}

// One rank whose core cannot hold the whole graph's evaluation program
// evaluates a layer at a time instead (ShardedLayerWise over a one-rank
// communicator), to the accuracies of the whole program on a core that can,
// and keeps the same best epoch (a learning rate this large makes the
// validation accuracy fall after epoch 3); without a communicator to run
// it on, there is no validation.
TEST(SampledDistributed, OneRankEvaluatesALayerAtATimeWhenTheWholeGraphDoesNotFit) {
  proto::Job j = job();
  j.mutable_dataset()->set_path(
      "products:nodes=3000,edges=30000,features=8,classes=5,train_fraction=0.08,val_fraction=0.2");
  j.mutable_schedule()->set_epochs(5);
  j.mutable_optimizer()->set_lr(1.0);
  std::vector<int64_t> best;
  const auto self = std::make_shared<collectives::Communicator>(*world()->split(world()->rank(), 0));
  const auto evaluations = [&](int64_t hbm_bytes, std::shared_ptr<collectives::Communicator> comm) {
    Evaluations out;
    TrainOptions o;
    o.progress = false;
    o.no_cache = true;
    o.threads = 1;
    o.hbm_bytes = hbm_bytes;
    o.communicator = std::move(comm);
    o.on_epoch = [&](const EpochMetrics& m) { out.emplace_back(m.val_acc, m.test_acc); };
    best.push_back(train(j, o).best_epoch);
    return out;
  };
  // Above the training's and the layer-at-a-time programs' planned peaks,
  // below the whole program's (0.26 and 1.52 against 3.57 MB).
  constexpr int64_t kSmall = 2'500'000;
  const Evaluations whole = evaluations(0, nullptr), none = evaluations(kSmall, nullptr),
                    layers = evaluations(kSmall, self);
  ASSERT_EQ(whole.size(), 5u);
  ASSERT_EQ(none.size(), 5u);
  ASSERT_EQ(layers.size(), 5u);
  EXPECT_LT(best[0], 5) << "the best epoch is the last: the check below cannot fail";
  EXPECT_EQ(best[2], best[0]);
  for (size_t e = 0; e < 5; ++e) {
    EXPECT_GT(whole[e].first, 0.0);
    EXPECT_EQ(none[e].first, 0.0) << "the whole program fits: the test's memory is too large";
    // A node's argmax may flip on a last-bit difference: within 1 node.
    EXPECT_NEAR(layers[e].first, whole[e].first, 1.0 / 600) << "validation, epoch " << e + 1;
    EXPECT_NEAR(layers[e].second, whole[e].second, 1.0 / 2000) << "test, epoch " << e + 1;
  }
}

// The evaluation over the shards gives the one-rank layer-wise inference's
// rows, node for node, with the same parameters: GIN, SAGE (max), GCN and
// GAT split at their aggregation (the halo's columns a block at a time: 4
// blocks at 2 ranks here, 8 at 3; the rest of the layer in 4 row chunks),
// a SAGE whose messages come from a module before it (a messages
// program), a NODE layer norm in a transform's row chunks, GAT before
// GCN, and GAT's blocks as pieces of one head (1 head), whole heads (7
// heads of 2 channels: 2, 2, 2, 1 a block at 2 ranks, 1 at 3) and pieces
// of several (3 heads of 5: 2 pieces a head).
TEST(SampledDistributed, ShardedLayerWiseGivesTheOneRankRows) {
  const auto comm = world();
  const ProductsSpec spec = parse_products_spec("products:nodes=900,edges=9000,features=12,classes=5");
  const NodeShard whole = make_products_shard(spec, 0, 1), mine = make_products_shard(spec, comm->rank(), comm->size());
  for (const char* layers : {"layer { type: GIN out: 16 } layer { type: RELU } layer { type: GIN }",
                             "layer { type: SAGE out: 16 aggr: MAX } layer { type: RELU } layer { type: SAGE }",
                             "layer { type: GCN out: 16 } layer { type: ELU } layer { type: GCN out: 7 }",
                             "layer { type: LINEAR out: 10 } layer { type: SAGE out: 16 } layer { type: RELU } "
                             "layer { type: SAGE }",
                             "layer { type: GAT out: 8 heads: 2 } layer { type: ELU } layer { type: GCN }",
                             "layer { type: GAT out: 16 } layer { type: RELU } layer { type: GAT }",
                             "layer { type: SAGE out: 16 } layer { type: LAYER_NORM mode: NODE } layer { type: GIN }",
                             "layer { type: GAT out: 2 heads: 7 concat: false negative_slope: 0.3 } "
                             "layer { type: ELU } layer { type: GAT heads: 3 bias: false }"}) {
    const proto::Job j = parse_job(std::string("model { ") + layers + " }", "test job");
    const proto::Model model = sampled_model(j.model(), 2, whole.num_classes);
    const std::string last = model.module(model.module_size() - 1).name();
    LayerWise alone(whole, model, sampled_schema(2, whole.num_features, whole.num_classes), 2, {last});
    const Network network = alone.build();
    runtime::Core one(runtime::DeviceProfile::named("trn1"), {}), many(runtime::DeviceProfile::named("trn1"), {});
    initialize_parameters(one, network.params, 7);
    initialize_parameters(many, network.params, 7);
    const runtime::RunContext context{.step = 1, .lr = 0, .seed = 3};
    const Tensor expected = alone.run(one, context).front();
    ShardedLayerWise sharded(mine, model, 2, *comm);
    // The halo in several blocks (ceil(4 * halo / own): values checked by hand).
    EXPECT_EQ(sharded.blocks(), comm->size() == 1 ? 1 : comm->size() == 2 ? 4 : 8) << layers;
    const Tensor got = sharded.run(many, context);
    const int64_t width = expected.shape()[1];
    ASSERT_EQ(got.shape(), (std::vector<int64_t>{mine.owned(), width})) << layers;
    const auto e = expected.values<float>(), g = got.values<float>();
    double largest = 0;
    for (int64_t r = 0; r < mine.owned(); ++r) {
      for (int64_t c = 0; c < width; ++c) {
        const float want = e[static_cast<size_t>(mine.global(r) * width + c)], have = g[static_cast<size_t>(r * width + c)];
        largest = std::max(largest, static_cast<double>(std::abs(want)));
        ASSERT_NEAR(have, want, 1e-5 + 1e-5 * std::abs(want)) << layers << ": node " << mine.global(r) << ", column " << c;
      }
    }
    EXPECT_GT(largest, 1e-3) << layers;  // rows worth comparing
  }
}

// The column blocks of a split layer's aggregation: at most
// ceil(width / blocks) columns; attention's within whole heads or a piece
// of one head (hand-computed).
TEST(SampledDistributed, ColumnBlocksKeepToHeads) {
  using B = ShardedLayerWise::Block;
  const auto blocks = ShardedLayerWise::column_blocks;
  EXPECT_EQ(blocks(10, 0, 4), (std::vector<B>{{0, 3, 0, 0}, {3, 6, 0, 0}, {6, 9, 0, 0}, {9, 10, 0, 0}}));
  EXPECT_EQ(blocks(9, 0, 4), (std::vector<B>{{0, 3, 0, 0}, {3, 6, 0, 0}, {6, 9, 0, 0}}));
  EXPECT_EQ(blocks(2, 0, 4), (std::vector<B>{{0, 1, 0, 0}, {1, 2, 0, 0}}));
  EXPECT_EQ(blocks(14, 7, 4), (std::vector<B>{{0, 4, 0, 2}, {4, 8, 2, 2}, {8, 12, 4, 2}, {12, 14, 6, 1}}));
  EXPECT_EQ(blocks(15, 3, 4), (std::vector<B>{{0, 3, 0, 1}, {3, 5, 0, 1}, {5, 8, 1, 1}, {8, 10, 1, 1},
                                              {10, 13, 2, 1}, {13, 15, 2, 1}}));
  EXPECT_EQ(blocks(16, 1, 4), (std::vector<B>{{0, 4, 0, 1}, {4, 8, 0, 1}, {8, 12, 0, 1}, {12, 16, 0, 1}}));
  EXPECT_EQ(blocks(8, 8, 4), (std::vector<B>{{0, 2, 0, 2}, {2, 4, 2, 2}, {4, 6, 4, 2}, {6, 8, 6, 2}}));
  EXPECT_EQ(blocks(20, 4, 1), (std::vector<B>{{0, 20, 0, 4}}));
}

// Link prediction's evaluation over the shards (each rank its nodes'
// embeddings over the evaluation graph, then its share of the pairs scored
// from their endpoints' rows fetched from the owners): the one-rank AUCs on
// every rank, for the dot decoder on GCN (the halo's degrees) and the MLP
// decoder on SAGE.
TEST(SampledDistributed, ShardedLinkEvaluationGivesTheOneRankAucs) {
  for (const auto& [conv, decoder] : {std::pair{"GCN", "DOT"}, std::pair{"SAGE", "MLP"}}) {
    proto::Job j = job();
    j.mutable_dataset()->set_path("products:nodes=1500,edges=12000,features=8,classes=5");
    j.mutable_schedule()->set_epochs(2);
    j.mutable_sampling()->set_batch_size(1000);
    j.mutable_optimizer()->set_lr(1e-9);  // as above: GCN's training depends on the split
    apply_override(j, "model.layer[2].out=8");
    apply_override(j, std::string("model.layer[0].type=") + conv);
    apply_override(j, std::string("model.layer[2].type=") + conv);
    apply_override(j, "link.val_fraction=0.1");
    apply_override(j, "link.test_fraction=0.1");
    apply_override(j, std::string("link.decoder=") + decoder);
    const auto [one, many] = evaluations_alone_and_shared(j);
    ASSERT_EQ(one.size(), 2u);
    ASSERT_EQ(many.size(), 2u) << conv;
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_GT(one[e].first, 0.5) << conv;
      // A pair's order against another may flip on a last-bit difference.
      EXPECT_NEAR(many[e].first, one[e].first, 1e-5) << conv << " validation AUC, epoch " << e + 1;
      EXPECT_NEAR(many[e].second, one[e].second, 1e-5) << conv << " test AUC, epoch " << e + 1;
    }
  }
}

TEST(SampledDistributed, EachRankHoldsOnlyItsNodesInEdges) {
  const ProductsSpec spec = parse_products_spec(kGraph);
  const NodeShard mine = make_products_shard(spec, world()->rank(), world()->size());
  std::vector<int64_t> counts(static_cast<size_t>(world()->size()));
  world()->allgather<int64_t>(std::vector<int64_t>{static_cast<int64_t>(mine.indices.size())}, counts);
  const NodeShard whole = make_products_shard(spec, 0, 1);
  int64_t total = 0;
  for (const int64_t c : counts) total += c;
  EXPECT_EQ(total, static_cast<int64_t>(whole.indices.size()));
  if (world()->size() > 1) {
    EXPECT_LT(mine.indices.size(), whole.indices.size());
  }
  EXPECT_EQ(mine.x.size(), static_cast<size_t>(mine.owned() * spec.features));
}

}  // namespace
}  // namespace gnnrt::model
