// What a Work and its communicator share: the state of one operation in
// flight, the communicator's MPI handles, its tag sequence, the list of
// operations in flight (so that waiting on one advances all) and the pool of
// scratch buffers (so repeated calls allocate nothing). Internal.
#pragma once

#include <mpi.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/communicator.h"
#include "collectives/task.h"
#include "collectives/transfers.h"

namespace gnnrt::collectives::detail {

class ScratchPool {
 public:
  std::byte* acquire(std::size_t bytes, std::vector<int>& held);
  void release(std::vector<int>& held);

 private:
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
    bool used = false;
  };
  std::vector<Buffer> buffers_;
};

class PooledScratch final : public Scratch {
 public:
  explicit PooledScratch(ScratchPool& pool) : pool_(pool) {}
  ~PooledScratch() override = default;  // see WorkState::progress: released only on success
  std::byte* get(std::size_t bytes) override { return pool_.acquire(bytes, held_); }
  void release() { pool_.release(held_); }
  // After a failure: the buffers stay out of the pool for good (a send that
  // could not be cancelled may still read them).
  void forget() { held_.clear(); }

 private:
  ScratchPool& pool_;
  std::vector<int> held_;
};

class CommunicatorImpl {
 public:
  CommunicatorImpl(MPI_Comm user, CommunicatorOptions options);  // takes ownership of `user`
  ~CommunicatorImpl();

  MPI_Comm user = MPI_COMM_NULL;      // user point to point, splits, graph communicators
  MPI_Comm internal = MPI_COMM_NULL;  // every collective (native calls and algorithms)
  MPI_Comm check = MPI_COMM_NULL;     // the call checks (call_check.h)
  uint64_t calls = 0;                 // collective calls checked so far
  int rank = 0, size = 1;
  CommunicatorOptions options;
  ScratchPool pool;
  std::vector<struct WorkState*> in_flight;
  bool blocking = false;  // inside a blocking form (Communicator::Blocking)
  // What run_blocking reuses from call to call.
  std::optional<Transfers> blocking_transfers;
  PooledScratch blocking_scratch{pool};

  // The tag of the next call: its sequence number and, where MPI's tags have
  // 31 bits, 15 bits of its signature (Call::signature) above 16 of sequence.
  int next_tag(uint64_t signature = 0);
  static constexpr int kSequenceBits = 16;
  void progress_all();

 private:
  int tag_ub_ = 32767;
  std::uint64_t sequence_ = 0;
};

struct WorkState {
  WorkState(std::shared_ptr<CommunicatorImpl> owner, std::string description, MPI_Comm comm,
            int tag);
  ~WorkState();

  // Advances; true once finished (with `error` set if it failed).
  bool progress();
  // Starts `task` (already bound to transfers/scratch/call) and registers.
  void launch(Task task);
  // Ends it with `e` (found outside its task): finished, unregistered.
  void fail(std::exception_ptr e);

  std::shared_ptr<CommunicatorImpl> owner;
  // What it is, for errors and logs: given as text (halo exchange, point to
  // point), or formatted from `call` and `algorithm` only when needed (a
  // collective's hot path formats nothing).
  std::string description;
  Algorithm algorithm = Algorithm::native;
  std::string describe() const;
  Call call;
  Transfers transfers;
  PooledScratch scratch;
  Task task;
  bool finished = false;
  bool registered = false;
  std::exception_ptr error;
  std::chrono::steady_clock::time_point started;
};

// The end of a wait past the communicator's deadline: logs which operation
// and what it waits for, then aborts the job (exit code 124) or throws
// CollectiveTimeout (CommunicatorOptions::on_timeout).
[[noreturn]] void deadline_passed(const CommunicatorImpl& impl, const std::string& what,
                                  std::chrono::steady_clock::time_point started,
                                  const std::string& waiting_for);

// Resumes `task` as far as its transfers allow; true once it has finished.
// Throws what the task threw.
bool advance(Transfers& transfers, Task& task);

// Runs `algorithm` for `call` to completion on the calling thread: what a
// blocking form (allreduce(), ...) does with an own algorithm. The same
// coroutine, messages, deadline and errors as a Work, without one: the
// Transfers and scratch are the communicator's and reused, so a small
// collective allocates nothing (half of its latency at 4 bytes, before).
void run_blocking(CommunicatorImpl& impl, const Call& call, Algorithm algorithm);

// Starts `make(transfers, scratch)` (a coroutine returning Task) as a Work on
// `comm` under the communicator's next tag: how units of collectives/ beyond
// the Call-described operations (the halo exchange) get waits, deadlines
// and progress for free.
template <typename Make>
Work launch_task(const std::shared_ptr<CommunicatorImpl>& impl, std::string description,
                 MPI_Comm comm, Make make) {
  auto state = std::make_unique<WorkState>(impl, std::move(description), comm, impl->next_tag());
  state->launch(make(state->transfers, state->scratch));
  return Work(std::move(state));
}

}  // namespace gnnrt::collectives::detail
