// The trainer end to end on the synthetic dataset: the program cache across
// runs (a second run compiles nothing, a new learning rate recompiles
// nothing, a new layer size does), exact resume (N epochs == K + resume for
// N - K, bit for bit), checkpoint checksums, parameter import/export, job
// overrides and their errors. Cora accuracy lives in cora_accuracy_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/job.h"
#include "model/training/checkpoint.h"
#include "model/training/schedule.h"
#include "model/training/trainer.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

proto::Job small_job() {
  return parse_job(R"pb(
    dataset { path: "synthetic:nodes=300,classes=3,avg_degree=6,features=16,seed=2" }
    model {
      layer { type: DROPOUT p: 0.3 }
      layer { type: GCN out: 8 }
      layer { type: RELU }
      layer { type: DROPOUT p: 0.3 }
      layer { type: GCN }
    }
    schedule { epochs: 6 }
    seed: 7
  )pb", "test job");
}

class Trainer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("gnnrt_trainer_" + std::string(
        testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.cache_dir = dir_ / "cache";
    options_.progress = false;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  TrainOptions options_;
};

TEST_F(Trainer, SecondRunCompilesNothingAndTheLearningRateNeverRecompiles) {
  proto::Job job = small_job();
  const TrainResult first = train(job, options_);
  EXPECT_EQ(first.counters.compiles, 2);  // train step and inference
  EXPECT_EQ(first.counters.cache_hits, 0);
  const TrainResult second = train(job, options_);
  EXPECT_EQ(second.counters.compiles, 0);
  EXPECT_EQ(second.counters.cache_hits, 2);

  apply_override(job, "optimizer.lr=0.003");
  apply_override(job, "schedule.lr_schedule=cosine");
  EXPECT_EQ(train(job, options_).counters.compiles, 0);

  apply_override(job, "model.layer[1].out=12");
  const TrainResult resized = train(job, options_);
  EXPECT_EQ(resized.counters.compiles, 2);
}

TEST_F(Trainer, MetricsAreReadOncePerEpoch) {
  options_.metrics_path = dir_ / "metrics.jsonl";
  const TrainResult r = train(small_job(), options_);
  EXPECT_EQ(r.counters.host_syncs, 6);
  std::ifstream in(options_.metrics_path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    for (const char* key : {"\"epoch\"", "\"loss\"", "\"train_acc\"", "\"val_acc\"", "\"test_acc\"",
                            "\"ms\"", "\"compiles\"", "\"cache_hits\""}) {
      EXPECT_THAT(line, HasSubstr(key));
    }
  }
  EXPECT_EQ(lines, 6);
}

// The final checkpoint's tensors (parameters, Adam moments, best parameters).
std::map<std::string, std::string> checkpoint_tensors(const fs::path& dir) {
  std::map<std::string, std::string> tensors;
  const proto::CheckpointState state = load_checkpoint(checkpoint_path(dir, 6));
  for (const auto& t : state.tensors()) tensors[t.name()] = t.data();
  return tensors;
}

TEST_F(Trainer, ResumeIsExact) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + (dir_ / "once").string());
  train(job, options_);

  apply_override(job, "checkpoint.dir=" + (dir_ / "twice").string());
  apply_override(job, "schedule.epochs=4");
  train(job, options_);
  apply_override(job, "schedule.epochs=6");
  const TrainResult rest = train(job, options_);
  ASSERT_EQ(rest.epochs.size(), 2u);  // epochs 5 and 6 only
  EXPECT_EQ(rest.epochs.front().epoch, 5);

  const auto once = checkpoint_tensors(dir_ / "once");
  const auto twice = checkpoint_tensors(dir_ / "twice");
  ASSERT_EQ(once.size(), twice.size());
  EXPECT_GT(once.count("conv1.lin.weight.exp_avg_sq"), 0u);
  for (const auto& [name, bytes] : once) {
    ASSERT_TRUE(twice.count(name)) << name;
    EXPECT_TRUE(twice.at(name) == bytes) << name << " differs after resume";
  }
}

