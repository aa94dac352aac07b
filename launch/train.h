// `gnnrt train`: full-batch training of a job file on one simulated core
// (the single-rank mode; debug it here before running on many ranks).
#pragma once

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

// Reads the job (or the default one), applies --dataset and --set, trains,
// and logs the summary. Returns the exit status; errors are exceptions.
// (Its flags are declared in main.cc: CLI11 is compiled in one file only.)
int run_train(TrainCommand& command);

}  // namespace gnnrt::launch
