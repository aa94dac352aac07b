// Module-graph models over batches of small graphs: equal to the PyTorch
// reference (tests/reference/make_batch_golden.py: PyG-style batching, no
// padding): each epoch's mean loss and the parameters after three epochs;
// the gradients against central differences of the model's own loss;
// padding never changes a result; compiles equal the buckets used and a second run compiles
// nothing; exact resume; the strict parameter loader; bad models and bad
// batch datasets refused with messages naming what and where.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "model/data/batch_dataset.h"
#include "model/data/scenes.h"
#include "model/job.h"
#include "model/modules/module_graph.h"
#include "model/modules/modules.h"
#include "model/training/batch_infer.h"
#include "model/training/batch_source.h"
#include "model/training/trainer.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kGolden = GNNRT_BATCH_GOLDEN_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

proto::Job golden_job(const std::string& name) {
  std::string text = read_text(kGolden / name / "job.pbtxt");
  text.replace(text.find("DATA"), 4, (kGolden / name / "data").string());
  return parse_job(text, name);
}

std::map<std::string, std::vector<float>> read_params(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out[e.path().stem().string()] = read_npy(e.path()).to_vector<float>();
  }
  return out;
}

// |a - b| <= atol + rtol |b| element by element.
void expect_close(const std::map<std::string, std::vector<float>>& got,
                  const std::map<std::string, std::vector<float>>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const auto& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_LE(std::abs(g[i] - w[i]), atol + rtol * std::abs(w[i])) << name << "[" << i << "]";
    }
  }
}

class Batch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) /
           ("gnnrt_batch_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.cache_dir = dir_ / "cache";
    options_.progress = false;
    options_.threads = 1;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  TrainOptions options_;
};

class Golden : public Batch, public ::testing::WithParamInterface<std::string> {};

TEST_P(Golden, EqualsTheTorchReferenceAfterEveryEpoch) {
  const fs::path c = kGolden / GetParam();
  options_.params_in = c / "params_init";
  options_.params_out = dir_ / "out";
  const TrainResult r = train(golden_job(GetParam()), options_);
  const Tensor losses = read_npy(c / "epoch_losses.npy");
  const auto want = losses.to_vector<double>();
  ASSERT_EQ(r.epochs.size(), want.size());
  for (size_t e = 0; e < want.size(); ++e) {
    EXPECT_NEAR(r.epochs[e].loss, want[e], 1e-4 * std::abs(want[e]) + 1e-6) << "epoch " << e + 1;
  }
  expect_close(read_params(dir_ / "out"), read_params(c / "params_final"), 1e-5, 1e-4);
}

// gnnrt infer with the reference's final parameters writes the reference's
// outputs: per graph and per node, in dataset order, padding cut away.
TEST_P(Golden, InferWritesTheReferenceOutputs) {
  const fs::path c = kGolden / GetParam();
  InferOptions o;
  o.params_in = c / "params_final";
  o.out = dir_ / "outputs";
  o.no_cache = true;
  for (const auto& e : fs::directory_iterator(c / "outputs")) o.outputs.push_back(e.path().stem().string());
  std::sort(o.outputs.begin(), o.outputs.end());
  const InferResult r = infer_batches(golden_job(GetParam()), o);
  EXPECT_EQ(r.shapes.size(), o.outputs.size());
  expect_close(read_params(dir_ / "outputs"), read_params(c / "outputs"), 1e-5, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Batch, Golden,
                         ::testing::Values("gin_sum_pool", "hetero", "gcn_gat", "graph_classes", "scene_layers",
                                           "dit", "dit_relational"));

// The whole model's backward against central differences of its own loss,
// independent of torch: every module kind's gradient as the model composes
// it (the op-level checks in tests/ops cover each kernel alone). One batch
// holds every graph, so one SGD step at lr 1 from params_init leaves
// init - final = dL/dθ. For up to 48 keys spread over the state_dict, the
// entry with the largest gradient is probed: (L(θ + h) - L(θ - h)) / 2h
// at h = 1e-3, 3e-4 and 1e-4 (the programs run in float32), one of which
// must agree within 1% + 8 ulp(L) / h.
class FiniteDifferences : public Batch, public ::testing::WithParamInterface<std::string> {};

TEST_P(FiniteDifferences, TheModelsGradientsMatchCentralDifferencesOfItsLoss) {
  const fs::path c = kGolden / GetParam();
  proto::Job job = golden_job(GetParam());
  for (const char* o : {"optimizer.kind=sgd", "optimizer.lr=1", "optimizer.momentum=0", "optimizer.weight_decay=0",
                        "schedule.epochs=1", "batching.batch_size=100000", "batching.shuffle=false"}) {
    apply_override(job, o);
  }
  const fs::path params = dir_ / "params";
  fs::copy(c / "params_init", params);
  options_.params_in = params;
  options_.params_out = dir_ / "out";
  const TrainResult at = train(job, options_);
  ASSERT_EQ(at.steps, 1) << "one batch must hold every graph";
  const double loss = at.epochs.at(0).loss;
  const auto init = read_params(params);
  std::map<std::string, std::vector<float>> grads = read_params(dir_ / "out");
  double largest = 0;
  for (auto& [name, g] : grads) {
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = init.at(name)[i] - g[i];
      largest = std::max(largest, std::abs(static_cast<double>(g[i])));
    }
  }
  ASSERT_GT(largest, 0.0);
  options_.params_out.clear();
  // Keys the model aliases to another parameter load with it (written with
  // its values and gradient, required equal): probed through that
  // parameter, both files changed together as torch's one tensor.
  std::set<std::string> aliases;
  std::multimap<std::string, std::string> alias_of;  // parameter -> its alias keys
  {
    const BatchDataset data = load_batch_dataset(job.dataset().path());
    const BatchSource source(data, job.batching(), job.seed());
    const Network net = build_module_train_step(job.model(), source.schema(), source.buckets().front());
    for (const ParamAlias& a : net.aliases) {
      EXPECT_EQ(grads.at(a.key), grads.at(a.param)) << a.key << " aliases " << a.param;
      aliases.insert(a.key);
      alias_of.emplace(a.param, a.key);
    }
    // Buffers (GIN's eps) are fixed by the job: written, never trained.
    for (const Buffer& b : net.buffers) grads.erase(b.key);
  }
  const auto loss_with = [&](const std::string& name, size_t i, float value) {
    std::vector<std::string> files{name};
    for (auto [it, end] = alias_of.equal_range(name); it != end; ++it) files.push_back(it->second);
    Tensor t = read_npy(c / "params_init" / (name + ".npy"));
    t.values<float>()[i] = value;
    for (const std::string& f : files) write_npy(params / (f + ".npy"), t);
    const double l = train(job, options_).epochs.at(0).loss;
    for (const std::string& f : files) {
      fs::copy_file(c / "params_init" / (f + ".npy"), params / (f + ".npy"), fs::copy_options::overwrite_existing);
    }
    return l;
  };
  std::vector<std::string> keys;
  for (const auto& [name, g] : grads) {
    if (!aliases.count(name) && !g.empty()) keys.push_back(name);
  }
  const size_t stride = std::max<size_t>(1, keys.size() / 48);
  size_t probed = 0;
  for (size_t k = 0; k < keys.size(); k += stride) {
    const std::string& name = keys[k];
    const auto& g = grads.at(name);
    size_t i = 0;
    for (size_t j = 1; j < g.size(); ++j) {
      if (std::abs(g[j]) > std::abs(g[i])) i = j;
    }
    const float x = init.at(name)[i];
    // The smallest step the loss's rounding allows wins: ReLU kinks within
    // h of a row bend the larger steps' slopes (seen as a few % on biases
    // that move every row); the loss's float32 rounding (one ulp of L)
    // bends the smaller steps' by ulp(L) / h.
    const double ulp = std::ldexp(1.0, std::ilogb(loss) - 23);
    std::string seen;
    bool agrees = false;
    for (const float h : {1e-3F, 3e-4F, 1e-4F}) {
      const float up = x + h, down = x - h;  // the steps as float32 holds them
      const double numeric = (loss_with(name, i, up) - loss_with(name, i, down)) / (double{up} - double{down});
      agrees = agrees || std::abs(numeric - g[i]) <= 1e-2 * std::abs(g[i]) + 8 * ulp / static_cast<double>(h);
      seen += fmt::format(" {:.6g} (h {:g})", numeric, h);
    }
    EXPECT_TRUE(agrees) << name << "[" << i << "]: gradient " << g[i] << ", central differences" << seen
                        << "; loss " << loss;
    ++probed;
  }
  EXPECT_GE(probed, std::min<size_t>(keys.size(), 24));
}