std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A stop request ends the run after that epoch with its checkpoint and no
// --params-out or --logits-out (those are the finished run's); the resumed
// run then ends with the parameters of a run that was never stopped.
TEST_F(Trainer, AStoppedRunCheckpointsAndLeavesTheOutputsToTheRunThatFinishes) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + (dir_ / "once").string());
  options_.params_out = dir_ / "once_params";
  train(job, options_);

  apply_override(job, "checkpoint.dir=" + (dir_ / "stopped").string());
  options_.params_out = dir_ / "params";
  options_.logits_out = dir_ / "logits.npy";
  int polls = 0;
  options_.stop_requested = [&] { return ++polls == 2; };  // asked during epoch 2
  const TrainResult stopped = train(job, options_);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.epochs.size(), 2u);
  EXPECT_FALSE(fs::exists(options_.params_out));
  EXPECT_FALSE(fs::exists(options_.logits_out));
  EXPECT_EQ(file_names(dir_ / "stopped"), std::vector<std::string>{"ckpt-00000002.ckpt"});

  options_.stop_requested = {};
  const TrainResult rest = train(job, options_);
  EXPECT_FALSE(rest.stopped);
  EXPECT_EQ(rest.start_epoch, 2);
  EXPECT_TRUE(fs::exists(options_.logits_out));
  for (const char* key : {"conv1.lin.weight", "conv1.bias", "conv2.lin.weight", "conv2.bias"}) {
    const Tensor once = read_npy(dir_ / "once_params" / (std::string(key) + ".npy"));
    const Tensor resumed = read_npy(options_.params_out / (std::string(key) + ".npy"));
    const auto a = once.values<float>();
    const auto b = resumed.values<float>();
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << key;
  }
}

// What the default logger writes while this lives.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~CapturedLog() { spdlog::default_logger()->sinks().pop_back(); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  spdlog::sink_ptr sink_;
};

TEST_F(Trainer, KeepsTheNewestCheckpoints) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + dir_.string() + "/k");
  apply_override(job, "checkpoint.every=1");
  train(job, options_);
  EXPECT_EQ(file_names(dir_ / "k"), (std::vector<std::string>{"ckpt-00000005.ckpt", "ckpt-00000006.ckpt"}));
  apply_override(job, "checkpoint.keep=4");
  apply_override(job, "schedule.epochs=9");
  train(job, options_);
  EXPECT_EQ(file_names(dir_ / "k"), (std::vector<std::string>{"ckpt-00000006.ckpt", "ckpt-00000007.ckpt",
                                                             "ckpt-00000008.ckpt", "ckpt-00000009.ckpt"}));
  apply_override(job, "checkpoint.keep=0");
  EXPECT_THAT([&] { train(job, options_); }, testing::ThrowsMessage<JobError>(HasSubstr("checkpoint.keep must be >= 1")));
}

