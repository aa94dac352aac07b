// Full-batch training of a job on one simulated core, or on many (one rank
// each, a vertex-cut share of the graph per rank) with the single-core
// result: loads the dataset (or this rank's shard), builds and compiles the
// train-step and inference programs (through the program cache),
// initialises or imports the parameters, and runs epochs: one optimizer
// step, one evaluation, one read of the metrics by the host (the core
// accumulates loss and correct counts; on many ranks they are summed across
// ranks once per epoch). It keeps the parameters of the best validation
// accuracy (first best on ties), checkpoints atomically (rank 0 writes one
// global checkpoint), and resumes exactly, at any rank count: N epochs in one
// run equal K epochs plus a resume for N - K.
//
// On many ranks every step that can fail on some ranks only (loading data or
// shards, reading parameters or a checkpoint, compiling) ends in an agreed
// verdict: an error on every rank, never a rank left waiting
// (model/distributed.h). Rank 0 writes the outputs (metrics, logits in
// global node order, parameters); every rank logs with its rank.
//
// Errors (bad job, dataset, shards, parameters, checkpoint, compile or run)
// are exceptions naming what and where; the CLI prints one line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/dataset.h"
#include "model/job.pb.h"
#include "model/network.h"
#include "model/partition.h"
#include "model/shard.pb.h"
#include "runtime/core.h"

namespace gnnrt::collectives {
class Communicator;
}

namespace gnnrt::model {

struct TrainOptions {
  std::filesystem::path cache_dir;     // empty: runtime::default_cache_dir()
  bool no_cache = false;               // compile every time
  std::filesystem::path metrics_path;  // JSON lines, one object per epoch
  std::filesystem::path logits_out;    // .npy of the best model's logits [N, C]
  std::filesystem::path params_in;     // folder of <name>.npy initial parameters
  // Module-graph models: load the keys --params-in and the model share,
  // list the rest in a warning (torch's strict=False), instead of an error.
  bool params_non_strict = false;
  // Module-graph models: --params-in holds the keys under "<scope>." only
  // (torch's model.<scope>.load_state_dict), checked as strictly; the
  // model's other keys start from their initialisation.
  std::string params_scope;
  std::filesystem::path params_out;    // folder for the best model's parameters
  std::filesystem::path trace_path;    // Chrome trace of op times (rank K > 0: <stem>.rank-K<ext>)
  bool debug = false;                  // unfused, NaN/Inf check after every op
  int threads = 0;                     // OpenMP threads (0: leave as is)
  int64_t hbm_bytes = 0;               // > 0 overrides the device's capacity
  std::string profile;                 // non-empty overrides job.device.profile
  bool progress = true;                // log one line per epoch (rank 0)
  // The ranks to train on; null: one rank, no MPI. With more than one rank
  // (or shards named by the job) the graph is partitioned over them.
  std::shared_ptr<collectives::Communicator> communicator;
  // Called after every epoch (on every rank), e.g. for a launcher's progress.
  std::function<void(const struct EpochMetrics&)> on_epoch;
  // Batch jobs: called after a step (on every rank) when half a second has
  // passed since the last call, with the epochs done and the global step.
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
  // Batch datasets (model/batch_trainer.h): optimizer steps taken in all,
  // shape buckets used, and padding over the run's batches (% of rows).
  int64_t steps = 0;
  int64_t buckets_used = 0, buckets = 0;
  double padding_rows_percent = 0, padding_edges_percent = 0;
  double last_loss = 0;
  // Batch datasets: wall time building and compiling programs, and building
  // and loading them from the program cache (a cached start).
  double compile_ms = 0, cache_load_ms = 0;
};

TrainResult train(const proto::Job& job, const TrainOptions& options);

// Readies a loaded dataset's features for the job: its form first (the
// job's dataset.features; "auto" measures the density), then
// normalize_features when the job asks (on the sparse form, if chosen).
void prepare_features(Dataset& data, const proto::Job& job);

// Puts the dataset on the core as network.h's programs expect it: the
// tensors x, y, masks (and y_onehot for mse) and both graphs. Returns the
// shapes to build the programs with.
NetworkShape bind_dataset(runtime::Core& core, const Dataset& data, const proto::Model& model);

// Sparse features on the core: the graph "x" (entry e from column src(e) to
// row dst(e), entries in CSR order) and its values "x.values" [nnz].
void bind_sparse_features(runtime::Core& core, const SparseFeatures& x, int64_t rows, int64_t cols);

runtime::OptimizerConfig optimizer_config(const proto::Optimizer& optimizer);

// The core a job trains on: the job's device profile (options.profile and
// hbm_bytes override it) and the core's options (cache, debug, trace,
// subnormals, the communicator).
runtime::DeviceProfile device_profile(const proto::Job& job, const TrainOptions& options);
runtime::CoreOptions core_options(const proto::Job& job, const TrainOptions& options);

// Puts freshly initialised parameters on the core (ParamDecl::Init; Philox
// keyed by (seed, parameter index): the same values on every machine).
void initialize_parameters(runtime::Core& core, const std::vector<ParamDecl>& params, uint64_t seed);

// The learning rate of a 0-based epoch under the job's schedule.
double learning_rate(const proto::Job& job, int64_t epoch);
// The same over `units` units (epochs, or a per-step schedule's steps): the
// schedule's warm-up and step size count those units.
double learning_rate(const proto::Job& job, int64_t index, int64_t units);

// The halo exchanges the job's programs make on a partitioned graph with
// this many features and classes, in program order (train step, then
// inference), with their widths and row bytes (bytes left 0: they follow
// from a partition's halo rows). Compiles both programs (no cache).
std::vector<proto::HaloExchangePlan> halo_exchanges(const proto::Job& job, int64_t features,
                                                    int64_t classes, bool sparse_features);

// `path` for rank 0; `<stem>.rank-K<ext>` for rank K > 0.
std::filesystem::path rank_path(const std::filesystem::path& path, int rank);

// The partition options a job names (parts: the rank count).
PartitionOptions partition_options(const proto::Job& job, int parts);

}  // namespace gnnrt::model