INSTANTIATE_TEST_SUITE_P(Batch, FiniteDifferences,
                         ::testing::Values("gin_sum_pool", "hetero", "gcn_gat", "graph_classes", "scene_layers",
                                           "dit", "dit_relational", "scene_encoder"));

// The registry against job.proto's descriptor: each field of Module's oneof
// `kind` looks up the row of its name (a row under another field number, or
// a kind without a row, fails here: the registry's own check throws, or
// the names differ).
TEST(ModuleKinds, EveryFieldOfTheOneofHasTheRowOfItsName) {
  const google::protobuf::OneofDescriptor* oneof = proto::Module::descriptor()->FindOneofByName("kind");
  ASSERT_NE(oneof, nullptr);
  for (int i = 0; i < oneof->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = oneof->field(i);
    proto::Module m;
    m.set_name("m");
    m.GetReflection()->MutableMessage(&m, f);
    EXPECT_EQ(std::string(module_kind(m).name), f->name()) << "field " << f->number();
  }
  EXPECT_THROW(module_kind(proto::Module()), std::invalid_argument);
}

// One bucket far larger than any batch against the derived ladder: the
// same parameters (padding reaches no real row, output or gradient).
TEST_F(Batch, PaddedEqualsUnpadded) {
  for (const std::string name :
       {"gin_sum_pool", "hetero", "gcn_gat", "graph_classes", "scene_layers", "dit", "dit_relational",
        "scene_encoder"}) {
    SCOPED_TRACE(name);
    const fs::path c = kGolden / name;
    options_.params_in = c / "params_init";
    options_.params_out = dir_ / (name + "_ladder");
    proto::Job job = golden_job(name);
    // The encoder by 10 SGD steps: its Adam steps turn gradients that are
    // float32 rounding (of sums taken in another order) into steps of lr.
    if (name == "scene_encoder") {
      for (const char* o : {"schedule.epochs=10", "optimizer.kind=sgd", "optimizer.lr=0.001"}) apply_override(job, o);
    }
    const TrainResult ladder = train(job, options_);
    auto* bucket = job.mutable_batching()->add_bucket();
    const BatchDataset data = load_batch_folder(c / "data");
    for (const auto& n : data.node_sets) {
      auto* s = bucket->add_size();
      s->set_set(n.name);
      s->set_rows(n.rows() * 2 + 5);
    }
    for (const auto& e : data.edge_sets) {
      auto* s = bucket->add_size();
      s->set_set(e.name);
      s->set_rows(e.count() * 2 + 7);
    }
    options_.params_out = dir_ / (name + "_padded");
    const TrainResult padded = train(job, options_);
    EXPECT_EQ(padded.buckets_used, 1);
    EXPECT_GT(padded.padding_rows_percent, 50);
    expect_close(read_params(dir_ / (name + "_padded")), read_params(dir_ / (name + "_ladder")), 1e-6, 1e-5);
    for (size_t e = 0; e < ladder.epochs.size(); ++e) {
      EXPECT_NEAR(padded.epochs[e].loss, ladder.epochs[e].loss, 1e-5 * std::abs(ladder.epochs[e].loss));
    }
  }
}

proto::Job molecules_job() {
  return parse_job(R"pb(
    dataset { path: "molecules:graphs=300,seed=3" }
    model {
      module { name: "conv1" input: "atom.x" gin { edges: "bond" out: 32 } }
      module { name: "act1" input: "conv1" relu {} }
      module { name: "conv2" input: "act1" gin { edges: "bond" out: 32 } }
      module { name: "pool" input: "conv2" pool { reduce: SUM } }
      module { name: "head" input: "pool" mlp { hidden: 32 out: 1 } }
      loss_term { input: "head" target: "graph.y" }
    }
    optimizer { lr: 0.003 weight_decay: 0 }
    schedule { epochs: 3 }
    batching { batch_size: 32 }
    seed: 5
  )pb", "molecules job");
}

TEST_F(Batch, CompilesEqualBucketsUsedAndASecondRunCompilesNothing) {
  proto::Job job = molecules_job();
  const TrainResult first = train(job, options_);
  EXPECT_GE(first.buckets_used, 1);
  EXPECT_EQ(first.counters.compiles, first.buckets_used);
  EXPECT_EQ(first.steps, 3 * 10);  // 300 graphs in batches of 32: 9 full and one of 12
  EXPECT_LE(first.padding_rows_percent, 25);
  EXPECT_LE(first.padding_edges_percent, 25);
  const TrainResult second = train(job, options_);
  EXPECT_EQ(second.counters.compiles, 0);
  EXPECT_EQ(second.counters.cache_hits, first.buckets_used);
  apply_override(job, "optimizer.lr=0.001");
  apply_override(job, "schedule.lr_schedule=cosine");
  apply_override(job, "schedule.epochs=4");
  EXPECT_EQ(train(job, options_).counters.compiles, 0);
}

// The synthetic target depends on structure (rings, bonds between atoms of
// equal type): GIN learns it; an MLP over the pooled atom features (the
// type counts, all a structure-blind model sees) trained alike does not.
// Both are judged on graphs they never saw (another seed): on the 300
// training graphs an MLP can memorise each graph by its counts.
TEST_F(Batch, LearnsTheStructuralTargetWhichAnMlpCannot) {
  proto::Job job = molecules_job();
  apply_override(job, "dataset.path=molecules:graphs=1000,seed=3");
  apply_override(job, "schedule.epochs=30");
  const auto held_out = [&](const proto::Job& trained) {
    InferOptions o;
    o.params_in = options_.params_out;
    o.out = dir_ / "held_out";
    o.no_cache = true;
    proto::Job other = trained;
    apply_override(other, "dataset.path=molecules:graphs=300,seed=4");
    return infer_batches(other, o).term_losses.at(0);
  };
  options_.params_out = dir_ / "gin";
  const TrainResult gin = train(job, options_);
  EXPECT_LT(gin.epochs.back().loss, 0.5 * gin.epochs.front().loss);
  const double gin_loss = held_out(job);
  auto* model = job.mutable_model();
  model->clear_module();
  auto* pool = model->add_module();
  pool->set_name("pool");
  pool->add_input("atom.x");
  pool->mutable_pool()->set_reduce(proto::PoolModule::SUM);
  auto* head = model->add_module();
  head->set_name("head");
  head->add_input("pool");
  head->mutable_mlp()->add_hidden(32);
  head->mutable_mlp()->add_hidden(32);
  head->mutable_mlp()->set_out(1);
  options_.params_out = dir_ / "mlp";
  train(job, options_);
  const double mlp_loss = held_out(job);
  std::printf("held-out loss: GIN %.4f, MLP over pooled features %.4f\n", gin_loss, mlp_loss);
  EXPECT_LT(gin_loss, 0.75 * mlp_loss);
}

