// The collective operations, the algorithms that implement them, and the
// description of one call that every algorithm receives. Each algorithm is a
// unit of its own (one .cc each, named like the algorithm) behind the same
// signature; Communicator builds a Call, the tuning table (tuning.h) or the
// caller picks the algorithm, and the Work runs its coroutine.
//
// Cost per rank for p ranks and n bytes (alpha: latency, beta: time per
// byte; docs/collectives.md has the derivations):
//   ring allreduce            2(p-1) alpha + 2 n (p-1)/p beta
//   recursive doubling        log2(p) (alpha + n beta)      (+2 steps if p is not a power of two)
//   rabenseifner              2 log2(p) alpha + 2 n (p-1)/p beta   (ditto)
//   binomial broadcast        log2(p) (alpha + n beta)
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "collectives/task.h"
#include "collectives/transfers.h"
#include "collectives/types.h"

namespace gnnrt::collectives {

enum class Collective { allreduce, reduce_scatter, allgather, broadcast, alltoallv, barrier };
enum class Algorithm {
  automatic,           // the tuning table decides
  native,              // MPI's own call (blocking from the blocking forms)
  ring,                // allreduce, reduce_scatter, allgather
  recursive_doubling,  // allreduce, allgather
  rabenseifner,        // allreduce; reduce_scatter (recursive halving)
  binomial,            // broadcast
  pairwise,            // alltoallv
};

std::string_view name(Collective op);
std::string_view name(Algorithm algorithm);
Collective parse_collective(std::string_view text);  // throws std::invalid_argument
Algorithm parse_algorithm(std::string_view text);    // throws std::invalid_argument
// The algorithms that implement `op` (native first).
const std::vector<Algorithm>& algorithms_for(Collective op);
bool implements(Algorithm algorithm, Collective op);

// One collective call. Counts and displacements are in elements.
//   allreduce:      send, recv: [count]; recv may equal send (in place)
//   reduce_scatter: send: sum(counts); recv: [counts[rank]] at send's layout
//                   given by displs; recv may alias send's own block
//   allgather:      send: [counts[rank]]; recv: sum(counts) laid out by
//                   displs; send may alias recv's own block
//   broadcast:      recv: [count], meaningful on `root` before the call
//   alltoallv:      send by counts/displs (to each rank), recv by
//                   recv_counts/recv_displs (from each rank)
struct Call {
  Collective op = Collective::allreduce;
  ElementType type;
  ReduceOp reduce = ReduceOp::sum;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  std::size_t count = 0;
  std::vector<std::size_t> counts, displs;
  std::vector<std::size_t> recv_counts, recv_displs;
  int root = 0;
  std::size_t chunk_bytes = 256 * 1024;  // ring pipelining granularity
  // A hash of what every rank's call must agree on (detail::signature of its
  // CallFingerprint): carried in the messages' tags, so that a rank whose
  // call differs (another count, element type, reduce op or root) never
  // matches the others' messages.
  uint64_t signature = 0;
  // Native calls without call checks: a communicator to verify the
  // signature on, concurrently with MPI's call (MPI_COMM_NULL: none).
  MPI_Comm verify = MPI_COMM_NULL;

  // The size the tuner and the benchmark key on (nccl-tests' convention):
  // the whole vector for allreduce, broadcast, reduce_scatter (input) and
  // allgather (output); the bytes this rank sends for alltoallv.
  std::size_t bytes() const;
};

namespace detail {

// Scratch memory for one call, from the communicator's pool; returned when
// the call completes.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual std::byte* get(std::size_t bytes) = 0;
};

Task native(Transfers& t, const Call& call, Scratch& scratch);
// MPI's blocking call for `call` on `comm`, under a BlockingDeadline.
void native_blocking(const Call& call, MPI_Comm comm, int rank, double timeout_seconds);
Task ring_allreduce(Transfers& t, const Call& call, Scratch& scratch);
Task ring_reduce_scatter(Transfers& t, const Call& call, Scratch& scratch);
Task ring_allgather(Transfers& t, const Call& call, Scratch& scratch);
Task recursive_doubling_allreduce(Transfers& t, const Call& call, Scratch& scratch);
Task recursive_doubling_allgather(Transfers& t, const Call& call, Scratch& scratch);
Task rabenseifner_allreduce(Transfers& t, const Call& call, Scratch& scratch);
Task recursive_halving_reduce_scatter(Transfers& t, const Call& call, Scratch& scratch);
Task binomial_broadcast(Transfers& t, const Call& call, Scratch& scratch);
Task pairwise_alltoallv(Transfers& t, const Call& call, Scratch& scratch);

// Runs `algorithm` for `call` (which must implement call.op).
Task run(Algorithm algorithm, Transfers& t, const Call& call, Scratch& scratch);

// Per-rank blocks of a buffer, in elements.
struct Blocks {
  std::vector<std::size_t> offset, length;
  std::size_t max_length() const;
};
// Blocks laid out back to back with the given lengths.
Blocks contiguous_blocks(const std::vector<std::size_t>& lengths);

// memcpy that accepts empty (and then possibly null) ranges.
void copy_bytes(std::byte* to, const std::byte* from, std::size_t bytes);

// p nearly equal blocks of n elements, back to back (the first n % p blocks
// one longer).
Blocks balanced_blocks(std::size_t n, int p);

}  // namespace detail
}  // namespace gnnrt::collectives
