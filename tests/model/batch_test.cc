// Module-graph models over batches of small graphs: equal to the PyTorch
// reference (tests/reference/make_batch_golden.py: PyG-style batching, no
// padding): each epoch's mean loss and the parameters after three epochs;
// the gradients against central differences of the model's own loss;
// padding never changes a result; compiles equal the buckets used and a second run compiles
// nothing; exact resume; the strict parameter loader; bad models and bad
// batch datasets refused with messages naming what and where.
#include "tests/model/batch_fixture.h"

namespace gnnrt::model {
namespace {

using namespace batch_testing;  // NOLINT: the shared fixture and helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;

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
#ifdef GNNRT_UNDER_SANITIZERS
  // The two largest models' probes took 90 s and 36 s of the sanitizer
  // suite; their module kinds run there in the smaller cases and in the
  // scene encoder's torch comparisons, and these cases in the Release suite.
  if (GetParam() == "scene_encoder" || GetParam() == "scene_layers") GTEST_SKIP() << "Release suite only";
#endif
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
    const GraphBatches source(data, job.batching(), job.seed());
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

// A batch job's outputs come from gnnrt infer: --logits-out is refused
// before anything is read or made.
TEST_F(Batch, LogitsOutIsRefusedForABatchJob) {
  options_.logits_out = dir_ / "out" / "logits.npy";
  EXPECT_THAT([&] { train(molecules_job(), options_); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr("--logits-out is for full-graph jobs")));
  EXPECT_FALSE(fs::exists(dir_ / "out"));
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
  EXPECT_THAT(model_error(R"pb(module { name: "n" input: "a.x" layer_norm { mode: GRAPH } }
                               loss_term { input: "n" })pb"),
              HasSubstr("model.module 'n' (layer_norm): mode GRAPH normalises over a whole graph"));
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

}  // namespace
}  // namespace gnnrt::model