TEST_F(Batch, ResumeEqualsTheUninterruptedRunBitwise) {
  proto::Job job = molecules_job();
  apply_override(job, "schedule.epochs=4");
  options_.params_out = dir_ / "straight";
  train(job, options_);
  apply_override(job, "checkpoint.dir=" + (dir_ / "ckpt").string());
  apply_override(job, "schedule.epochs=2");
  options_.params_out.clear();
  train(job, options_);
  apply_override(job, "schedule.epochs=4");
  options_.params_out = dir_ / "resumed";
  const TrainResult r = train(job, options_);
  EXPECT_EQ(r.start_epoch, 2);
  EXPECT_EQ(r.steps, 40);
  const auto a = read_params(dir_ / "straight"), b = read_params(dir_ / "resumed");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, v] : a) EXPECT_EQ(v, b.at(name)) << name;
}

// Stopped mid-epoch (the newest checkpoint at step 14 of 10-step epochs),
// under a per-step cosine schedule with warm-up: the resumed run ends with
// the uninterrupted parameters and epoch losses, bit for bit.
TEST_F(Batch, ResumeMidEpochEqualsTheUninterruptedRunBitwise) {
  proto::Job job = molecules_job();
  apply_override(job, "schedule.per_step=true");
  apply_override(job, "schedule.lr_schedule=cosine");
  apply_override(job, "schedule.warmup_epochs=4");
  options_.params_out = dir_ / "straight";
  const TrainResult straight = train(job, options_);
  apply_override(job, "checkpoint.dir=" + (dir_ / "ckpt").string());
  apply_override(job, "checkpoint.every_steps=7");
  apply_override(job, "checkpoint.keep=10");
  options_.params_out.clear();
  train(job, options_);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "ckpt")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ::testing::ElementsAre("ckpt-00000007.ckpt", "ckpt-00000014.ckpt", "ckpt-00000021.ckpt",
                                            "ckpt-00000028.ckpt", "ckpt-00000030.ckpt"));
  for (const char* later : {"ckpt-00000021.ckpt", "ckpt-00000028.ckpt", "ckpt-00000030.ckpt"}) {
    fs::remove(dir_ / "ckpt" / later);
  }
  options_.params_out = dir_ / "resumed";
  const TrainResult resumed = train(job, options_);
  EXPECT_EQ(resumed.start_epoch, 1);
  EXPECT_EQ(resumed.steps, 30);
  ASSERT_EQ(resumed.epochs.size(), 2u);
  EXPECT_EQ(resumed.epochs[0].loss, straight.epochs[1].loss);
  EXPECT_EQ(resumed.epochs[1].loss, straight.epochs[2].loss);
  const auto a = read_params(dir_ / "straight"), b = read_params(dir_ / "resumed");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, v] : a) EXPECT_EQ(v, b.at(name)) << name;
}

// A finished run started again (the launcher's restart after the end, or
// the same command twice) trains nothing and leaves its checkpoint whole:
// a later run with more epochs equals one straight run.
TEST_F(Batch, ResumingAFinishedRunKeepsItsCheckpoint) {
  proto::Job job = molecules_job();
  apply_override(job, "schedule.epochs=4");
  options_.params_out = dir_ / "straight";
  train(job, options_);
  options_.params_out.clear();
  apply_override(job, "checkpoint.dir=" + (dir_ / "ckpt").string());
  apply_override(job, "schedule.epochs=2");
  train(job, options_);
  EXPECT_EQ(train(job, options_).steps, 20);  // nothing left to train
  apply_override(job, "schedule.epochs=4");
  options_.params_out = dir_ / "resumed";
  train(job, options_);
  const auto a = read_params(dir_ / "straight"), b = read_params(dir_ / "resumed");
  for (const auto& [name, v] : a) EXPECT_EQ(v, b.at(name)) << name;
}

// Padded rows are zeroed after every convolution: the sink row, which every
// padded edge feeds, stays finite through a deep stack of sum aggregations
// in a bucket far larger than the batches.
// Modules named as nested scopes: their parameters carry the scope
// ("enc.conv1.nn.0.weight", as a torch state_dict would) and a nested
// module's output is a loss input and an inference output.
TEST_F(Batch, NestedModuleNamesTrainAndInfer) {
  proto::Job job = parse_job(R"pb(
    dataset { path: "molecules:graphs=40,seed=3" }
    model {
      module { name: "enc.conv1" input: "atom.x" gin { edges: "bond" out: 8 } }
      module { name: "enc.pool" input: "enc.conv1" pool { reduce: SUM } }
      module { name: "dec.head" input: "enc.pool" linear { out: 1 } }
      loss_term { input: "dec.head" target: "graph.y" }
    }
    schedule { epochs: 1 }
    batching { batch_size: 16 }
  )pb", "nested job");
  options_.params_out = dir_ / "out";
  train(job, options_);
  const auto params = read_params(dir_ / "out");
  EXPECT_TRUE(params.count("enc.conv1.nn.0.weight")) << "keys: " << params.size();
  EXPECT_TRUE(params.count("dec.head.weight"));
  InferOptions o;
  o.params_in = dir_ / "out";
  o.out = dir_ / "outputs";
  o.no_cache = true;
  const InferResult r = infer_batches(job, o);
  ASSERT_EQ(r.shapes.count("dec.head"), 1u);
  EXPECT_EQ(r.shapes.at("dec.head"), (std::vector<int64_t>{40, 1}));
  EXPECT_GT(r.latency_median_ms, 0);
  EXPECT_GE(r.latency_p90_ms, r.latency_median_ms);
  EXPECT_GT(r.graphs_per_second, 0);
  o.outputs = {"atom.x"};  // a dataset tensor, not a module
  EXPECT_THAT([&] { infer_batches(job, o); }, testing::ThrowsMessage<std::invalid_argument>(
                                                  testing::HasSubstr("output 'atom.x' is no module of the model")));
}

// A one-graph dataset is the one-set, one-graph case: node set "node",
// edge set "edge", class targets "node.y".
TEST_F(Batch, AOneGraphDatasetIsOneNodeSetAndOneGraph) {
  const proto::Job job = parse_job(R"pb(
    dataset { path: "synthetic:nodes=200,classes=3,features=8,avg_degree=6,seed=1" }
    model {
      module { name: "conv" input: "node.x" sage { edges: "edge" out: 16 } }
      module { name: "act" input: "conv" relu {} }
      module { name: "out" input: "act" linear { out: 3 } }
      loss_term { input: "out" target: "node.y" kind: CROSS_ENTROPY }
    }
    optimizer { lr: 0.02 weight_decay: 0 }
    schedule { epochs: 30 }
  )pb", "one-graph job");
  options_.params_out = dir_ / "out";
  const TrainResult r = train(job, options_);
  EXPECT_EQ(r.steps, 30);  // one graph: one batch an epoch
  EXPECT_LT(r.epochs.back().loss, 0.8 * r.epochs.front().loss);
  InferOptions o;
  o.params_in = dir_ / "out";
  o.out = dir_ / "outputs";
  o.no_cache = true;
  EXPECT_EQ(infer_batches(job, o).shapes.at("out"), (std::vector<int64_t>{200, 3}));
}

