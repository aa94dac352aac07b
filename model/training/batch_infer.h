// `gnnrt infer` on a batch dataset: the job's module graph in eval mode over
// every graph in dataset order, batch_size graphs at a time, each batch
// padded to its bucket and run by that bucket's inference program (compiled
// on first use, through the program cache). Writes the real rows of the
// requested module outputs as .npy in dataset order: [graphs, width] for a
// per-graph output, [rows of the node set, width] for a per-node one.
// Under mpirun the batches are shared out and rank 0 writes.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/job.pb.h"
#include "model/training/options.h"
#include "runtime/core.h"

namespace gnnrt::model {

// The core's settings (cache, threads, communicator) as for training. Null
// or one rank: every batch here; on N ranks each runs a contiguous share of
// the batches and rank 0 gathers and writes the outputs.
// --params-in is required.
struct InferOptions : CoreSettings, StateDictIn {
  std::filesystem::path out;        // folder for <output>.npy
  std::vector<std::string> outputs; // module names; empty: every loss term's input
};

struct InferResult {
  int64_t graphs = 0, batches = 0;
  std::map<std::string, std::vector<int64_t>> shapes;  // written outputs
  // The mean over batches of each loss term (the dataset has its targets).
  std::vector<double> term_losses;
  runtime::Counters counters;
  // Each batch's bind, run and read (compiles excluded), over this rank's
  // batches; graphs a second over the whole run (the slowest rank's time).
  double latency_median_ms = 0, latency_p90_ms = 0, graphs_per_second = 0;
  // A batch's time on the simulated clock of the job's device profile
  // (device.profile), the mean over this rank's batches.
  double simulated_ms = 0;
};

InferResult infer_batches(const proto::Job& job, const InferOptions& options);

}  // namespace gnnrt::model
