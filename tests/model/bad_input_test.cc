// Bad input to the model layer ends in one clear error naming what and
// where: every rule of the job validation (model/job.cc), a missing job file,
// a last layer of the wrong width, a dataset without training nodes, each way
// a checkpoint can be wrong, and each way a program-cache entry can be (those
// are misses: the run recompiles and goes on).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/data/dataset.h"
#include "model/job.h"
#include "model/training/checkpoint.h"
#include "model/training/trainer.h"
#include "runtime/builder.h"
#include "runtime/core.h"
#include "runtime/program_cache.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

proto::Job small_job() {
  return parse_job(R"pb(
    dataset { path: "synthetic:nodes=120,classes=3,avg_degree=4,features=8,seed=2" }
    model {
      layer { type: GCN out: 6 }
      layer { type: RELU }
      layer { type: GCN }
    }
    schedule { epochs: 2 }
    seed: 5
  )pb", "test job");
}

struct Rule {
  std::string override_;  // --set applied to small_job()
  std::string message;
};

// One entry per check in validate() (model/job.cc), in its order, and one
// per enumeration, whose names outside it --set refuses itself (the
// layer-type-specific ones are in LayerSpecificRules).
const std::vector<Rule>& rules() {
  static const std::vector<Rule> list = {
      {"model.layer[0].type=gcnn", "'gcnn' is not a valid enum for gnnrt.model.proto.Layer.type"},
      {"model.layer[0].type=type_unset", "model.layer[0] (TYPE_UNSET): no type; use one of GCN, SAGE, GAT, GIN, LINEAR, "
                                         "LAYER_NORM, DROPOUT, RELU, ELU"},
      {"model.layer[0].out=-1", "model.layer[0] (GCN): out must be >= 0"},
      {"model.layer[0].heads=0", "model.layer[0] (GCN): heads must be >= 1"},
      {"model.layer[1].p=1", "model.layer[1] (RELU): p = 1 is not in [0, 1)"},
      {"model.layer[0].attention_dropout=-0.1", "attention_dropout = -0.1 is not in [0, 1)"},
      {"model.layer[0].hidden=-3", "model.layer[0] (GCN): hidden must be >= 0"},
      {"model.loss=hinge", "'hinge' is not a valid enum for gnnrt.model.proto.Model.loss"},
      {"optimizer.kind=lamb", "'lamb' is not a valid enum for gnnrt.model.proto.Optimizer.kind"},
      {"optimizer.lr=0", "optimizer.lr = 0 must be > 0"},
      {"optimizer.weight_decay=-1", "optimizer.weight_decay must be >= 0"},
      {"optimizer.beta1=1", "optimizer.beta1 = 1 and beta2 = 0.999 must be in [0, 1)"},
      {"optimizer.beta2=-0.5", "beta2 = -0.5 must be in [0, 1)"},
      {"optimizer.eps=0", "optimizer.eps = 0 must be > 0"},
      {"optimizer.momentum=-0.9", "optimizer.momentum must be >= 0"},
      {"schedule.epochs=-1", "schedule.epochs must be >= 0"},
      {"schedule.lr_schedule=linear", "'linear' is not a valid enum for gnnrt.model.proto.Schedule.lr_schedule"},
      {"schedule.step_size=0", "schedule.step_size must be >= 1"},
      {"schedule.gamma=0", "schedule.gamma = 0 must be > 0"},
      {"schedule.warmup_epochs=-2", "schedule.warmup_epochs must be >= 0"},
      {"checkpoint.every=-1", "checkpoint.every must be >= 0"},
      {"device.profile=trn3", "device.profile 'trn3' must be trn1 or trn2"},
      {"device.hbm_bytes=-1", "device.hbm_bytes must be >= 0"},
      {"partition.method=chaco", "'chaco' is not a valid enum for gnnrt.model.proto.Partition.method"},
      {"partition.halo=ring", "'ring' is not a valid enum for gnnrt.model.proto.Partition.halo"},
      {"partition.bucket_mb=0", "partition.bucket_mb = 0 must be > 0"},
      {"partition.checksum_every=-1", "partition.checksum_every must be >= 0"},
      {"partition.parts=-2", "partition.parts = -2 must be >= 0"},
  };
  return list;
}

class JobRule : public ::testing::TestWithParam<int> {};

TEST_P(JobRule, EachRuleNamesTheField) {
  const Rule& rule = rules()[GetParam()];
  proto::Job job = small_job();
  EXPECT_THAT(
      [&] {
        apply_override(job, rule.override_);
        validate(job);
      },
      testing::ThrowsMessage<JobError>(HasSubstr(rule.message)));
}