// adaLN-Zero: with gnnrt's own initialisation (the modulation Linear zero)
// a DiT block gives back its input, bit for bit.
TEST_F(Batch, ADitBlockAtInitialisationIsTheIdentity) {
  proto::Job job = parse_job(R"pb(
    model {
      module { name: "emb" input: "agent.x" linear { out: 8 } }
      module { name: "pooled" input: "emb" pool { reduce: MEAN } }
      module { name: "ctx" input: "pooled" linear { out: 8 } }
      module { name: "cond" input: "ctx" broadcast { node_set: "agent" } }
      module { name: "blk" input: "emb" input: "cond" dit_block { edges: "a2a" heads: 2 } }
      module {
        name: "rel"
        input: "blk"
        input: "cond"
        dit_block { edges: "a2a" heads: 2 qk_norm: true rel_bias: true rel_dim: 4 edge_dim: 3 rel_gate: true logit_clip: 1 }
      }
      module { name: "head" input: "rel" linear { out: 1 } }
      loss_term { input: "head" target: "agent.y" }
    }
    batching { batch_size: 3 }
  )pb", "dit identity job");
  job.mutable_dataset()->set_path((kGolden / "dit" / "data").string());
  // No parameters given, non-strict: every one as gnnrt initialises it.
  fs::create_directories(dir_ / "none");
  InferOptions o;
  o.params_in = dir_ / "none";
  o.params_non_strict = true;
  o.out = dir_ / "outputs";
  o.no_cache = true;
  o.outputs = {"emb", "blk", "rel"};
  infer_batches(job, o);
  const auto out = read_params(dir_ / "outputs");
  ASSERT_FALSE(out.at("emb").empty());
  for (const std::string block : {"blk", "rel"}) {
    ASSERT_EQ(out.at("emb").size(), out.at(block).size()) << block;
    for (size_t i = 0; i < out.at("emb").size(); ++i) ASSERT_EQ(out.at(block)[i], out.at("emb")[i]) << block << i;
  }
}

// A non-bipartite attention layer's destination pre-norm is its source
// pre-norm under a second key (as in VectorWorld's state_dict): written with
// --params-out, required by the strict loader with the parameter's shape.
TEST_F(Batch, AliasedKeysAreWrittenAndRequired) {
  const fs::path c = kGolden / "scene_layers";
  options_.params_in = c / "params_init";
  options_.params_out = dir_ / "out";
  proto::Job job = golden_job("scene_layers");
  apply_override(job, "schedule.epochs=1");
  train(job, options_);
  const auto out = read_params(dir_ / "out");
  EXPECT_EQ(out.at("l2l.attn_prenorm_x_dst.weight"), out.at("l2l.attn_prenorm_x_src.weight"));
  const fs::path in = dir_ / "params";
  fs::create_directories(in);
  for (const auto& e : fs::directory_iterator(c / "params_init")) fs::copy_file(e.path(), in / e.path().filename());
  fs::remove(in / "l2l.attn_prenorm_x_dst.weight.npy");
  write_npy<float>(in / "a2a.attn_prenorm_x_dst.bias.npy", std::vector<float>(3), {3});
  // An alias whose values are not its parameter's: not this model's state_dict.
  Tensor other = read_npy(in / "a2a.attn_prenorm_x_dst.weight.npy");
  other.values<float>()[2] += 0.25F;
  write_npy(in / "a2a.attn_prenorm_x_dst.weight.npy", other);
  options_.params_in = in;
  EXPECT_THAT([&] { train(job, options_); },
              testing::ThrowsMessage<std::invalid_argument>(testing::AllOf(
                  HasSubstr("missing keys: [l2l.attn_prenorm_x_dst.weight [8]]"),
                  HasSubstr("a2a.attn_prenorm_x_dst.bias: [3] float32 in the file, [8] float32 in the model"),
                  HasSubstr("a2a.attn_prenorm_x_dst.weight: names the same parameter as "
                            "a2a.attn_prenorm_x_src.weight, but its values differ (max |diff| 0.25)"))));
}

TEST_F(Batch, TheSinkRowStaysFiniteInADeepModel) {
  proto::Job job = molecules_job();
  auto* model = job.mutable_model();
  model->clear_module();
  std::string prev = "atom.x";
  for (int i = 0; i < 12; ++i) {
    auto* m = model->add_module();
    m->set_name("conv" + std::to_string(i));
    m->add_input(prev);
    m->mutable_gin()->set_edges("bond");
    m->mutable_gin()->set_out(32);
    prev = m->name();
  }
  auto* pool = model->add_module();
  pool->set_name("pool");
  pool->add_input(prev);
  pool->mutable_pool()->set_reduce(proto::PoolModule::SUM);
  auto* head = model->add_module();
  head->set_name("head");
  head->add_input("pool");
  head->mutable_linear()->set_out(1);
  auto* bucket = job.mutable_batching()->add_bucket();
  for (const auto& [set, rows] : {std::pair{"atom", 5000}, std::pair{"bond", 20000}}) {
    auto* s = bucket->add_size();
    s->set_set(set);
    s->set_rows(rows);
  }
  apply_override(job, "schedule.epochs=1");
  options_.debug = true;  // every op's output checked for NaN and Inf, padded rows included
  EXPECT_NO_THROW(train(job, options_));
}

TEST_F(Batch, StrictParamsInListsMissingUnexpectedAndMisshapedKeys) {
  const fs::path in = dir_ / "params";
  fs::create_directories(in);
  for (const auto& e : fs::directory_iterator(kGolden / "gin_sum_pool" / "params_init")) {
    fs::copy_file(e.path(), in / e.path().filename());
  }
  fs::remove(in / "conv2.nn.0.bias.npy");
  write_npy<float>(in / "extra.weight.npy", std::vector<float>(3), {3});
  write_npy<float>(in / "head.2.bias.npy", std::vector<float>(2), {2});
  options_.params_in = in;
  try {
    train(golden_job("gin_sum_pool"), options_);
    FAIL() << "loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing keys: [conv2.nn.0.bias [16]]"));
    EXPECT_THAT(e.what(), HasSubstr("unexpected keys: [extra.weight]"));
    EXPECT_THAT(e.what(), HasSubstr("head.2.bias: [2] float32 in the file, [1] float32 in the model"));
  }
  options_.params_non_strict = true;
  EXPECT_NO_THROW(train(golden_job("gin_sum_pool"), options_));
}

