// Mini-batch training of a module-graph model on a batch dataset, on one
// simulated core: the step loop. Each epoch visits the graphs in an order
// drawn from (seed, epoch), batch_size graphs at a time (the last batch
// partial); the BatchSource pads each batch to its shape bucket and binds
// it; the bucket's train-step program (compiled on first use, through the
// program cache; parameters and optimizer state shared by name) takes one
// optimizer step at the global step count, which keys Adam's bias
// correction and dropout. The loss is read once per epoch (the mean of the
// batches' losses). Checkpoints hold epoch and step; a resumed run equals
// the uninterrupted one bitwise.
#pragma once

#include "model/job.pb.h"
#include "model/training/options.h"

namespace gnnrt::model {

// Whether a job trains on a batch dataset (a module-graph model).
bool is_batch_job(const proto::Job& job);

TrainResult train_batches(const proto::Job& job, const TrainOptions& options);

}  // namespace gnnrt::model