INSTANTIATE_TEST_SUITE_P(All, JobRule, ::testing::Range(0, static_cast<int>(rules().size())));

TEST(Job, LayerSpecificRules) {
  proto::Job job = small_job();
  apply_override(job, "model.layer[0].type=sage");
  EXPECT_THAT([&] { apply_override(job, "model.layer[0].aggr=sum"); },
              testing::ThrowsMessage<JobError>(HasSubstr("'sum' is not a valid enum for gnnrt.model.proto.Layer.aggr")));
  job = small_job();
  apply_override(job, "model.layer[1].type=layer_norm");
  EXPECT_THAT([&] { apply_override(job, "model.layer[1].mode=edge"); },
              testing::ThrowsMessage<JobError>(HasSubstr("'edge' is not a valid enum for gnnrt.model.proto.Layer.mode")));
  apply_override(job, "model.layer[1].mode=node");
  apply_override(job, "model.layer[1].norm_eps=0");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("model.layer[1] (LAYER_NORM): norm_eps must be > 0")));
  proto::Job empty = small_job();
  empty.mutable_model()->clear_layer();
  EXPECT_THAT([&] { validate(empty); }, testing::ThrowsMessage<JobError>(HasSubstr("model has no layers")));
  // A valid job passes.
  EXPECT_NO_THROW(validate(small_job()));
}

// The 32-bit node-id guard at its bound, on three ids: the node count
// alone decides.
TEST(Limits, NodesBeyond2To31AreRefused) {
  const std::vector<int64_t> ids{0, 5, 7};
  EXPECT_EQ(node_ids_32(ids, (int64_t{1} << 31) - 1, "graph"), (std::vector<int32_t>{0, 5, 7}));
  EXPECT_THAT([&] { node_ids_32(ids, int64_t{1} << 31, "graph"); },
              testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("graph: 2147483648 nodes exceed the 2^31 a core indexes")));
}

TEST(Job, MissingFileIsNamed) {
  EXPECT_THAT([] { load_job("/nonexistent/job.pbtxt"); },
              testing::ThrowsMessage<JobError>(HasSubstr("/nonexistent/job.pbtxt: cannot open the job file")));
}

TEST(Job, LastLayerMustGiveOneValuePerClass) {
  proto::Job job = small_job();
  apply_override(job, "model.layer[2].out=5");
  TrainOptions options;
  options.no_cache = true;
  options.progress = false;
  EXPECT_THAT([&] { train(job, options); },
              testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("the model's last layer gives 5 values per node, the dataset has 3 classes")));
}

TEST(Job, ADatasetWithoutTrainingNodesIsRefused) {
  proto::Job job = small_job();
  // Planetoid's split scaled down: 0 per class leaves no training node.
  apply_override(job, "dataset.path=synthetic:nodes=120,classes=3,avg_degree=4,features=8,train_per_class=0");
  TrainOptions options;
  options.no_cache = true;
  options.progress = false;
  EXPECT_THAT([&] { train(job, options); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr("has no training nodes")));
}