std::string model_error(const std::string& modules) {
  proto::Job job = parse_job(R"pb(dataset { path: "DATA" } batching { batch_size: 3 })pb", "job");
  job.mutable_dataset()->set_path((kGolden / "hetero" / "data").string());
  google::protobuf::TextFormat::ParseFromString(modules, job.mutable_model());
  TrainOptions o;
  o.no_cache = true;
  o.progress = false;
  try {
    train(job, o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(BatchModels, BadModelsAreRefusedNamingTheModule) {
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "c.x" linear { out: 2 } }
                               loss_term { input: "m" })pb"),
              HasSubstr("model.module 'm': input 'c.x' is provided by no node set, edge set or module"));
  EXPECT_THAT(model_error(R"pb(module { name: "p" input: "q" relu {} }
                               module { name: "q" input: "p" relu {} }
                               loss_term { input: "p" })pb"),
              HasSubstr("cycle: p -> q -> p"));
  EXPECT_THAT(model_error(R"pb(module { name: "s" input: "a.x" input: "b.x" gin { edges: "ab" out: 4 } }
                               loss_term { input: "s" })pb"),
              HasSubstr("model.module 's' (gin): sources have width 6, destinations 4"));
  EXPECT_THAT(model_error(R"pb(module { name: "s" input: "b.x" input: "a.x" sage { edges: "ab" out: 4 } }
                               loss_term { input: "s" })pb"),
              HasSubstr("its first input (the sources) must be rows of node set 'a', but is 'b.x'"));
  EXPECT_THAT(model_error(R"pb(module { name: "s" input: "a.x" sage { edges: "nope" out: 4 } }
                               loss_term { input: "s" })pb"),
              HasSubstr("edge set 'nope' is not in the dataset (edge sets: aa, ab)"));
  EXPECT_THAT(model_error(R"pb(module { name: "x" input: "a.x" input: "b.x" add {} }
                               loss_term { input: "x" })pb"),
              HasSubstr("cannot add 'a.x' (rows of node set 'a', width 6) and 'b.x'"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               loss_term { input: "m" target: "graph.y" })pb"),
              HasSubstr("has one row per graph, input 'm' does not (pool it first)"));
  EXPECT_THAT(model_error(R"pb(module { name: "p" input: "a.x" pool {} }
                               loss_term { input: "p" target: "graph.y" })pb"),
              HasSubstr("input 'p' has width 6, target 'graph.y' has 1"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               loss_term { input: "m" kind: KL })pb"),
              HasSubstr("model.loss_term[0]: kind KL needs log_var, a module's output ('' is none)"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               module { name: "v" input: "a.x" linear { out: 3 } }
                               loss_term { input: "m" log_var: "v" kind: KL })pb"),
              HasSubstr("input 'm' and log_var 'v' differ in rows or width (2 and 3)"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               module { name: "z" input: "m" input: "b.x" reparameterize {} }
                               loss_term { input: "z" })pb"),
              HasSubstr("model.module 'z' (reparameterize): mu 'm' (rows of node set 'a', width 2) and log_var "
                        "'b.x' (rows of node set 'b', width 4) must have the same rows and width"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               module { name: "n" input: "a.x" params: "m" linear { out: 3 } }
                               loss_term { input: "n" })pb"),
              HasSubstr("model.module 'n': shares the parameters 'm' with model.module 'm', which is of another kind "
                        "or configuration"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" linear { out: 2 } }
                               module { name: "n" input: "b.x" params: "m" linear { out: 2 } }
                               loss_term { input: "n" })pb"),
              HasSubstr("model.module 'n' (linear): parameter 'm.weight' is [2, 4] where another module of scope "
                        "'m' made it [2, 6]"));
  EXPECT_THAT(model_error(R"pb(module { name: "x.to_q" input: "a.x" linear { out: 6 } }
                               module { name: "x" input: "x.to_q" attention { edges: "aa" heads: 2 } }
                               loss_term { input: "x" })pb"),
              HasSubstr("parameter 'x.to_q.weight' is also a parameter of scope 'x.to_q'"));
  EXPECT_THAT(model_error(R"pb(module { name: "d" input: "a.x" input: "a.x" dit_block { edges: "aa" heads: 2 rel_gate: true } }
                               loss_term { input: "d" })pb"),
              HasSubstr("model.module 'd' (dit_block): rel_gate needs rel_bias"));
  EXPECT_THAT(model_error(R"pb(module { name: "d" input: "a.x" input: "a.x" dit_block { edges: "aa" heads: 2 logit_clip: -1 } }
                               loss_term { input: "d" })pb"),
              HasSubstr("logit_clip = -1 must be >= 0 (0: none)"));
  EXPECT_THAT(model_error(R"pb(module { name: "d" input: "a.x" input: "a.x" dit_block { edges: "aa" heads: 2 rel_bias: true rel_dim: 0 } }
                               loss_term { input: "d" })pb"),
              HasSubstr("rel_dim = 0 must be >= 1"));
  EXPECT_THAT(model_error(R"pb(module { name: "m" input: "a.x" })pb"), HasSubstr("no kind given"));
}

// A copy of the hetero dataset with one array replaced.
class BadData : public Batch {
 protected:
  fs::path copy() {
    const fs::path d = dir_ / "data";
    fs::copy(kGolden / "hetero" / "data", d);
    return d;
  }
  std::string load_error(const fs::path& d) {
    try {
      load_batch_folder(d);
    } catch (const DatasetError& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(BadData, EachProblemNamesTheFileFieldAndPosition) {
  fs::path d = copy();
  auto ptr = read_npy(d / "a.ptr.npy").to_vector<int64_t>();
  const auto good_ptr = ptr;
  std::swap(ptr[2], ptr[3]);
  write_npy<int64_t>(d / "a.ptr.npy", ptr, {static_cast<int64_t>(ptr.size())});
  EXPECT_THAT(load_error(d), HasSubstr("a.ptr.npy (node_set a ptr): offsets not monotone: offset 2"));
  ptr = good_ptr;
  ptr.back() += 3;
  write_npy<int64_t>(d / "a.ptr.npy", ptr, {static_cast<int64_t>(ptr.size())});
  EXPECT_THAT(load_error(d), HasSubstr("features has shape"));
  write_npy<int64_t>(d / "a.ptr.npy", good_ptr, {static_cast<int64_t>(ptr.size())});

  auto x = read_npy(d / "a.x.npy");
  auto xv = x.to_vector<float>();
  xv[2 * 6 + 1] = std::nanf("");
  write_npy<float>(d / "a.x.npy", xv, x.shape());
  EXPECT_THAT(load_error(d), HasSubstr("a.x.npy (node_set a features): nan at row 2, column 1"));
  write_npy(d / "a.x.npy", x);

  auto ei = read_npy(d / "aa.edge_index.npy");
  auto ev = ei.to_vector<int64_t>();
  const auto good_ei = ev;
  ev[0] = good_ptr.back() - 1;  // edge 0's source in the last graph
  write_npy<int64_t>(d / "aa.edge_index.npy", ev, ei.shape());
  EXPECT_THAT(load_error(d), HasSubstr("edge set 'aa': edge 0 of graph 0 joins a row"));
  ev.resize(ev.size() - 1);
  write_npy<int64_t>(d / "aa.edge_index.npy", ev, {static_cast<int64_t>(ev.size())});
  EXPECT_THAT(load_error(d), HasSubstr("aa.edge_index.npy (edge_set aa edge_index): has shape"));
  write_npy(d / "aa.edge_index.npy", ei);

  std::string manifest = read_text(d / "manifest.pbtxt");
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"b\" destination: \"b\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("relation 'b' may not contain '.', be 'graph' or a node set's name"));
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"ac\" destination: \"c\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("edge_set[2]: destination 'c' is not a node set"));
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"ax\" destination: \"b\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("ax.edge_index.npy (edge_set ax edge_index): missing"));
  std::ofstream(d / "manifest.pbtxt") << manifest;

  auto y = read_npy(d / "graph.y.npy");
  auto yv = y.to_vector<float>();
  yv[3] = INFINITY;
  write_npy<float>(d / "graph.y.npy", yv, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): inf at row 3, column 0"));
  yv.pop_back();
  write_npy<float>(d / "graph.y.npy", yv, {static_cast<int64_t>(yv.size()), 1});
  EXPECT_THAT(load_error(d), HasSubstr("targets has shape"));
}

// Integer labels at their dtype's extremes: refused at load, naming the
// file and the row (INT64_MAX once passed the load and failed at the first
// step as a position in the batch, and the launcher restarted it); a label
// the model has no logit for: refused when the program is built, naming
// where the largest label is.
TEST_F(BadData, LabelsAreCheckedAgainstTheirRangeAndTheClassCount) {
  const fs::path d = dir_ / "classes";
  fs::copy(kGolden / "graph_classes" / "data", d);
  const Tensor y = read_npy(d / "graph.y.npy");
  auto labels = y.to_vector<int64_t>();
  const auto good = labels;
  labels[3] = std::numeric_limits<int64_t>::max();
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): label 9223372036854775807 at row 3: at most "
                                       "1048576 classes are supported"));
  labels[3] = std::numeric_limits<int64_t>::min();
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): label -9223372036854775808 at row 3 is negative"));
  labels[3] = int64_t{1} << 62;
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("label 4611686018427387904 at row 3: at most"));
  labels = good;
  labels[4] = 7;  // the model gives 3 logits
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  proto::Job job = golden_job("graph_classes");
  apply_override(job, "dataset.path=" + d.string());
  EXPECT_THAT([&] { train(job, options_); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr(
                  "input 'cls' gives 3 logits, the target's labels go up to 7 (" + (d / "graph.y.npy").string() +
                  " (graph_target) row 4)")));
}