// A truncated newest checkpoint (a disk that lost its tail) and a corrupt
// one: the run resumes from the previous one, says so naming both, sets the
// bad one aside, removes a killed writer's temporary file, and still ends
// with the uninterrupted run's state, bit for bit.
TEST_F(Trainer, ACorruptNewestCheckpointFallsBackToThePrevious) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + (dir_ / "straight").string());
  train(job, options_);
  const auto straight = checkpoint_tensors(dir_ / "straight");
  for (const bool truncate : {true, false}) {
    const fs::path dir = dir_ / (truncate ? "truncated" : "flipped");
    apply_override(job, "checkpoint.dir=" + dir.string());
    apply_override(job, "checkpoint.every=1");
    apply_override(job, "checkpoint.keep=3");
    apply_override(job, "schedule.epochs=4");
    train(job, options_);
    const fs::path newest = checkpoint_path(dir, 4);
    std::string bytes;
    {
      std::ifstream in(newest, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    if (truncate) {
      bytes.resize(bytes.size() / 2);
    } else {
      bytes[bytes.size() - 9] ^= 0x04;
    }
    std::ofstream(newest, std::ios::binary | std::ios::trunc) << bytes;
    std::ofstream(dir / "ckpt-00000005.ckpt.tmp.999999") << "a killed writer's partial file";
    apply_override(job, "schedule.epochs=6");
    CapturedLog log;
    const TrainResult rest = train(job, options_);
    EXPECT_EQ(rest.start_epoch, 3);
    EXPECT_THAT(log.text(), testing::AllOf(HasSubstr(newest.string()), HasSubstr(checkpoint_path(dir, 3).string()),
                                           HasSubstr(truncate ? "truncated" : "checksum mismatch"),
                                           HasSubstr("resuming from the previous checkpoint")));
    EXPECT_EQ(file_names(dir), (std::vector<std::string>{"ckpt-00000004.ckpt", "ckpt-00000004.ckpt.corrupt",
                                                        "ckpt-00000005.ckpt", "ckpt-00000006.ckpt"}));
    const auto resumed = checkpoint_tensors(dir);
    ASSERT_EQ(resumed.size(), straight.size());
    for (const auto& [name, b] : straight) EXPECT_TRUE(resumed.at(name) == b) << name << " differs";
  }
}

// An entry of the checkpoint folder named like the newest checkpoint that
// is not a readable file (a directory): set aside, never removed, with a
// warning naming it (also to the notice callback, the launcher's console),
// and the run resumes from the newest checkpoint that loads, to the
// uninterrupted run's state. A later write of that name is not blocked,
// and pruning never removes what is not a checkpoint file.
TEST_F(Trainer, ACheckpointNamedEntryThatIsADirectoryIsSetAside) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + (dir_ / "straight").string());
  train(job, options_);
  const auto straight = checkpoint_tensors(dir_ / "straight");
  const fs::path dir = dir_ / "odd";
  apply_override(job, "checkpoint.dir=" + dir.string());
  apply_override(job, "checkpoint.every=1");
  apply_override(job, "schedule.epochs=3");
  train(job, options_);
  fs::create_directories(checkpoint_path(dir, 5) / "inside");  // newer than any checkpoint, not empty
  fs::create_directories(dir / "ckpt-00000001.ckpt");           // older: pruning must leave it
  std::vector<std::pair<std::string, std::string>> notices;
  options_.on_notice = [&](const std::string& level, const std::string& text) { notices.emplace_back(level, text); };
  apply_override(job, "schedule.epochs=6");
  const TrainResult rest = train(job, options_);
  EXPECT_EQ(rest.start_epoch, 3);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].first, "warning");
  EXPECT_THAT(notices[0].second,
              testing::AllOf(HasSubstr(checkpoint_path(dir, 5).string() + ": a directory, not a file"),
                             HasSubstr("set aside as ckpt-00000005.ckpt.corrupt"),
                             HasSubstr("resuming from the previous checkpoint, " + checkpoint_path(dir, 3).string())));
  EXPECT_TRUE(fs::is_directory(dir / "ckpt-00000005.ckpt.corrupt" / "inside"));
  EXPECT_TRUE(fs::is_directory(dir / "ckpt-00000001.ckpt"));
  EXPECT_TRUE(fs::is_regular_file(checkpoint_path(dir, 5)));
  const auto resumed = checkpoint_tensors(dir);
  ASSERT_EQ(resumed.size(), straight.size());
  for (const auto& [name, b] : straight) EXPECT_TRUE(resumed.at(name) == b) << name << " differs";

  // The same again at the same name: the first one set aside is kept too.
  fs::remove(checkpoint_path(dir, 6));
  fs::create_directories(checkpoint_path(dir, 6));
  notices.clear();
  train(job, options_);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_THAT(notices[0].second, HasSubstr("set aside as ckpt-00000006.ckpt.corrupt"));
  fs::remove(checkpoint_path(dir, 6));
  fs::create_directories(checkpoint_path(dir, 6));
  notices.clear();
  train(job, options_);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_THAT(notices[0].second, HasSubstr("set aside as ckpt-00000006.ckpt.corrupt-2"));
  EXPECT_TRUE(fs::is_directory(dir / "ckpt-00000006.ckpt.corrupt"));
  EXPECT_TRUE(fs::is_directory(dir / "ckpt-00000006.ckpt.corrupt-2"));
}

