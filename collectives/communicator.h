// Communicator: the one way gnnrt's cores talk. Wraps an MPI communicator
// (its own duplicate, so gnnrt's traffic never matches a user's messages)
// and offers the collectives, each blocking (`allreduce`) and non-blocking
// (`allreduce_async`, returning a Work; see work.h for wait/test/deadline
// semantics). Several operations may be in flight at once; every rank must
// start collectives in the same order (MPI's rule).
//
// Buffers are spans of float, double, int32_t, int64_t, or ValueLoc<...> of
// those for ReduceOp::maxloc. Zero-length buffers are fine. Sizes are
// checked against each other on the calling rank (CollectiveError naming the
// operation, the argument and the rank); ranks that disagree about a call get
// an error on every rank with check_calls (CommunicatorOptions), and without
// it an error on the ranks that see it or the deadline, never a silent wrong
// answer: the messages' tags carry the call's signature, receives check
// their sizes, and native calls verify the signature beside MPI's call
// (docs/collectives.md, "Ranks that disagree").
//
// The algorithm: the per-call argument if not `automatic`, else the
// communicator's forced algorithm (if it implements the operation), else the
// tuning table. Copies of a Communicator share one MPI communicator; it is
// freed with the last copy. Not thread-safe.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/call_check.h"
#include "collectives/tuning.h"
#include "collectives/types.h"
#include "collectives/work.h"

namespace gnnrt::collectives {

struct CommunicatorOptions {
  double timeout_seconds = 300;  // deadline of every wait
  enum class OnTimeout { abort, raise } on_timeout = OnTimeout::abort;
  Algorithm algorithm = Algorithm::automatic;  // forced for every op it implements
  std::size_t chunk_bytes = 256 * 1024;        // ring pipelining granularity
  std::shared_ptr<const TuningTable> tuning;   // null: TuningTable::defaults()
  // Compare every call's fingerprint across ranks first (call_check.h): a
  // disagreement is an error on every rank instead of a hang. Costs one
  // collective per call; every rank must set it alike.
  bool check_calls = false;

  // Defaults overridden by the environment: GNNRT_COLLECTIVE_TIMEOUT (seconds),
  // GNNRT_COLLECTIVE_ALGORITHM (name), GNNRT_COLLECTIVE_TUNING (file),
  // GNNRT_COLLECTIVE_CHECK (1: check_calls).
  static CommunicatorOptions from_environment();
};

namespace detail {
class CommunicatorImpl;
}

class Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD. Needs a live Environment.
  static Communicator world(CommunicatorOptions options = CommunicatorOptions::from_environment());
  // A duplicate of `comm` (which stays the caller's).
  static Communicator wrap(MPI_Comm comm, CommunicatorOptions options);

  int rank() const;
  int size() const;
  // The MPI communicator behind this one (for MPI calls gnnrt does not wrap).
  MPI_Comm mpi_comm() const;
  const CommunicatorOptions& options() const;
  void set_options(CommunicatorOptions options);

  // Collective: ranks with the same color form a new communicator, ordered
  // by key then rank. A negative color gives none (nullopt).
  std::optional<Communicator> split(int color, int key) const;