// A manifest that does not parse: the file, line and column in the error.
TEST_F(BadData, AManifestSyntaxErrorNamesTheLineAndColumn) {
  const fs::path d = copy();
  std::string manifest = read_text(d / "manifest.pbtxt");
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation \"b\" }\n";
  const int line = static_cast<int>(std::count(manifest.begin(), manifest.end(), '\n')) + 1;
  EXPECT_THAT(load_error(d), HasSubstr(fmt::format("{}: not a valid BatchManifest: line {}, column 33: Expected \":\"",
                                                   (d / "manifest.pbtxt").string(), line)));
}

// A parameter file holding NaN or Inf, or float64 beyond float32: refused
// naming the key and the position, for module graphs and the layer chain.
TEST_F(Batch, NonFiniteParametersAreRefusedNamingKeyAndPosition) {
  const fs::path c = kGolden / "graph_classes";
  const fs::path in = dir_ / "params";
  fs::copy(c / "params_init", in);
  const Tensor w = read_npy(in / "cls.weight.npy");
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    auto v = w.to_vector<float>();
    v[1 * w.shape()[1] + 2] = bad;
    write_npy<float>(in / "cls.weight.npy", v, w.shape());
    options_.params_in = in;
    EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
                testing::ThrowsMessage<std::invalid_argument>(
                    HasSubstr(fmt::format("--params-in {}: cls.weight[1, 2] is {}", (in / "cls.weight.npy").string(),
                                          bad))));
  }
  // A directory named like the key's file: its path and what it is.
  fs::remove(in / "cls.weight.npy");
  fs::create_directories(in / "cls.weight.npy");
  EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
              testing::ThrowsMessage<std::runtime_error>(HasSubstr((in / "cls.weight.npy").string() + ": a directory, not a file")));
  fs::remove(in / "cls.weight.npy");
  const auto narrow = w.to_vector<float>();
  std::vector<double> wide(narrow.begin(), narrow.end());
  wide[0] = 1e300;
  write_npy<double>(in / "cls.weight.npy", wide, w.shape());
  EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr("cls.weight[0, 0] is 1e+300 (too large for float32)")));
}

// Non-finite hyper-parameters, anywhere in the job, are refused at validation.
TEST(JobValidation, NonFiniteValuesAreRefusedNamingTheField) {
  proto::Job job = golden_job("graph_classes");
  apply_override(job, "optimizer.weight_decay=nan");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: optimizer.weight_decay = nan is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "optimizer.lr=inf");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: optimizer.lr = inf is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "model.loss_term[1].weight=-inf");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: model.loss_term[1].weight = -inf is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "batching.growth=nan");
  EXPECT_THAT([&] { validate(job); }, testing::ThrowsMessage<JobError>(HasSubstr("batching.growth = nan")));
}

TEST(Molecules, AreDeterministicAndShapedLikeZinc) {
  const BatchDataset a = make_molecules(parse_molecule_spec("molecules:graphs=2000,seed=4"));
  const BatchDataset b = make_molecules(parse_molecule_spec("molecules:graphs=2000,seed=4"));
  EXPECT_EQ(a.node_sets[0].x, b.node_sets[0].x);
  EXPECT_EQ(a.edge_sets[0].src, b.edge_sets[0].src);
  EXPECT_EQ(a.graph_y.values, b.graph_y.values);
  const double nodes = static_cast<double>(a.node_sets[0].rows()) / 2000;
  const double edges = static_cast<double>(a.edge_sets[0].count()) / 2000;
  EXPECT_NEAR(nodes, 23, 1.5);
  EXPECT_NEAR(edges, 50, 5);
  EXPECT_THROW(parse_molecule_spec("molecules:graphs=0"), DatasetError);
  EXPECT_THROW(parse_molecule_spec("molecules:colour=3"), DatasetError);
  // Round trip through a folder.
  const fs::path d = fs::path(testing::TempDir()) / "gnnrt_molecules_folder";
  fs::remove_all(d);
  write_batch_folder(a, d);
  const BatchDataset c = load_batch_folder(d);
  EXPECT_EQ(c.node_sets[0].x, a.node_sets[0].x);
  EXPECT_EQ(c.edge_sets[0].dst, a.edge_sets[0].dst);
  EXPECT_EQ(c.graph_y.values, a.graph_y.values);
  fs::remove_all(d);
}

