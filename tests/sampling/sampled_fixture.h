// What the sampled-training tests share (sampled_train_test.cc,
// link_train_test.cc): the torch golden cases' jobs
// (tests/reference/make_sampled_golden.py), a fixture that trains into a
// folder of its own, parameter folders compared, and refused fields.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/job.h"
#include "model/training/trainer.h"
#include "runtime/npy.h"
#include "tests/common/training_folder.h"

namespace gnnrt::model::sampled_testing {

namespace fs = std::filesystem;
inline const fs::path kGolden = GNNRT_SAMPLED_GOLDEN_DIR;

inline nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Golden case `name`'s job, on the golden graph.
inline proto::Job golden_job(const std::string& name) {
  const nlohmann::json config = read_json(kGolden / name / "config.json");
  proto::Job job;
  google::protobuf::util::JsonParseOptions parse;
  parse.case_insensitive_enum_parsing = true;
  const auto status = google::protobuf::util::JsonStringToMessage(config.at("job").dump(), &job, parse);
  if (!status.ok()) throw std::runtime_error("config.json's job: " + status.ToString());
  job.mutable_dataset()->set_path(GNNRT_TRAIN_GOLDEN_DIR "/graph");
  return job;
}

// Every parameter file of `want` against the same file of `got`, value by
// value within atol + rtol |want|; `compared` counts the files. Use under
// ASSERT_NO_FATAL_FAILURE.
inline void expect_params_near(const fs::path& want, const fs::path& got, double atol, double rtol, int& compared) {
  compared = 0;
  for (const auto& entry : fs::directory_iterator(want)) {
    const auto a = read_npy(entry.path()).to_vector<double>();
    const auto b = read_npy(got / entry.path().filename()).to_vector<double>();
    ASSERT_EQ(b.size(), a.size()) << entry.path().filename();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(b[i], a[i], atol + rtol * std::abs(a[i])) << entry.path().filename() << "[" << i << "]";
    }
    ++compared;
  }
}

class SampledTraining : public gnnrt::fixtures::TrainingFolder {
 protected:
  SampledTraining() : TrainingFolder("sampled") {}

  // Trains `job`, starting from `init`; returns each epoch's mean loss and
  // leaves the parameters in dir_/<out> (the best validation epoch's).
  std::vector<double> run(const proto::Job& job, const fs::path& init, const std::string& out,
                          TrainResult* result = nullptr) {
    std::vector<double> losses;
    TrainOptions o = options_;
    o.params_in = init;
    o.params_out = dir_ / out;
    o.on_epoch = [&](const EpochMetrics& m) { losses.push_back(m.loss); };
    const TrainResult r = train(job, o);
    if (result) *result = r;
    return losses;
  }

  // `job` with `field=value` is refused with `message`, and nothing written.
  void expect_refused(proto::Job job, const std::string& field, const std::string& value,
                      const std::string& message) {
    apply_override(job, field + "=" + value);
    try {
      train(job, options_);
      ADD_FAILURE() << field << "=" << value << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(message)) << field;
    }
    EXPECT_FALSE(fs::exists(dir_ / "cache")) << "something was written for " << field;
  }

};

}  // namespace gnnrt::model::sampled_testing
