#include "launch/exit_status.h"

#include <stdexcept>

#include "model/checkpoint.h"
#include "model/dataset.h"
#include "model/job.h"
#include "model/partition.h"
#include "runtime/npy.h"

namespace gnnrt::launch {

int exit_status(const std::exception& e) {
  // std::invalid_argument covers JobError, ShapeError, OpError and
  // PartitionError: the input was wrong.
  if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr ||
      dynamic_cast<const model::DatasetError*>(&e) != nullptr ||
      dynamic_cast<const model::CheckpointError*>(&e) != nullptr ||
      dynamic_cast<const NpyError*>(&e) != nullptr || dynamic_cast<const TensorError*>(&e) != nullptr) {
    return kBadInput;
  }
  return kFailure;
}

}  // namespace gnnrt::launch