// Synthetic scenes: deterministic; within the caps; every pair within a
// scene connected (VectorWorld's default), none across scenes; each lane
// pair one connection type, successors one segment along.
TEST(Scenes, AreDeterministicFullyConnectedAndTyped) {
  const SceneSpec spec = parse_scene_spec("scenes:scenes=12,min_lanes=5,max_lanes=40,max_agents=30,seed=3");
  const BatchDataset a = make_scenes(spec);
  const BatchDataset b = make_scenes(spec);
  EXPECT_EQ(a.node_sets[0].x, b.node_sets[0].x);
  EXPECT_EQ(a.node_sets[1].x, b.node_sets[1].x);
  EXPECT_EQ(a.edge_sets[0].x, b.edge_sets[0].x);
  ASSERT_EQ(a.node_sets.size(), 3u);
  ASSERT_EQ(a.edge_sets.size(), 4u);
  const NodeSet& lane = a.node_sets[0];
  const NodeSet& agent = a.node_sets[1];
  EXPECT_EQ(lane.width, kLaneWidth);
  EXPECT_EQ(agent.width, kAgentWidth);
  std::set<int64_t> lane_counts;
  for (int64_t g = 0; g < a.num_graphs; ++g) {
    const int64_t nl = lane.rows_of(g), na = agent.rows_of(g);
    EXPECT_GE(nl, 5);
    EXPECT_LE(nl, 40);
    EXPECT_GE(na, 4);
    EXPECT_LE(na, 30);
    lane_counts.insert(nl);
    EXPECT_EQ(a.edge_sets[0].edges_of(g), nl * nl);  // l2l
    EXPECT_EQ(a.edge_sets[1].edges_of(g), na * na);  // a2a
    EXPECT_EQ(a.edge_sets[2].edges_of(g), nl * na);  // l2a
    EXPECT_EQ(a.edge_sets[3].edges_of(g), nl);       // l2q
    EXPECT_EQ(a.graph_y.labels[static_cast<size_t>(g)], nl);
  }
  EXPECT_GT(lane_counts.size(), 3u);  // sizes vary: buckets matter
  // One type per lane pair; self on the diagonal; some successors and neighbours.
  std::array<int64_t, kConnectionTypes> types{};
  const EdgeSet& l2l = a.edge_sets[0];
  for (int64_t e = 0; e < l2l.count(); ++e) {
    float sum = 0;
    int64_t type = -1;
    for (int64_t t = 0; t < kConnectionTypes; ++t) {
      sum += l2l.x[static_cast<size_t>(e * kConnectionTypes + t)];
      if (l2l.x[static_cast<size_t>(e * kConnectionTypes + t)] == 1.0f) type = t;
    }
    ASSERT_EQ(sum, 1.0f) << "edge " << e;
    ++types[static_cast<size_t>(type)];
    EXPECT_EQ(type == 4, l2l.src[static_cast<size_t>(e)] == l2l.dst[static_cast<size_t>(e)]) << "edge " << e;
  }
  EXPECT_EQ(types[0], types[1]);  // as many predecessors as successors
  EXPECT_EQ(types[2], types[3]);  // left and right
  EXPECT_GT(types[1], 0);
  EXPECT_GT(types[2], 0);
  // A successor's first point is its predecessor's last.
  for (int64_t e = 0; e < l2l.count(); ++e) {
    if (l2l.x[static_cast<size_t>(e * kConnectionTypes + 1)] != 1.0f) continue;
    const auto i = static_cast<size_t>(l2l.src[static_cast<size_t>(e)]), j = static_cast<size_t>(l2l.dst[static_cast<size_t>(e)]);
    EXPECT_NEAR(lane.x[i * kLaneWidth + kLaneWidth - 2], lane.x[j * kLaneWidth], 1e-5);
    EXPECT_NEAR(lane.x[i * kLaneWidth + kLaneWidth - 1], lane.x[j * kLaneWidth + 1], 1e-5);
  }
  EXPECT_THROW(parse_scene_spec("scenes:max_lanes=5000"), DatasetError);
  EXPECT_THROW(parse_scene_spec("scenes:min_lanes=10,max_lanes=5"), DatasetError);
  EXPECT_THROW(parse_scene_spec("scenes:lanes=3"), DatasetError);
  // A scene of 1,000 lanes: a million lane-to-lane edges.
  const BatchDataset big = make_scenes(parse_scene_spec("scenes:scenes=1,min_lanes=1000,max_lanes=1000,seed=1"));
  EXPECT_EQ(big.edge_sets[0].count(), 1000000);
}

// The scene layers on synthetic scenes end to end: embeddings, lane
// attention with the connection types, lane-to-agent and agent attention,
// the query token attended by the lanes; reconstruction of lanes and agents
// and the lane count from the query. The loss falls.
TEST_F(Batch, SceneLayersTrainOnSyntheticScenes) {
  const proto::Job job = parse_job(R"pb(
    dataset { path: "scenes:scenes=24,min_lanes=4,max_lanes=12,min_agents=2,max_agents=6,seed=2" }
    model {
      module { name: "lane_mlp" input: "lane.x" residual_mlp { hidden: 16 } }
      module { name: "conn_mlp" input: "l2l.x" residual_mlp { hidden: 8 } }
      module { name: "agent_mlp" input: "agent.x" residual_mlp { hidden: 16 } }
      module { name: "l2l" input: "lane_mlp" input: "conn_mlp" attention { edges: "l2l" heads: 2 feedforward: 32 } }
      module { name: "l2a" input: "l2l" input: "agent_mlp" attention { edges: "l2a" heads: 2 feedforward: 32 shared_prenorm: true } }
      module { name: "a2a" input: "l2a" attention { edges: "a2a" heads: 2 feedforward: 32 } }
      module { name: "Q" token { node_set: "query" width: 16 } }
      module { name: "l2q" input: "l2l" input: "Q" attention { edges: "l2q" heads: 2 feedforward: 32 shared_prenorm: true } }
      module { name: "query" input: "l2q" pool { reduce: SUM } }
      module { name: "lane_count" input: "query" residual_mlp { hidden: 16 out: 13 } }
      module { name: "lane_out" input: "l2l" linear { out: 40 } }
      module { name: "agent_out" input: "a2a" linear { out: 22 } }
      loss_term { input: "lane_out" target: "lane.y" kind: MSE }
      loss_term { input: "agent_out" target: "agent.y" kind: MSE }
      loss_term { input: "lane_count" target: "graph.y" kind: CROSS_ENTROPY weight: 0.1 }
    }
    optimizer { lr: 0.003 weight_decay: 0 }
    schedule { epochs: 8 }
    batching { batch_size: 8 }
    seed: 3
  )pb", "scene job");
  const TrainResult r = train(job, options_);
  EXPECT_LT(r.epochs.back().loss, 0.5 * r.epochs.front().loss);
  EXPECT_GT(r.buckets_used, 1);
}

// VectorWorld's VAE scene encoder at reduced widths against the torch
// reference (tests/reference/make_encoder_golden.py): the encoder's outputs
// with the same state_dict, every key's gradient of the first training step
// (reparameterisation noise included), and the loss of each of 50 Adam
// steps, which falls by at least four fifths (the write-up's -84.5%).
const fs::path kEncoder = kGolden / "scene_encoder";

TEST_F(Batch, SceneEncoderOutputsEqualTheTorchReference) {
  InferOptions o;
  o.params_in = kEncoder / "params_init";
  o.out = dir_ / "outputs";
  o.no_cache = true;
  for (const auto& e : fs::directory_iterator(kEncoder / "outputs_init")) o.outputs.push_back(e.path().stem().string());
  ASSERT_EQ(o.outputs.size(), 5u);
  infer_batches(golden_job("scene_encoder"), o);
  expect_close(read_params(dir_ / "outputs"), read_params(kEncoder / "outputs_init"), 1e-5, 1e-4);
}

// One SGD step at lr 1 from params_init: init - final is the gradient (the
// float32 rounding of final, about 1e-7 here, is far below the tolerance).
TEST_F(Batch, SceneEncoderGradientsEqualTheTorchReference) {
  proto::Job job = golden_job("scene_encoder");
  for (const char* o : {"optimizer.kind=sgd", "optimizer.lr=1", "optimizer.momentum=0", "schedule.epochs=1"}) {
    apply_override(job, o);
  }
  options_.params_in = kEncoder / "params_init";
  options_.params_out = dir_ / "out";
  train(job, options_);
  const auto init = read_params(kEncoder / "params_init");
  auto grads = read_params(dir_ / "out");
  for (auto& [name, g] : grads) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = init.at(name)[i] - g[i];
  }
  expect_close(grads, read_params(kEncoder / "grads"), 1e-5, 1e-4);
}

