// Batches of small graphs as a BatchSource (model/training/batch_source.h),
// for module-graph models on a batch dataset. Each epoch visits the graphs
// in an order drawn from (seed, epoch), batch_size graphs at a time (the
// last batch partial); on many ranks each global batch is split over them
// (data-parallel, losses over the global batch's rows). GraphBatches pads
// each rank's share to its shape bucket and binds it; the bucket's
// train-step program (compiled on first use, through the program cache;
// parameters and optimizer state shared by name) takes the step. The loss
// is the mean of the batches' losses; padding and compiles are reported.
#pragma once

#include <memory>

#include "model/job.pb.h"
#include "model/training/batch_source.h"
#include "model/training/options.h"

namespace gnnrt::model {

// Whether a job trains on a batch dataset (a module-graph model).
bool is_batch_job(const proto::Job& job);

std::unique_ptr<BatchSource> make_graph_batch_source(const proto::Job& job, const TrainOptions& options);

}  // namespace gnnrt::model