// A resume that finds no checkpoint says so: a warning when the folder is
// there but empty (its checkpoints deleted), news when it does not exist yet.
TEST_F(Trainer, AResumeThatFindsNoCheckpointSaysSo) {
  proto::Job job = small_job();
  const fs::path dir = dir_ / "empty";
  apply_override(job, "checkpoint.dir=" + dir.string());
  apply_override(job, "schedule.epochs=2");
  std::vector<std::pair<std::string, std::string>> notices;
  options_.on_notice = [&](const std::string& level, const std::string& text) { notices.emplace_back(level, text); };
  train(job, options_);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0], std::make_pair(std::string("info"), "no checkpoint found in " + dir.string() +
                                                                " (not there yet), starting at epoch 1"));
  for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
  notices.clear();
  const TrainResult again = train(job, options_);
  EXPECT_EQ(again.start_epoch, 0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0], std::make_pair(std::string("warning"),
                                       "no checkpoint found in " + dir.string() + ", starting at epoch 1"));
}

// A checkpoint folder that cannot be listed (a file where the folder should
// be) is an error naming it, never "none found, starting at epoch 1".
TEST_F(Trainer, ACheckpointFolderThatIsAFileIsRefused) {
  proto::Job job = small_job();
  const fs::path file = dir_ / "not_a_folder";
  std::ofstream(file) << "x";
  apply_override(job, "checkpoint.dir=" + file.string());
  EXPECT_THAT([&] { train(job, options_); },
              testing::ThrowsMessage<CheckpointError>(HasSubstr("checkpoint.dir " + file.string() + ": not a folder")));
}

// --metrics holds whole records: a torn tail (a machine that stopped
// mid-record) is cut back when a resumed run opens it, the records past the
// checkpoint are cut in place, and no temporary file is made.
TEST_F(Trainer, MetricsKeepWholeRecordsAcrossAResume) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + (dir_ / "c").string());
  apply_override(job, "checkpoint.every=2");
  options_.metrics_path = dir_ / "metrics.jsonl";
  train(job, options_);
  // The run "died" after epoch 6 with epoch 4's checkpoint newest, and its
  // last record torn.
  fs::remove(checkpoint_path(dir_ / "c", 6));
  {
    std::ofstream torn(options_.metrics_path, std::ios::app);
    torn << R"({"epoch": 7, "loss": 0.)";
  }
  apply_override(job, "schedule.epochs=7");
  train(job, options_);
  std::ifstream in(options_.metrics_path);
  std::vector<int> epochs;
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"epoch\":");
    ASSERT_NE(at, std::string::npos) << line;
    ASSERT_EQ(line.back(), '}') << line;
    epochs.push_back(std::stoi(line.substr(at + 8)));
  }
  EXPECT_EQ(epochs, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(file_names(dir_).size(), 3u);  // c/, cache/ and metrics.jsonl: no temporary file
}

TEST_F(Trainer, CorruptCheckpointIsRefusedWithTheFileNamed) {
  proto::Job job = small_job();
  apply_override(job, "checkpoint.dir=" + dir_.string());
  train(job, options_);
  const fs::path path = checkpoint_path(dir_, 6);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_THAT([&] { train(job, options_); },
              testing::Throws<CheckpointError>(testing::Property(
                  &CheckpointError::what,
                  testing::AllOf(HasSubstr(path.string()), testing::AnyOf(HasSubstr("checksum"),
                                                                          HasSubstr("corrupt"))))));
}