TEST_F(Batch, SceneEncoderLossEqualsTheTorchReferenceAtEveryStepAndFallsByFourFifths) {
  options_.params_in = kEncoder / "params_init";
  const TrainResult r = train(golden_job("scene_encoder"), options_);
  const auto want = read_npy(kEncoder / "epoch_losses.npy").to_vector<double>();
  ASSERT_EQ(r.epochs.size(), want.size());  // one step an epoch
  for (size_t e = 0; e < want.size(); ++e) {
    EXPECT_NEAR(r.epochs[e].loss, want[e], 1e-4 * std::abs(want[e])) << "step " << e + 1;
  }
  EXPECT_LT(r.epochs.back().loss, 0.2 * r.epochs.front().loss);
}

// A VectorWorld-style state_dict with a key missing, one unexpected and one
// mis-shaped: the strict loader names all three in one error.
TEST_F(Batch, SceneEncoderStateDictProblemsAreListedTogether) {
  const fs::path in = dir_ / "params";
  fs::create_directories(in);
  for (const auto& e : fs::directory_iterator(kEncoder / "params_init")) fs::copy_file(e.path(), in / e.path().filename());
  fs::remove(in / "encoder.encoder_transformer_blocks.2.l2a_transformer_layer.to_k.weight.npy");
  write_npy<float>(in / "encoder.extra_head.weight.npy", std::vector<float>(4), {2, 2});
  write_npy<float>(in / "encoder.Q.npy", std::vector<float>(8), {1, 8});
  options_.params_in = in;
  EXPECT_THAT([&] { train(golden_job("scene_encoder"), options_); },
              testing::ThrowsMessage<std::invalid_argument>(testing::AllOf(
                  HasSubstr("missing keys: [encoder.encoder_transformer_blocks.2.l2a_transformer_layer.to_k.weight [8, 8]]"),
                  HasSubstr("encoder.extra_head.weight"),
                  HasSubstr("encoder.Q: [1, 8] float32 in the file, [1, 16] float32 in the model"))));
}

// A VectorWorld checkpoint holds the encoder, not the job's recon decoders:
// --params-scope encoder loads its keys as strictly as the whole model's and
// starts the rest fresh.
TEST_F(Batch, SceneEncoderLoadsAnEncoderOnlyStateDictStrictlyUnderItsScope) {
  const fs::path in = dir_ / "params";
  fs::create_directories(in);
  int encoder_keys = 0;
  for (const auto& e : fs::directory_iterator(kEncoder / "params_init")) {
    if (!e.path().filename().string().starts_with("encoder.")) continue;
    fs::copy_file(e.path(), in / e.path().filename());
    ++encoder_keys;
  }
  ASSERT_GT(encoder_keys, 100);
  proto::Job job = golden_job("scene_encoder");
  apply_override(job, "schedule.epochs=1");
  options_.params_in = in;
  EXPECT_THROW(train(job, options_), std::invalid_argument);  // strict: the recon keys are missing
  options_.params_scope = "encoder";
  options_.params_out = dir_ / "out";
  train(job, options_);
  // One step moves every parameter; the loaded encoder's are near the file's, not a fresh draw.
  const auto out = read_params(dir_ / "out");
  const auto init = read_params(kEncoder / "params_init");
  const std::string key = "encoder.encoder_transformer_blocks.0.l2l_transformer_layer.to_q.weight";
  ASSERT_EQ(out.at(key).size(), init.at(key).size());
  for (size_t i = 0; i < init.at(key).size(); ++i) ASSERT_NEAR(out.at(key)[i], init.at(key)[i], 1e-2) << i;
  // Still strict inside the scope, and a file outside it is unexpected.
  fs::remove(in / (key + ".npy"));
  write_npy<float>(in / "recon.agent.weight.npy", std::vector<float>(4), {2, 2});
  EXPECT_THAT([&] { train(job, options_); },
              testing::ThrowsMessage<std::invalid_argument>(testing::AllOf(
                  HasSubstr("missing keys: [" + key + " [16, 16]]"), HasSubstr("unexpected keys: [recon.agent.weight]"))));
  options_.params_scope = "decoder";
  EXPECT_THAT([&] { train(job, options_); }, testing::ThrowsMessage<std::invalid_argument>(
                                                 HasSubstr("--params-scope decoder: the model has no key under 'decoder.'")));
}

// The same encoder on gnnrt's own synthetic scenes, from its own
// initialisation (VectorWorld's), in shape buckets.
TEST_F(Batch, SceneEncoderLearnsSyntheticScenes) {
  proto::Job job = golden_job("scene_encoder");
  job.mutable_dataset()->set_path("scenes:scenes=12,min_lanes=3,max_lanes=7,min_agents=2,max_agents=6,seed=4");
  apply_override(job, "batching.batch_size=12");
  const TrainResult r = train(job, options_);
  ASSERT_EQ(r.epochs.size(), 50u);
  EXPECT_LT(r.epochs.back().loss, 0.2 * r.epochs.front().loss);
}

// examples/scene_encoder.pbtxt is VectorWorld's encoder at vae.yaml's sizes:
// its 424 keys with their shapes (aliases included) as the torch layout
// names them, and 45.11 M distinct parameters.
TEST(SceneEncoder, TheExampleHasVectorWorldsKeysShapesAndParameterCount) {
  std::map<std::string, std::string> want;
  int64_t want_count = 0;
  std::ifstream keys(kEncoder / "keys.txt");
  for (std::string name, shape; keys >> name >> shape;) {
    if (name == "parameters") want_count = std::stoll(shape);
    else want[name] = shape;
  }
  ASSERT_EQ(want.size(), 424u);
  const proto::Job job = load_job(fs::path(GNNRT_EXAMPLES_DIR) / "scene_encoder.pbtxt");
  const BatchDataset data = make_scenes(parse_scene_spec("scenes:scenes=2,min_lanes=2,max_lanes=3,min_agents=2,max_agents=3"));
  const Schema schema = schema_of(data);
  BucketShape shape;
  shape.node_rows.assign(data.node_sets.size(), 4);
  shape.edge_rows.assign(data.edge_sets.size(), 16);
  shape.graph_rows = 3;
  const Network net = build_module_train_step(job.model(), schema, shape);
  std::map<std::string, std::string> got;
  std::map<std::string, std::vector<int64_t>> shapes;
  int64_t count = 0;
  for (const ParamDecl& p : net.params) {
    shapes[p.name] = p.shape;
    if (p.name.rfind("encoder.", 0) != 0) continue;
    got[p.name] = fmt::format("{}", fmt::join(p.shape, "x"));
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    count += n;
  }
  for (const ParamAlias& a : net.aliases) got[a.key] = fmt::format("{}", fmt::join(shapes.at(a.param), "x"));
  EXPECT_EQ(got, want);
  EXPECT_EQ(count, want_count);
}

TEST(BatchSourceTest, AGraphTooLargeForTheLargestBucketIsAnError) {
  const BatchDataset d = make_molecules(parse_molecule_spec("molecules:graphs=20,seed=1"));
  proto::Batching b;
  auto* bucket = b.add_bucket();
  auto* s = bucket->add_size();
  s->set_set("atom");
  s->set_rows(12);
  s = bucket->add_size();
  s->set_set("bond");
  s->set_rows(1000);
  try {
    BatchSource source(d, b, 0);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not fit any bucket"));
    EXPECT_THAT(e.what(), HasSubstr(" atom, "));
  }
}

}  // namespace
}  // namespace gnnrt::model
