#include "launch/exit_status.h"

#include <stdexcept>

#include "model/training/distributed.h"

namespace gnnrt::launch {

int exit_status(const std::exception& e) {
  // std::invalid_argument covers JobError, ShapeError, OpError and
  // PartitionError; model::is_bad_input the rest (a peer's bad input too).
  return model::is_bad_input(e) ? kBadInput : kFailure;
}

}  // namespace gnnrt::launch
