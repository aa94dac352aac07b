// The messages of one collective call: non-blocking sends and receives on
// the communicator's internal MPI communicator under the call's own tag, and
// the awaitables an algorithm coroutine suspends on. Each posted request is
// a slot; `co_await wait({slots})` suspends until those have completed, and
// `co_await wait_all()` until every posted one has. The owner (a Work)
// polls with `poll()` and resumes the coroutine when it returns true.
//
// Internal to collectives/. Not thread-safe. Buffers belong to the caller
// and must stay alive until the slot has been waited for.
#pragma once

#include <mpi.h>

#include <coroutine>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gnnrt::collectives::detail {

class Transfers {
 public:
  Transfers(MPI_Comm comm, int tag, int rank, int size);
  ~Transfers();
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  // Starts over under a new tag, keeping the slots' storage (the blocking
  // forms reuse one Transfers for every call).
  void reset(int tag);

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }

  int isend(int peer, const void* data, std::size_t bytes);
  int irecv(int peer, void* data, std::size_t bytes);
  // A request posted by a native MPI call (peer -1: the whole communicator).
  int adopt(MPI_Request request, int peer);

  struct Awaiter {
    Transfers* transfers;
    bool await_ready() { return transfers->poll(); }
    void await_suspend(std::coroutine_handle<> handle) { transfers->suspended_ = handle; }
    void await_resume() const {}
  };
  // (Two plain arguments, not an initializer_list: g++ 12 miscompiles
  // braced lists inside co_await.) Negative slots are skipped.
  Awaiter wait(int slot, int other = -1);
  Awaiter wait_all();

  // Tests the awaited slots; true (and they are freed) once all completed.
  bool poll();
  // The coroutine suspended on the awaited slots (null if none).
  std::coroutine_handle<> take_suspended() { return std::exchange(suspended_, {}); }
  bool idle() const { return live_ == 0; }
  // "a message from rank 3", "the native MPI call": what a waiter waits for.
  std::string pending_description() const;
  // Cancels what can be cancelled (used when a coroutine failed).
  void abandon();
  // Whether a peer this call waits for has sent a message of another call
  // made at the same point (the same sequence number under another
  // signature: the tag of CommunicatorImpl::next_tag): that peer's rank,
  // or -1. Probes the peers of the awaited receives; for the wait loops,
  // not the hot path.
  int foreign_sender() const;

 private:
  int add(MPI_Request request, int peer, bool receive, std::size_t bytes = 0);

  MPI_Comm comm_;
  int tag_, rank_, size_;
  std::vector<MPI_Request> requests_;
  std::vector<int> peers_;
  std::vector<char> receives_;
  std::vector<std::size_t> bytes_;  // a receive's posted size
  std::vector<char> live_slot_;
  std::vector<int> free_;
  std::vector<int> awaited_;
  std::vector<MPI_Request> testing_;
  std::vector<MPI_Status> statuses_;
  int live_ = 0;
  std::coroutine_handle<> suspended_;
};

}  // namespace gnnrt::collectives::detail
