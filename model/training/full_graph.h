// The full graph as a BatchSource (model/training/batch_source.h): one
// optimizer step per epoch over every training node, then one run of the
// inference program that sums the train, validation and test accuracies.
// Two forms:
//   - the whole graph on one core (the dataset bound as network.h's
//     programs expect it);
//   - on many ranks (or naming shards), this rank's vertex-cut share: read
//     from the job's shards, or cut in memory from the whole dataset (every
//     rank partitions alike, then drops the rest), with halo exchanges in
//     the programs; the result is the single core's.
// The loop keeps the best validation accuracy's parameters; --logits-out
// writes every node's logits in global order.
#pragma once

#include <cstdint>
#include <memory>

#include "model/data/dataset.h"
#include "model/job.pb.h"
#include "model/modules/network.h"
#include "model/training/batch_source.h"
#include "model/training/options.h"
#include "runtime/core.h"

namespace gnnrt::model {

// Whether the job trains on this rank's shard of a partitioned graph (more
// than one rank, or shards named).
bool is_partitioned_job(const proto::Job& job, const TrainOptions& options);

std::unique_ptr<BatchSource> make_full_graph_source(const proto::Job& job, const TrainOptions& options);

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
