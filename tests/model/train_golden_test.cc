// The trainer's arithmetic against an independent PyTorch reference
// (tests/reference/gnn_reference.py, written from PyG's formulas; golden
// files from tests/reference/make_train_golden.py). Each case is a gnnrt job
// (config.json) that the reference interprets on its own: same initial
// weights, 5 optimizer steps (with the job's dropout masks and learning-rate
// schedule) on a small graph. Per step the loss and the learning rate, at
// step 1 every parameter gradient, after the steps every parameter and the
// logits must match within rtol 1e-4 (atol 1e-5). Runs compiled (fused,
// reordered) and in debug mode (unfused), and compiled with the features
// held sparse (every case whose first layer can take them).
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/data/dataset.h"
#include "model/job.h"
#include "model/modules/network.h"
#include "model/training/schedule.h"
#include "model/training/full_graph.h"
#include "model/training/trainer.h"
#include "runtime/core.h"
#include "runtime/npy.h"
#include "tests/common/compiled_job.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGolden = GNNRT_TRAIN_GOLDEN_DIR;

proto::Job job_of(const json& config) {
  proto::Job job;
  // The reference writes enumerations as the command line spells them ("gcn").
  google::protobuf::util::JsonParseOptions parse;
  parse.case_insensitive_enum_parsing = true;
  const auto status = google::protobuf::util::JsonStringToMessage(config.at("job").dump(), &job, parse);
  if (!status.ok()) throw std::runtime_error("config.json's job: " + status.ToString());
  validate(job);
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
  bool sparse;  // the features held as CSR (dataset.features = sparse)
};

class TrainGolden : public ::testing::TestWithParam<Case> {};

TEST_P(TrainGolden, MatchesTorch) {
  const fs::path dir = kGolden / GetParam().name;
  std::ifstream config_file(dir / "config.json");
  ASSERT_TRUE(config_file) << dir;
  const json config = json::parse(config_file);
  proto::Job job = job_of(config);
  apply_override(job, std::string("dataset.features=") + (GetParam().sparse ? "sparse" : "dense"));
  Dataset data = load_npy_folder(kGolden / config.at("graph").get<std::string>());
  prepare_features(data, job);
  ASSERT_EQ(data.x_sparse.has_value(), GetParam().sparse);

  runtime::CoreOptions core_options;
  core_options.debug = GetParam().debug;
  runtime::Core core(runtime::DeviceProfile::named("trn1"), core_options);
  const testing::CompiledJob compiled = testing::compile_job(core, job, bind_dataset(core, data, job.model()));
  const Network& train_net = compiled.train_net;
  const auto& step = compiled.step;
  const auto& infer = compiled.infer;
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
  const Tensor lrs = read_npy(dir / "lrs.npy");
  const int steps = config["steps"];
  for (int s = 1; s <= steps; ++s) {
    const double lr = learning_rate(job, s - 1);
    EXPECT_NEAR(lr, lrs.values<double>()[static_cast<size_t>(s - 1)], 1e-12) << "lr at step " << s;
    core.memory().put(kMetrics, Tensor(DType::kF64, {kMetricSlots}));
    core.run(*step, {.step = s, .lr = lr, .seed = job.seed()});
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
  core.run(*infer, {.step = steps + 1, .lr = 0, .seed = job.seed()});
  EXPECT_TRUE(close(core.read(*infer, kLogits), read_npy(dir / "logits.npy"), "logits"));
}

// Every case folder the reference wrote (a case on disk nobody runs would
// pass silently).
std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    if (fs::exists(entry.path() / "config.json")) names.push_back(entry.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const std::string& name : case_names()) {
    all.push_back({name, false, false});
    all.push_back({name, true, false});
    std::ifstream config_file(kGolden / name / "config.json");
    if (sparse_features_unsupported(job_of(json::parse(config_file)).model()).empty()) {
      all.push_back({name, false, true});
    }
  }
  return all;
}

TEST(TrainGoldenData, CoversTheIssuesCases) {
  const auto names = case_names();
  for (const char* name : {"gat_heads_mean", "gin_eps", "gin_train_eps", "gcn_dropout", "deep_linear", "sage_max_ties",
                           "directed_gcn_sage", "directed_gat", "gcn_sgd_nesterov"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

// PyG's state_dict both ways: torch's model.state_dict() (buffers such as
// GINConv's eps and aliases such as GATConv's lin_dst included), saved key
// by key by the reference, loads strictly with --params-in, and after no
// training --params-out writes exactly those keys with their shapes (what
// torch's load_state_dict(strict=True) checks), float32, bit for bit.
class StateDictGolden : public ::testing::TestWithParam<std::string> {};

// Each key's shape and bytes.
std::map<std::string, std::pair<std::vector<int64_t>, std::vector<std::byte>>> keys_in(const fs::path& dir) {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<std::byte>>> keys;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const Tensor t = read_npy(entry.path());
    EXPECT_EQ(t.dtype(), DType::kF32) << entry.path();
    const auto bytes = t.bytes();
    keys[entry.path().stem().string()] = {t.shape(), std::vector<std::byte>(bytes.begin(), bytes.end())};
  }
  return keys;
}

TEST_P(StateDictGolden, TorchsStateDictLoadsStrictlyAndComesBackWithTheSameKeys) {
  const fs::path dir = kGolden / GetParam();
  std::ifstream config_file(dir / "config.json");
  const json config = json::parse(config_file);
  proto::Job job = job_of(config);
  apply_override(job, "dataset.path=" + (kGolden / config.at("graph").get<std::string>()).string());
  apply_override(job, "schedule.epochs=0");
  const fs::path out = fs::path(::testing::TempDir()) / ("gnnrt_state_dict_" + GetParam());
  fs::remove_all(out);
  TrainOptions options;
  options.no_cache = true;
  options.progress = false;
  options.params_in = dir / "state_dict";
  options.params_out = out / "params";
  ASSERT_NO_THROW(train(job, options));
  EXPECT_EQ(keys_in(options.params_out), keys_in(dir / "state_dict"));
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(All, StateDictGolden, ::testing::ValuesIn(case_names()));

// A buffer is fixed by the job: a file holding another value is refused
// (the program was built with the job's eps), naming the key.
TEST(StateDictGoldenData, ABufferThatDiffersFromTheJobIsRefused) {
  const fs::path dir = kGolden / "gin_eps";
  std::ifstream config_file(dir / "config.json");
  const json config = json::parse(config_file);
  proto::Job job = job_of(config);
  apply_override(job, "dataset.path=" + (kGolden / config.at("graph").get<std::string>()).string());
  apply_override(job, "model.layer[0].eps=0.25");
  TrainOptions options;
  options.no_cache = true;
  options.progress = false;
  options.params_in = dir / "state_dict";
  try {
    train(job, options);
    ADD_FAILURE() << "loaded conv1.eps = 0.3 into a job with eps 0.25";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("conv1.eps: holds [0.3] in the file, the model was built with [0.25]"),
              std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(All, TrainGolden, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.name + (info.param.debug    ? "_debug"
                                                     : info.param.sparse ? "_sparse"
                                                                         : "_compiled");
                         });

}  // namespace
}  // namespace gnnrt::model