// ---- checkpoints ----

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gnnrt_ckpt_" + std::string(
        ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    options_.no_cache = true;
    options_.progress = false;
    job_ = small_job();
    apply_override(job_, "checkpoint.dir=" + dir_.string());
    train(job_, options_);
    ASSERT_TRUE(fs::exists(path()));
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The one checkpoint (every = 0: written after the last epoch).
  fs::path path() const { return checkpoint_path(dir_, 2); }
  std::string bytes() const {
    std::ifstream in(path(), std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void write(const std::string& b) const { std::ofstream(path(), std::ios::binary | std::ios::trunc) << b; }
  // Rewrites the checkpoint's state (with a valid checksum).
  template <typename Fn>
  void edit(Fn fn) const {
    proto::CheckpointState state = load_checkpoint(path());
    fn(state);
    save_checkpoint(path(), state);
  }
  void expect_refused(const std::string& message) {
    EXPECT_THAT([&] { train(job_, options_); },
                testing::ThrowsMessage<CheckpointError>(
                    testing::AllOf(HasSubstr(path().string()), HasSubstr(message))));
  }

  fs::path dir_;
  TrainOptions options_;
  proto::Job job_;
};

TEST_F(Checkpoints, Empty) {
  write("");
  expect_refused("the file is empty (0 bytes)");
}

TEST_F(Checkpoints, Truncated) {
  write(bytes().substr(0, bytes().size() - 100));
  expect_refused("truncated: ");
  write(bytes().substr(0, 12));
  expect_refused("truncated: 12 bytes, shorter than the 24-byte header");
}

TEST_F(Checkpoints, NotACheckpoint) {
  write("this is a text file, not a checkpoint");
  expect_refused("not a gnnrt checkpoint");
}

TEST_F(Checkpoints, BitFlip) {
  std::string b = bytes();
  b[b.size() / 2] ^= 0x10;
  write(b);
  expect_refused("checksum mismatch");
}

TEST_F(Checkpoints, AnotherModel) {
  apply_override(job_, "model.layer[0].out=7");
  expect_refused("was trained with another model");
}

TEST_F(Checkpoints, AnotherSeed) {
  apply_override(job_, "seed=6");
  expect_refused("trained with seed 5, the job has seed 6");
}

TEST_F(Checkpoints, WrongTensorSize) {
  edit([](proto::CheckpointState& s) {
    for (auto& t : *s.mutable_tensors()) {
      if (t.name() == "conv1.lin.weight") t.mutable_data()->resize(t.data().size() - 4);
    }
  });
  expect_refused("tensor 'conv1.lin.weight' has 188 bytes for shape [6, 8]");
}

TEST_F(Checkpoints, MissingParameter) {
  edit([](proto::CheckpointState& s) {
    auto* tensors = s.mutable_tensors();
    for (int i = 0; i < tensors->size(); ++i) {
      if (tensors->Get(i).name() == "conv2.bias") {
        tensors->DeleteSubrange(i, 1);
        break;
      }
    }
  });
  expect_refused("has no parameter 'conv2.bias' [3]");
}

TEST_F(Checkpoints, ParameterOfAnotherShape) {
  edit([](proto::CheckpointState& s) {
    for (auto& t : *s.mutable_tensors()) {
      if (t.name() == "conv2.bias") {
        t.clear_shape();
        t.add_shape(1);
        t.add_shape(3);
      }
    }
  });
  expect_refused("parameter 'conv2.bias' has shape [1, 3], the model needs [3]");
}

// ---- program cache ----

runtime::Program small_program() {
  runtime::Builder b("cache_test");
  const auto x = b.input("x", DType::kF32, {4, 3});
  const auto w = b.parameter("w", {2, 3});
  b.output(b.relu(b.linear(x, w)));
  return b.take();
}

class Cache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gnnrt_cache_" + std::string(
        ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    options_.cache_dir = dir_;
    runtime::Core core(runtime::DeviceProfile::named("trn1"), options_);
    key_ = core.compile(small_program(), {})->key;
    ASSERT_TRUE(fs::exists(entry()));
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path entry() const { return runtime::ProgramCache(dir_).path(key_); }
  // Compiles again on a fresh core: how many compiles it took.
  int64_t compiles() const {
    runtime::Core core(runtime::DeviceProfile::named("trn1"), options_);
    core.compile(small_program(), {});
    return core.counters().compiles;
  }

  fs::path dir_;
  runtime::CoreOptions options_;
  std::string key_;
};

TEST_F(Cache, AValidEntryIsAHit) { EXPECT_EQ(compiles(), 0); }

TEST_F(Cache, ABitFlipAtValidLengthIsAMissAndIsRewritten) {
  std::string b;
  {
    std::ifstream in(entry(), std::ios::binary);
    b.assign(std::istreambuf_iterator<char>(in), {});
  }
  b[b.size() - 5] ^= 0x01;  // same length: only the checksum can tell
  std::ofstream(entry(), std::ios::binary | std::ios::trunc) << b;
  EXPECT_EQ(compiles(), 1);
  EXPECT_EQ(compiles(), 0);  // the recompiled entry replaced it
}

TEST_F(Cache, AnotherCompilerVersionIsAMiss) {
  // The same key with a valid checksum, written by another compiler.
  runtime::Core core(runtime::DeviceProfile::named("trn1"), {});
  runtime::CompiledProgram c = *core.compile(small_program(), {});
  c.key = key_;
  runtime::ProgramCache(dir_).store(c, "gnnrt-compiler-0+older");
  EXPECT_EQ(compiles(), 1);
}

TEST_F(Cache, AnUnwritableDirectoryOnlyWarns) {
  fs::remove_all(dir_);
  std::ofstream(dir_) << "a file where the cache directory should be";
  EXPECT_EQ(compiles(), 1);  // compiled and ran on without storing
  EXPECT_EQ(compiles(), 1);
  fs::remove(dir_);
}

}  // namespace
}  // namespace gnnrt::model
