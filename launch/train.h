// `gnnrt train`: full-batch training of a job file on one simulated core
// (the single-rank mode; debug it here before running on many ranks).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "model/trainer.h"

namespace gnnrt::launch {

struct TrainCommand {
  std::string job;                  // path; empty: a GCN on the synthetic default
  std::string dataset;              // --dataset SPEC: dataset.path, before the --set overrides
  std::vector<std::string> sets;    // --set path=value, in order
  model::TrainOptions options;
  std::string cache_dir, metrics, logits_out, params_in, params_out, trace;
};

CLI::App* add_train_command(CLI::App& app, TrainCommand& command);
int run_train(TrainCommand& command);

}  // namespace gnnrt::launch
