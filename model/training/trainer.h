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
// (model/training/distributed.h). Rank 0 writes the outputs (metrics, logits in
// global node order, parameters); every rank logs with its rank.
//
// Errors (bad job, dataset, shards, parameters, checkpoint, compile or run)
// are exceptions naming what and where; the CLI prints one line.
#pragma once

#include <cstdint>

#include "model/data/dataset.h"
#include "model/job.pb.h"
#include "model/modules/network.h"
#include "model/training/options.h"
#include "runtime/core.h"

namespace gnnrt::model {

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

}  // namespace gnnrt::model
