// What a training run is given and what it returns: the settings of the
// core every unit runs on, the options of `gnnrt train`, each epoch's
// metrics and the run's result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/data/partition.h"
#include "runtime/core.h"

namespace gnnrt::collectives {
class Communicator;
}

namespace gnnrt::model {

// The core a unit runs on, beyond what the job says: every entry point's
// options (train, infer, bench) share these and pass them down.
struct CoreSettings {
  std::filesystem::path cache_dir;   // empty: runtime::default_cache_dir()
  bool no_cache = false;             // compile every time
  std::filesystem::path trace_path;  // Chrome trace of op times (rank K > 0: <stem>.rank-K<ext>)
  bool debug = false;                // unfused, NaN/Inf check after every op
  // OpenMP threads of the core's runs (0: OpenMP's default). The caller's
  // own OpenMP work (a synthetic dataset's generation) follows the
  // process's count, which only the `gnnrt` command sets.
  int threads = 0;
  int64_t hbm_bytes = 0;             // > 0 overrides the device's capacity
  std::string profile;               // non-empty overrides job.device.profile
  // The ranks to run on; null: one rank, no MPI. A full-graph job on more
  // than one rank (or naming shards) is partitioned over them.
  std::shared_ptr<collectives::Communicator> communicator;
};

// --params-in: a state_dict folder (<key>.npy), loaded as torch's
// load_state_dict (model/training/state_dict.h).
struct StateDictIn {
  std::filesystem::path params_in;
  // Load the keys --params-in and the model share, list the rest in a
  // warning (torch's strict=False), instead of an error.
  bool params_non_strict = false;
  // --params-in holds the keys under "<scope>." only (torch's
  // model.<scope>.load_state_dict), checked as strictly; the model's other
  // keys start from their initialisation.
  std::string params_scope;
};

// `gnnrt train`: the run beyond the job (outputs, parameters in, callbacks).
struct TrainOptions : CoreSettings, StateDictIn {
  std::filesystem::path metrics_path;  // JSON lines, one object per epoch
  std::filesystem::path logits_out;    // .npy of the best model's logits [N, C]
  std::filesystem::path params_out;    // folder for the best model's parameters
  bool progress = true;                // log one line per epoch (rank 0)
  // Called after every epoch (on every rank), e.g. for a launcher's progress.
  std::function<void(const struct EpochMetrics&)> on_epoch;
  // Epochs of several steps (batch jobs): called after a step (on every
  // rank) when half a second has passed since the last call, with the
  // epochs done and the global step.
  std::function<void(int64_t epochs_done, int64_t step)> on_step;
  // Rank 0's lines for the user beyond its log (a checkpoint set aside, a
  // resume that found none): under `gnnrt launch`, the launcher's console
  // and events.jsonl. Level "warning" or "info".
  std::function<void(const std::string& level, const std::string& text)> on_notice;
  // Polled once per epoch on every rank (e.g. a launcher's stop request);
  // if any rank says yes, every rank writes the checkpoint after that epoch
  // and stops (TrainResult::stopped).
  std::function<bool()> stop_requested;
  // Fault injection (GNNRT_FAULT=flip:RANK:EPOCH, docs/launcher.md): this
  // rank flips the lowest bit of its first parameter's first value after
  // epoch `corrupt_after_epoch`'s step, or, with 0, as soon as its initial
  // parameters are set (before rank 0's are broadcast). -1: never.
  int64_t corrupt_after_epoch = -1;
};

struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  int64_t step = 0;   // optimizer steps taken in all after this epoch
  double lr = 0, loss = 0, train_acc = 0, val_acc = 0, test_acc = 0;
  double ms = 0, train_ms = 0, infer_ms = 0, simulated_ms = 0;
  // This rank's wall time in the epoch's programs by kind: kernels, graph
  // communication (halo exchanges and the all-reduces of graph statistics),
  // gradient all-reduce (buckets started and waited for), and the rest of
  // the epoch (the host, reading and summing metrics: waiting for the
  // slowest rank shows here).
  double compute_ms = 0, halo_ms = 0, grad_ms = 0, wait_ms = 0;
  double halo_bytes = 0;  // sent by all ranks in the epoch's halo exchanges
  bool stop = false;      // some rank was asked to stop after this epoch
};

struct TrainResult {
  std::vector<EpochMetrics> epochs;  // those run by this call
  int64_t best_epoch = -1;
  double best_val_acc = 0, test_acc = 0;  // test accuracy at the best epoch
  runtime::Counters counters;
  runtime::MemoryPlan train_plan, infer_plan;
  runtime::PassStats train_passes;
  int ranks = 1;
  bool stopped = false;  // stopped on request before the last epoch (checkpoint written)
  int64_t start_epoch = 0;  // the epoch it resumed after (0: from scratch)
  bool partitioned = false;
  // The partition (rank 0 knows it when it partitioned in memory).
  PartitionStats partition;
  int64_t local_nodes = 0, local_edges = 0;  // this rank's share
  // Optimizer steps taken in all; batch datasets
  // (model/training/graph_batch_source.h): shape buckets used, and padding over the run's batches (% of rows).
  int64_t steps = 0;
  int64_t buckets_used = 0, buckets = 0;
  double padding_rows_percent = 0, padding_edges_percent = 0;
  double last_loss = 0;
  // Batch datasets: wall time building and compiling programs, and building
  // and loading them from the program cache (a cached start).
  double compile_ms = 0, cache_load_ms = 0;
};

}  // namespace gnnrt::model