  template <typename T>
  Work allreduce_async(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum,
                       Algorithm algorithm = Algorithm::automatic);
  template <typename T>
  void allreduce(std::span<T> data, ReduceOp op = ReduceOp::sum,
                 Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    allreduce_async<T>(data, data, op, algorithm).wait();
  }
  template <typename T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum,
                 Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    allreduce_async<T>(send, recv, op, algorithm).wait();
  }

  // Equal blocks: send holds size() blocks of recv.size() elements; rank r
  // gets the reduction of block r.
  template <typename T>
  Work reduce_scatter_async(std::span<const T> send, std::span<T> recv,
                            ReduceOp op = ReduceOp::sum, Algorithm algorithm = Algorithm::automatic);
  // Variable blocks: block r has counts[r] elements, back to back in send.
  template <typename T>
  Work reduce_scatter_v_async(std::span<const T> send, std::span<T> recv,
                              std::span<const std::size_t> counts, ReduceOp op = ReduceOp::sum,
                              Algorithm algorithm = Algorithm::automatic);

  // Equal blocks: recv holds size() blocks of send.size() elements.
  template <typename T>
  Work allgather_async(std::span<const T> send, std::span<T> recv,
                       Algorithm algorithm = Algorithm::automatic);
  // Variable blocks: rank r contributes counts[r] elements, back to back in recv.
  template <typename T>
  Work allgather_v_async(std::span<const T> send, std::span<T> recv,
                         std::span<const std::size_t> counts,
                         Algorithm algorithm = Algorithm::automatic);

  template <typename T>
  Work broadcast_async(std::span<T> data, int root, Algorithm algorithm = Algorithm::automatic);

  // send_counts[q] elements go to rank q, back to back in send; recv_counts[q]
  // come from rank q, back to back in recv.
  template <typename T>
  Work alltoallv_async(std::span<const T> send, std::span<const std::size_t> send_counts,
                       std::span<T> recv, std::span<const std::size_t> recv_counts,
                       Algorithm algorithm = Algorithm::automatic);

  // Blocking forms: the call, then wait().
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum,
                      Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    reduce_scatter_async<T>(send, recv, op, algorithm).wait();
  }
  template <typename T>
  void allgather(std::span<const T> send, std::span<T> recv,
                 Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    allgather_async<T>(send, recv, algorithm).wait();
  }
  template <typename T>
  void broadcast(std::span<T> data, int root, Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    broadcast_async<T>(data, root, algorithm).wait();
  }
  template <typename T>
  void alltoallv(std::span<const T> send, std::span<const std::size_t> send_counts,
                 std::span<T> recv, std::span<const std::size_t> recv_counts,
                 Algorithm algorithm = Algorithm::automatic) {
    Blocking scope(*this);
    alltoallv_async<T>(send, send_counts, recv, recv_counts, algorithm).wait();
  }

  Work barrier_async();
  void barrier() {
    Blocking scope(*this);
    barrier_async().wait();
  }

  // Point to point on the user's communicator, with the same deadline.
  template <typename T>
  Work send_async(std::span<const T> data, int peer, int tag);
  template <typename T>
  Work recv_async(std::span<T> data, int peer, int tag);

  // The algorithm a call would run (after the forced one and the tuning table).
  Algorithm resolve(Collective op, std::size_t bytes, Algorithm requested) const;

  // For the halo exchange and other units of collectives/ that run their own
  // coroutine under a Work. Internal.
  detail::CommunicatorImpl& impl() const { return *impl_; }
  const std::shared_ptr<detail::CommunicatorImpl>& shared_impl() const { return impl_; }

 private:
  // Marks the calls started in its scope as waited for right away, so that
  // `native` may run MPI's blocking call (see native.cc).
  class Blocking {
   public:
    explicit Blocking(Communicator& c) : c_(c) { c_.set_blocking(true); }
    ~Blocking() { c_.set_blocking(false); }
    Blocking(const Blocking&) = delete;
    Blocking& operator=(const Blocking&) = delete;

   private:
    Communicator& c_;
  };
  void set_blocking(bool blocking);
  // Runs this rank's argument checks, then (with check_calls) agrees on the
  // call with every rank; throws on every rank if any disagrees or failed.
  template <typename Checks>
  void guard(const detail::CallFingerprint& fp, Checks&& checks);

  explicit Communicator(std::shared_ptr<detail::CommunicatorImpl> impl);
  Work start(Call call, Algorithm algorithm);
  Work point_to_point(bool sending, std::byte* data, std::size_t bytes, int peer, int tag);

  std::shared_ptr<detail::CommunicatorImpl> impl_;
};

}  // namespace gnnrt::collectives
