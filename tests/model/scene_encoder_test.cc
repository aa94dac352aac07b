// VectorWorld's layers and scene encoder as module graphs: the scene layers
// train on synthetic scenes, and the encoder equals the torch reference
// (outputs, gradients, losses), loads its state_dict strictly (under a
// scope too) and has the published keys, shapes and parameter count.
#include "tests/model/batch_fixture.h"

namespace gnnrt::model {
namespace {

using namespace batch_testing;  // NOLINT: the shared fixture and helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace gnnrt::model
