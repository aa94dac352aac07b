// A test fixture that trains in a temporary folder of its own
// (<TempDir>/gnnrt_<prefix>_<test>, made empty before the test and removed
// after) with one-thread, quiet training options that cache programs there.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/training/options.h"

namespace gnnrt::fixtures {

class TrainingFolder : public ::testing::Test {
 protected:
  explicit TrainingFolder(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gnnrt_" + prefix_ + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    options_.cache_dir = dir_ / "cache";
    options_.progress = false;
    options_.threads = 1;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  model::TrainOptions options_;

 private:
  std::string prefix_;
};

}  // namespace gnnrt::fixtures
