// Work: the handle of one non-blocking collective (or point-to-point)
// operation, like MPI_Request or c10d's Work.
//
// Contract:
//   wait()  blocks until the operation has completed; equivalent to
//           `while (!test()) {}` plus the deadline. While it waits it also
//           advances every other operation in flight on the same
//           communicator, so ranks that wait on several operations in
//           different orders cannot deadlock. A blocking call (allreduce(),
//           ...) with an own algorithm does the same; one that resolves to
//           `native` is MPI's blocking call, which cannot: wait for the
//           operations in flight before it (or force an own algorithm).
//           It cannot switch to MPI's non-blocking call when Works are in
//           flight, because MPI never matches a blocking collective on one
//           rank with a non-blocking one on another.
//   test()  advances the operation as far as it can without blocking and
//           returns whether it has completed. Never blocks.
//   Errors: an MPI error is rethrown from wait()/test() as CollectiveError.
//   Deadline: if the operation has not completed `timeout` seconds after it
//           started (CommunicatorOptions), wait() logs which operation, which
//           peer it still waits for and how long it waited, then aborts the
//           whole job with MPI_Abort (exit code 124), or throws
//           CollectiveTimeout if the communicator says so.
//   Buffers belong to the caller and must stay untouched until completion;
//   destroying an unfinished Work therefore waits for it. Not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "collectives/error.h"

namespace gnnrt::collectives {

class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

namespace detail {
struct WorkState;
}

class Work {
 public:
  Work();  // already completed, does nothing
  explicit Work(std::unique_ptr<detail::WorkState> state);
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();

  void wait();
  bool test();
  bool completed() const;
  // "allreduce(ring, 4096 bytes)"
  std::string description() const;

 private:
  std::unique_ptr<detail::WorkState> state_;
};

}  // namespace gnnrt::collectives
