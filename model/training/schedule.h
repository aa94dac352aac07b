// The learning-rate schedule of a job (job.proto's Schedule), as
// torch.optim.lr_scheduler computes it.
#pragma once

#include <cstdint>

#include "model/job.pb.h"

namespace gnnrt::model {

// The learning rate of a 0-based epoch under the job's schedule.
double learning_rate(const proto::Job& job, int64_t epoch);
// The same over `units` units (epochs, or a per-step schedule's steps): the
// schedule's warm-up and step size count those units.
double learning_rate(const proto::Job& job, int64_t index, int64_t units);

}  // namespace gnnrt::model