TEST_F(Trainer, ParametersRoundTripThroughNpy) {
  proto::Job job = small_job();
  apply_override(job, "schedule.epochs=0");
  options_.params_out = dir_ / "params";
  options_.logits_out = dir_ / "logits.npy";
  train(job, options_);
  const Tensor w = read_npy(options_.params_out / "conv1.lin.weight.npy");
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(read_npy(options_.logits_out).shape(), (std::vector<int64_t>{300, 3}));

  // Import them again: the logits of an untrained model are the same.
  TrainOptions again = options_;
  again.params_in = options_.params_out;
  again.logits_out = dir_ / "logits2.npy";
  train(job, again);
  const Tensor first = read_npy(options_.logits_out);
  const Tensor second = read_npy(again.logits_out);
  const auto a = first.values<float>();
  const auto b = second.values<float>();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));

  // A changed parameter file changes the logits: --params-in is really read.
  Tensor scaled = read_npy(options_.params_out / "conv2.lin.weight.npy");
  for (float& v : scaled.values<float>()) v *= 2;
  write_npy(options_.params_out / "conv2.lin.weight.npy", scaled);
  again.logits_out = dir_ / "logits3.npy";
  train(job, again);
  const Tensor third = read_npy(again.logits_out);
  EXPECT_FALSE(std::equal(a.begin(), a.end(), third.values<float>().begin()));

  Tensor wrong(DType::kF32, {8, 15});
  write_npy(options_.params_out / "conv1.lin.weight.npy", wrong);
  EXPECT_THAT([&] { train(job, again); },
              testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("mismatched: [conv1.lin.weight: [8, 15] float32 in the file, [8, 16] float32 in the model]")));
}

// The layer chain's --params-in refuses NaN and Inf too, naming key and position.
TEST_F(Trainer, NonFiniteParametersAreRefused) {
  proto::Job job = small_job();
  apply_override(job, "schedule.epochs=0");
  options_.params_out = dir_ / "params";
  train(job, options_);
  const fs::path file = options_.params_out / "conv1.lin.weight.npy";
  const Tensor w = read_npy(file);
  auto v = w.to_vector<float>();
  v[2 * w.shape()[1] + 5] = std::nanf("");
  write_npy<float>(file, v, w.shape());
  TrainOptions in = options_;
  in.params_in = options_.params_out;
  in.params_out.clear();
  EXPECT_THAT([&] { train(job, in); }, testing::ThrowsMessage<std::invalid_argument>(
                                           HasSubstr("--params-in " + file.string() + ": conv1.lin.weight[2, 5] is nan")));
}

// The layer chain loads --params-in as torch's load_state_dict(strict=True):
// an unexpected key or a non-float file is refused, every problem listed
// in one error; --params-non-strict loads the rest.
TEST_F(Trainer, TheLayerChainLoadsItsStateDictStrictly) {
  proto::Job job = small_job();
  apply_override(job, "schedule.epochs=0");
  options_.params_out = dir_ / "params";
  train(job, options_);
  const fs::path in = options_.params_out;
  write_npy<float>(in / "extra.weight.npy", std::vector<float>{1, 2}, {2});
  const Tensor bias = read_npy(in / "conv1.bias.npy");
  write_npy<uint8_t>(in / "conv1.bias.npy", std::vector<uint8_t>(static_cast<size_t>(bias.size()), 1),
                     bias.shape());
  TrainOptions o = options_;
  o.params_in = in;
  o.params_out.clear();
  EXPECT_THAT([&] { train(job, o); },
              testing::ThrowsMessage<std::invalid_argument>(testing::AllOf(
                  HasSubstr("unexpected keys: [extra.weight]"),
                  HasSubstr("mismatched: [conv1.bias: [8] bool in the file, [8] float32 in the model]"))));
  o.params_non_strict = true;
  EXPECT_NO_THROW(train(job, o));
}

// GINConv's eps in the state_dict as PyG writes it: a buffer holding the
// job's eps, or with train_eps a parameter that starts there and trains.
TEST_F(Trainer, GinWritesEpsAsABufferOrATrainedParameter) {
  proto::Job job = small_job();
  apply_override(job, "model.layer[1].type=gin");
  apply_override(job, "model.layer[1].eps=0.25");
  apply_override(job, "schedule.epochs=0");
  const auto eps_after = [&](const char* name) {
    options_.params_out = dir_ / name;
    train(job, options_);
    return read_npy(options_.params_out / "conv1.eps.npy").to_vector<float>();
  };
  EXPECT_EQ(eps_after("buffer"), std::vector<float>{0.25f});
  apply_override(job, "model.layer[1].train_eps=true");
  EXPECT_EQ(eps_after("initial"), std::vector<float>{0.25f});
  apply_override(job, "schedule.epochs=3");
  const std::vector<float> trained = eps_after("trained");
  ASSERT_EQ(trained.size(), 1u);
  EXPECT_NE(trained[0], 0.25f);
  EXPECT_NEAR(trained[0], 0.25f, 0.1f);  // three Adam steps of lr 0.01
}

