// `gnnrt train`'s entry: picks the job's batch source (the whole graph, this
// rank's vertex-cut shard, or graph batches in shape buckets) and runs the
// one training loop over it (model/training/step_loop.h).
//
// Errors (bad job, dataset, shards, parameters, checkpoint, compile or run)
// are exceptions naming what and where, on every rank; the CLI prints one
// line.
#pragma once

#include "model/job.pb.h"
#include "model/training/options.h"

namespace gnnrt::model {

TrainResult train(const proto::Job& job, const TrainOptions& options);

}  // namespace gnnrt::model
