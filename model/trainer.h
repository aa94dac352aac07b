// Full-batch training of a job on one simulated core: loads the dataset,
// builds and compiles the train-step and inference programs (through the
// program cache), initialises or imports the parameters, and runs epochs:
// one optimizer step, one evaluation, one read of the metrics by the host
// (the core accumulates loss and correct counts). It keeps the parameters
// of the best validation accuracy (first best on ties), checkpoints
// atomically, and resumes exactly: N epochs in one run equal K epochs plus
// a resume for N - K, bit for bit.
//
// Errors (bad job, dataset, parameters, checkpoint, compile or run) are
// exceptions naming what and where; the CLI prints one line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "model/dataset.h"
#include "model/job.pb.h"
#include "model/network.h"
#include "runtime/core.h"

namespace gnnrt::model {

struct TrainOptions {
  std::filesystem::path cache_dir;     // empty: runtime::default_cache_dir()
  bool no_cache = false;               // compile every time
  std::filesystem::path metrics_path;  // JSON lines, one object per epoch
  std::filesystem::path logits_out;    // .npy of the best model's logits [N, C]
  std::filesystem::path params_in;     // folder of <name>.npy initial parameters
  std::filesystem::path params_out;    // folder for the best model's parameters
  std::filesystem::path trace_path;    // Chrome trace of op times
  bool debug = false;                  // unfused, NaN/Inf check after every op
  int threads = 0;                     // OpenMP threads (0: leave as is)
  int64_t hbm_bytes = 0;               // > 0 overrides the device's capacity
  std::string profile;                 // non-empty overrides job.device.profile
  bool progress = true;                // log one line per epoch
};

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  double lr = 0, loss = 0, train_acc = 0, val_acc = 0, test_acc = 0;
  double ms = 0, train_ms = 0, infer_ms = 0, simulated_ms = 0;
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;  // those run by this call
  int64_t best_epoch = -1;
  double best_val_acc = 0, test_acc = 0;  // test accuracy at the best epoch
  runtime::Counters counters;
  runtime::MemoryPlan train_plan, infer_plan;
  runtime::PassStats train_passes;
};

TrainResult train(const proto::Job& job, const TrainOptions& options);

// Puts the dataset on the core as network.h's programs expect it: the
// tensors x, y, masks (and y_onehot for mse) and both graphs. Returns the
// shapes to build the programs with.
NetworkShape bind_dataset(runtime::Core& core, const Dataset& data, const proto::Model& model);

runtime::OptimizerConfig optimizer_config(const proto::Optimizer& optimizer);

// Puts freshly initialised parameters on the core (ParamDecl::Init; Philox
// keyed by (seed, parameter index): the same values on every machine).
void initialize_parameters(runtime::Core& core, const std::vector<ParamDecl>& params, uint64_t seed);

// The learning rate of a 0-based epoch under the job's schedule.
double learning_rate(const proto::Job& job, int64_t epoch);

}  // namespace gnnrt::model