TEST(Job, OverridesAndErrorsNameTheField) {
  proto::Job job = small_job();
  apply_override(job, "optimizer.lr=0.005");
  EXPECT_DOUBLE_EQ(job.optimizer().lr(), 0.005);
  apply_override(job, "dataset.path=../shared/datasets/cora");
  EXPECT_EQ(job.dataset().path(), "../shared/datasets/cora");
  apply_override(job, "model.layer[5].type=relu");  // index == size appends
  EXPECT_EQ(job.model().layer_size(), 6);
  EXPECT_THAT([&] { apply_override(job, "optimizer.lrr=1"); },
              testing::ThrowsMessage<JobError>(HasSubstr("Optimizer has no field 'lrr'")));
  EXPECT_THAT([&] { apply_override(job, "optimizer.lr=fast"); },
              testing::ThrowsMessage<JobError>(HasSubstr("'fast' is not a valid double")));
  EXPECT_THAT([&] { apply_override(job, "model.layer[9].out=3"); },
              testing::ThrowsMessage<JobError>(HasSubstr("has 6 elements")));
  EXPECT_THAT([&] { parse_job("model { layer { type: GCN out: } }", "bad.pbtxt"); },
              testing::ThrowsMessage<JobError>(HasSubstr("bad.pbtxt: line 1")));
  EXPECT_THAT([&] { apply_override(job, "model.layer[1].type=gcnn"); },
              testing::ThrowsMessage<JobError>(HasSubstr("'gcnn' is not a valid enum for gnnrt.model.proto.Layer.type")));
  apply_override(job, "model.layer[1].type=sage");  // an enumeration in any case
  EXPECT_EQ(job.model().layer(1).type(), proto::Layer::SAGE);
  apply_override(job, "optimizer.kind=\"sgd\"");
  EXPECT_EQ(job.optimizer().kind(), proto::Optimizer::SGD);
  // An older job file's quoted lower-case names read as the bare ones; a
  // name outside the enumeration is refused with its place.
  const proto::Job old = parse_job(R"(model { layer { type: "gcn" aggr: "max" mode: "node" } loss: "mse" }
                                      optimizer { kind: "adamw" } dataset { path: "gcn" features: "sparse" })",
                                   "old.pbtxt");
  EXPECT_EQ(old.model().layer(0).type(), proto::Layer::GCN);
  EXPECT_EQ(old.model().layer(0).aggr(), proto::Layer::MAX);
  EXPECT_EQ(old.model().layer(0).mode(), proto::Layer::NODE);
  EXPECT_EQ(old.model().loss(), proto::Model::MSE);
  EXPECT_EQ(old.optimizer().kind(), proto::Optimizer::ADAMW);
  EXPECT_EQ(old.dataset().features(), proto::Dataset::SPARSE);
  EXPECT_EQ(old.dataset().path(), "gcn");  // a string field keeps its quotes' text
  EXPECT_THAT([&] { parse_job("model { layer { type: \"gcnn\" } }", "quoted.pbtxt"); },
              testing::ThrowsMessage<JobError>(HasSubstr("quoted.pbtxt: line 1, column 28: Unknown enumeration value of \"GCNN\"")));
}

TEST(Schedule, LearningRates) {
  proto::Job job = small_job();
  apply_override(job, "optimizer.lr=0.1");
  EXPECT_DOUBLE_EQ(learning_rate(job, 5), 0.1);
  apply_override(job, "schedule.lr_schedule=step");
  apply_override(job, "schedule.step_size=2");
  apply_override(job, "schedule.gamma=0.5");
  EXPECT_DOUBLE_EQ(learning_rate(job, 5), 0.1 * 0.25);
  apply_override(job, "schedule.warmup_epochs=2");
  EXPECT_DOUBLE_EQ(learning_rate(job, 0), 0.05);
}

}  // namespace
}  // namespace gnnrt::model
