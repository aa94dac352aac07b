// The deadline of blocking MPI calls. A blocking call (MPI_Allreduce, ...)
// cannot be polled like a request, so one background thread per process
// watches the call in progress: arming and disarming are two atomic stores
// (nothing on the fast path allocates or locks), and if a call is still armed
// past its deadline the thread logs what it was (operation, algorithm, bytes,
// rank, seconds waited; MPI does not say which peer it waits for) and ends
// the process with exit code 124, which makes mpirun stop the whole job.
// Internal to collectives/. One armed call at a time per thread (a thread
// that calls MPI has a slot of its own: a sampled job's prefetch thread
// beside the step's; docs/sampling.md).
#pragma once

#include <cstddef>

namespace gnnrt::collectives::detail {

class BlockingDeadline {
 public:
  // `op` and `algorithm` must be string literals (or otherwise outlive the call).
  BlockingDeadline(const char* op, const char* algorithm, std::size_t bytes, int rank,
                   double seconds);
  ~BlockingDeadline();
  BlockingDeadline(const BlockingDeadline&) = delete;
  BlockingDeadline& operator=(const BlockingDeadline&) = delete;
};

}  // namespace gnnrt::collectives::detail
