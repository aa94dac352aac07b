// `gnnrt train`: full-batch training of a job file, on one simulated core
// (no mpirun: the single-rank mode; debug it here) or on one per MPI rank
// (`mpirun -np N gnnrt train JOB`: a vertex-cut partition of the graph,
// with the single-core result).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/job.pb.h"
#include "model/training/batch_infer.h"
#include "model/training/trainer.h"

namespace gnnrt::launch {

class ControlClient;

struct TrainCommand {
  std::string job;                  // path; empty: a GCN on the synthetic default
  std::string dataset;              // --dataset SPEC: dataset.path, before the --set overrides
  std::vector<std::string> sets;    // --set path=value, in order
  std::string partition, shards, halo;  // --partition, --shards, --halo: partition.* overrides
  model::TrainOptions options;
  std::string cache_dir, metrics, logits_out, params_in, params_out, trace;
  ControlClient* control = nullptr;  // under `gnnrt launch`: progress, stop requests, faults
  bool stopped = false;              // out: stopped on the launcher's request (checkpoint written)
  int64_t resumed_after = 0;         // out: the epoch the run resumed after (0: from scratch)
};

// The job file (or the default job) with --dataset, then every --set, applied.
model::proto::Job load_job_with_overrides(const std::string& path, const std::string& dataset,
                                          const std::vector<std::string>& sets);

// The job the command trains: the file with every override applied.
model::proto::Job resolve_job(const TrainCommand& command);

// `gnnrt infer`: a module-graph job's outputs over every graph of its batch
// dataset (model/training/batch_infer.h).
struct InferCommand {
  std::string job;
  std::string dataset;
  std::vector<std::string> sets;
  model::InferOptions options;
  std::string cache_dir, params_in, out;
};
int run_infer(InferCommand& command);

// Reads the job, applies the overrides, trains (on options.communicator's
// ranks), and logs the summary (rank 0). Returns the exit status; errors are
// exceptions. (Its flags are declared in main.cc: CLI11 is compiled in one
// file only.)
int run_train(TrainCommand& command);

}  // namespace gnnrt::launch
