// The one training loop, over any BatchSource (model/training/batch_source.h)
// on one simulated core, or on many (one rank each). It
//   - starts the parameters: drawn (Philox keyed by seed and parameter
//     index) or --params-in's (read by rank 0), and rank 0's go to every
//     rank, as PyTorch DDP broadcasts rank 0's module state;
//   - or resumes from the newest checkpoint, mid-epoch too: a resumed run
//     equals the uninterrupted one bitwise, at any rank count;
//   - runs epochs of steps, each at the global step count (which keys
//     Adam's bias correction and dropout) and its learning rate (per epoch
//     or per step), then the source's evaluation, then one read of the
//     metrics by the host (summed across ranks);
//   - keeps the best validation accuracy's parameters where the source
//     validates (first best on ties), checks that the ranks' parameters
//     stay the same bits, checkpoints atomically (rank 0 writes), writes
//     --metrics records, honours stop requests, and writes the outputs.
// Every step that can fail on some ranks only ends in an agreed verdict:
// an error on every rank, never a rank left waiting
// (model/training/distributed.h).
#pragma once

#include "model/job.pb.h"
#include "model/training/batch_source.h"
#include "model/training/options.h"

namespace gnnrt::model {

TrainResult run_step_loop(const proto::Job& job, const TrainOptions& options, BatchSource& source);

}  // namespace gnnrt::model
