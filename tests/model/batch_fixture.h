// What the batch tests share: the golden folder, reading a golden job and
// parameter folders, comparing parameters, and a fixture with a temporary
// folder and one-thread, cached, quiet training options.
#pragma once

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
#include "model/training/graph_batches.h"
#include "model/training/trainer.h"
#include "runtime/npy.h"
#include "tests/common/training_folder.h"

namespace gnnrt::model::batch_testing {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

inline const fs::path kGolden = GNNRT_BATCH_GOLDEN_DIR;

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline proto::Job golden_job(const std::string& name) {
  std::string text = read_text(kGolden / name / "job.pbtxt");
  text.replace(text.find("DATA"), 4, (kGolden / name / "data").string());
  return parse_job(text, name);
}

inline std::map<std::string, std::vector<float>> read_params(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out[e.path().stem().string()] = read_npy(e.path()).to_vector<float>();
  }
  return out;
}

// |a - b| <= atol + rtol |b| element by element.
inline void expect_close(const std::map<std::string, std::vector<float>>& got,
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

class Batch : public gnnrt::fixtures::TrainingFolder {
 protected:
  Batch() : TrainingFolder("batch") {}
};

}  // namespace gnnrt::model::batch_testing
