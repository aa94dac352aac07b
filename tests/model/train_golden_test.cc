// The trainer's arithmetic against an independent PyTorch reference
// (tests/reference/gnn_reference.py, written from PyG's formulas; golden
// files from tests/reference/make_train_golden.py): same initial weights,
// dropout off, 5 optimizer steps on a small graph with an isolated node.
// Per step the loss, at step 1 every parameter gradient, after the steps
// every parameter and the logits must match within rtol 1e-4 (atol 1e-5).
// Runs compiled (fused, reordered) and in debug mode (unfused).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/dataset.h"
#include "model/network.h"
#include "model/trainer.h"
#include "runtime/npy.h"
#include "runtime/core.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGolden = GNNRT_TRAIN_GOLDEN_DIR;

proto::Layer layer(const std::string& type, int64_t out = 0) {
  proto::Layer l;
  l.set_type(type);
  l.set_out(out);
  return l;
}

// The reference's two-layer models (tests/reference/gnn_reference.py).
proto::Job job_for(const json& c) {
  proto::Job job;
  auto* m = job.mutable_model();
  const std::string model = c["model"];
  const int64_t hidden = c["hidden"];
  const auto add = [&](proto::Layer l) { *m->add_layer() = std::move(l); };
  if (model == "gcn_ln" || model == "gcn_mse") {
    add(layer("gcn", hidden));
    if (model == "gcn_ln") {
      auto norm = layer("layer_norm");
      norm.set_mode(c["norm_mode"]);
      add(norm);
    } else {
      m->set_loss("mse");
    }
    add(layer("relu"));
    add(layer("gcn"));
  } else if (model == "gcn") {
    add(layer("gcn", hidden));
    add(layer("relu"));
    add(layer("gcn"));
  } else if (model == "sage") {
    for (int64_t out : {hidden, int64_t{0}}) {
      auto l = layer("sage", out);
      l.set_aggr(c["aggr"]);
      add(l);
      if (out != 0) add(layer("relu"));
    }
  } else if (model == "gat") {
    auto l1 = layer("gat", hidden);
    l1.set_heads(c["heads"]);
    add(l1);
    add(layer("elu"));
    auto l2 = layer("gat", 0);
    l2.set_heads(c["out_heads"]);
    l2.set_concat(false);
    add(l2);
  } else if (model == "gin") {
    auto l1 = layer("gin", hidden);
    l1.set_hidden(hidden);
    add(l1);
    add(layer("relu"));
    auto l2 = layer("gin", 0);
    l2.set_hidden(hidden);
    add(l2);
  }
  auto* o = job.mutable_optimizer();
  o->set_kind(c["optimizer"]);
  o->set_lr(c["lr"]);
  o->set_weight_decay(c["weight_decay"]);
  if (c.contains("momentum")) o->set_momentum(c["momentum"]);
  return job;
}

::testing::AssertionResult close(const Tensor& actual, const Tensor& expected,
                                 const std::string& what) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << what << ": shape " << runtime::shape_string(actual.shape())
                                         << " != " << runtime::shape_string(expected.shape());
  }
  const auto a = actual.to_vector<double>();
  const auto e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - e[i]) <= 1e-5 + 1e-4 * std::abs(e[i]))) {
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << a[i] << ", torch " << e[i];
    }
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  std::string name;
  bool debug;
};

class TrainGolden : public ::testing::TestWithParam<Case> {};

TEST_P(TrainGolden, MatchesTorch) {
  const fs::path dir = kGolden / GetParam().name;
  std::ifstream config_file(dir / "config.json");
  ASSERT_TRUE(config_file) << dir;
  const json config = json::parse(config_file);
  const proto::Job job = job_for(config);
  const Dataset data = load_npy_folder(kGolden / "graph");

  runtime::CoreOptions core_options;
  core_options.debug = GetParam().debug;
  runtime::Core core(runtime::DeviceProfile::named("trn1"), core_options);
  const NetworkShape shape = bind_dataset(core, data, job.model());
  const Network train_net = build_train_step(job.model(), shape);
  const Network infer_net = build_inference(job.model(), shape);
  runtime::CompileOptions options;
  options.train = runtime::TrainStep{train_net.loss, train_net.param_ids,
                                     optimizer_config(job.optimizer()), /*keep_grads=*/true};
  const auto step = core.compile(train_net.program, options);
  const auto infer = core.compile(infer_net.program, {});
  if (!GetParam().debug) {
    EXPECT_GT(step->passes.fused, 0);
  }

  for (const ParamDecl& p : train_net.params) {
    const fs::path file = dir / "params_init" / (p.name + ".npy");
    ASSERT_TRUE(fs::exists(file)) << "the reference has no parameter " << p.name;
    core.memory().put(p.name, read_npy(file));
  }
  size_t reference_params = 0;
  for (const auto& entry : fs::directory_iterator(dir / "params_init")) reference_params += entry.is_regular_file();
  EXPECT_EQ(reference_params, train_net.params.size()) << "parameter sets differ";

  const Tensor losses = read_npy(dir / "losses.npy");
  const int steps = config["steps"];
  for (int s = 1; s <= steps; ++s) {
    core.memory().put(kMetrics, Tensor(DType::kF64, {kMetricSlots}));
    core.run(*step, {.step = s, .lr = config["lr"].get<double>(), .seed = 0});
    const double loss = core.read(kMetrics).values<double>()[kLossSum];
    const double expected = losses.values<float>()[static_cast<size_t>(s - 1)];
    EXPECT_NEAR(loss, expected, 1e-5 + 1e-4 * std::abs(expected)) << "loss at step " << s;
    if (s == 1) {
      for (size_t i = 0; i < train_net.params.size(); ++i) {
        const auto& name = train_net.params[i].name;
        ASSERT_NE(step->grads[i], runtime::kNoValue) << name;
        EXPECT_TRUE(close(core.read(*step, step->grads[i]),
                          read_npy(dir / "grads_init" / (name + ".npy")), "grad " + name));
      }
    }
  }
  for (const ParamDecl& p : train_net.params) {
    EXPECT_TRUE(close(core.read(p.name), read_npy(dir / "params_final" / (p.name + ".npy")), p.name));
  }
  core.run(*infer, {.step = steps + 1, .lr = 0, .seed = 0});
  EXPECT_TRUE(close(core.read(*infer, kLogits), read_npy(dir / "logits.npy"), "logits"));
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* name : {"gcn", "gcn_wide", "sage_mean", "sage_max", "gat", "gin", "gcn_adamw", "gcn_sgd",
                           "gcn_layernorm", "gcn_layernorm_node", "gcn_mse"}) {
    all.push_back({name, false});
    all.push_back({name, true});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(All, TrainGolden, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.name + (info.param.debug ? "_debug" : "_compiled");
                         });

}  // namespace
}  // namespace gnnrt::model
