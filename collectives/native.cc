// Algorithm `native`: MPI's own collective. A blocking call (allreduce(),
// ..., or wait() right away, which the blocking forms do) runs MPI's blocking
// call (MPI_Allreduce, ...: Open MPI's "tuned" component, about twice as fast
// as its non-blocking "libnbc" for small messages) under a BlockingDeadline;
// a non-blocking one posts MPI_Iallreduce, ... and is awaited like any other
// request.
//
// Without the call checks, each call (but a barrier) first verifies that
// every rank makes the same one (Call::verify): an MPI_Iallreduce of its
// signature and its negation under MPI_MAX, or for alltoallv an
// MPI_Ialltoall of the send counts against the receive counts, completed
// before MPI's call starts. MPI's messages carry no count: given counts
// that differ, a rank could return a partial answer (a broadcast does,
// silently) or MPI could write past a buffer. Ranks that differ get an
// error and MPI's call is never made.
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/blocking_deadline.h"
#include "collectives/call_check.h"
#include "collectives/error.h"

namespace gnnrt::collectives::detail {
namespace {

MPI_Datatype mpi_type(ElementType type) {
  switch (type.dtype) {
    case Dtype::f32: return type.located ? MPI_FLOAT_INT : MPI_FLOAT;
    case Dtype::f64: return type.located ? MPI_DOUBLE_INT : MPI_DOUBLE;
    case Dtype::i32: return type.located ? MPI_2INT : MPI_INT32_T;
    case Dtype::i64: return type.located ? MPI_LONG_INT : MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::maxloc: return MPI_MAXLOC;
  }
  return MPI_OP_NULL;
}

int as_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw CollectiveError(std::string("native: ") + what + " of " + std::to_string(n) +
                          " elements exceeds MPI's int count");
  }
  return static_cast<int>(n);
}

std::vector<int> as_ints(const std::vector<std::size_t>& v, const char* what) {
  std::vector<int> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = as_int(v[i], what);
  return out;
}

// MPI's int counts of `call` into `ints` (kept alive until the request
// completes): a count beyond INT_MAX is an error before anything is posted.
void prepare(const Call& call, std::vector<int> (&ints)[4]) {
  switch (call.op) {
    case Collective::allreduce:
    case Collective::broadcast:
      ints[0] = {as_int(call.count, "count")};
      break;
    case Collective::reduce_scatter:
      ints[0] = as_ints(call.counts, "block");
      break;
    case Collective::allgather:
      ints[0] = as_ints(call.counts, "block");
      ints[1] = as_ints(call.displs, "displacement");
      break;
    case Collective::alltoallv:
      ints[0] = as_ints(call.counts, "send count");
      ints[1] = as_ints(call.displs, "send displacement");
      ints[2] = as_ints(call.recv_counts, "receive count");
      ints[3] = as_ints(call.recv_displs, "receive displacement");
      break;
    case Collective::barrier:
      break;
  }
}

// Issues MPI's call for `call` with its prepared counts: non-blocking when
// `request` is given, blocking otherwise. `result` is where a
// reduce_scatter result lands first when recv aliases send.
void issue(const Call& call, MPI_Comm comm, int rank, MPI_Request* request, int* const (&ints)[4],
           std::byte* result) {
  const MPI_Datatype type = mpi_type(call.type);
  const bool blocking = request == nullptr;
  switch (call.op) {
    case Collective::allreduce: {
      const void* send = call.send == call.recv ? MPI_IN_PLACE : call.send;
      const int count = ints[0][0];
      check_mpi(blocking ? MPI_Allreduce(send, call.recv, count, type, mpi_op(call.reduce), comm)
                         : MPI_Iallreduce(send, call.recv, count, type, mpi_op(call.reduce), comm,
                                          request),
                "MPI_Allreduce");
      break;
    }
    case Collective::reduce_scatter:
      check_mpi(blocking ? MPI_Reduce_scatter(call.send, result, ints[0], type,
                                              mpi_op(call.reduce), comm)
                         : MPI_Ireduce_scatter(call.send, result, ints[0], type,
                                               mpi_op(call.reduce), comm, request),
                "MPI_Reduce_scatter");
      break;
    case Collective::allgather: {
      const bool in_place = call.send == call.recv + call.displs[rank] * call.type.size();
      const void* send = in_place ? MPI_IN_PLACE : call.send;
      check_mpi(blocking ? MPI_Allgatherv(send, ints[0][rank], type, call.recv, ints[0],
                                          ints[1], type, comm)
                         : MPI_Iallgatherv(send, ints[0][rank], type, call.recv, ints[0],
                                           ints[1], type, comm, request),
                "MPI_Allgatherv");
      break;
    }
    case Collective::broadcast: {
      const int count = ints[0][0];
      check_mpi(blocking ? MPI_Bcast(call.recv, count, type, call.root, comm)
                         : MPI_Ibcast(call.recv, count, type, call.root, comm, request),
                "MPI_Bcast");
      break;
    }
    case Collective::alltoallv:
      check_mpi(blocking ? MPI_Alltoallv(call.send, ints[0], ints[1], type, call.recv,
                                         ints[2], ints[3], type, comm)
                         : MPI_Ialltoallv(call.send, ints[0], ints[1], type,
                                          call.recv, ints[2], ints[3], type, comm,
                                          request),
                "MPI_Alltoallv");
      break;
    case Collective::barrier:
      check_mpi(blocking ? MPI_Barrier(comm) : MPI_Ibarrier(comm, request), "MPI_Barrier");
      break;
  }
}

// reduce_scatter's recv may alias its own block of send; MPI's call may not.
// The bytes of recv to stage elsewhere first (0: none).
std::size_t staged_result_bytes(const Call& call, int rank) {
  if (call.op != Collective::reduce_scatter) return 0;
  const std::size_t mine = call.counts[rank] * call.type.size();
  const bool aliased = call.recv < call.send + call.bytes() && call.send < call.recv + mine;
  return aliased ? mine : 0;
}

// The verification of a native call's signature (Call::verify), posted
// before MPI's call and checked after both completed. Its buffers are the
// caller's (words() int64 each for `mine` and `theirs`).
struct Verification {
  int64_t* mine = nullptr;
  int64_t* theirs = nullptr;

  static bool wanted(const Call& call) { return call.verify != MPI_COMM_NULL; }
  static std::size_t words(const Call& call) {
    return call.op == Collective::alltoallv ? call.counts.size() : 2;
  }
  void post(const Call& call, MPI_Request* request) {
    if (call.op == Collective::alltoallv) {
      for (std::size_t q = 0; q < call.counts.size(); ++q) {
        mine[q] = static_cast<int64_t>(call.counts[q]);
        theirs[q] = -1;
      }
      check_mpi(MPI_Ialltoall(mine, 1, MPI_INT64_T, theirs, 1, MPI_INT64_T, call.verify, request),
                "MPI_Ialltoall (counts)");
      return;
    }
    const auto s = static_cast<int64_t>(call.signature >> 2);
    mine[0] = s;
    mine[1] = -s;
    check_mpi(MPI_Iallreduce(mine, theirs, 2, MPI_INT64_T, MPI_MAX, call.verify, request),
              "MPI_Iallreduce (signature)");
  }
  // Throws on every rank whose call differs from another's.
  void check(const Call& call, int rank) const {
    const std::string what = fmt::format("{}(native, {} bytes of {})", name(call.op), call.bytes(), name(call.type));
    if (call.op == Collective::alltoallv) {
      for (std::size_t q = 0; q < call.counts.size(); ++q) {
        if (static_cast<std::size_t>(theirs[q]) != call.recv_counts[q]) {
          throw CollectiveError(fmt::format("rank {}: {}: rank {} sent {} elements to this rank, which expected {} "
                                            "(recv_counts[{}]): the ranks disagree",
                                            rank, what, q, theirs[q], call.recv_counts[q], q));
        }
      }
      return;
    }
    if (theirs[0] != mine[0] || theirs[1] != mine[1]) throw CollectiveError(different_calls(rank, what, -1));
  }
};

}  // namespace

// The verification completes before MPI's call starts: MPI given counts
// that differ between ranks may write past a buffer (Open MPI's
// reduce-scatter/allgather allreduce does, seen under ASan), so it must
// never see them. This serialises one small collective before each native
// call, which the built-in table keeps for large messages only.
// Its buffers are scratch (async) and stay allocated after a failure.
Task native(Transfers& t, const Call& call, Scratch& scratch) {
  std::vector<int> counts[4];
  prepare(call, counts);
  if (Verification::wanted(call)) {
    Verification verification;
    auto* words = reinterpret_cast<int64_t*>(scratch.get(2 * Verification::words(call) * sizeof(int64_t)));
    verification.mine = words;
    verification.theirs = words + Verification::words(call);
    MPI_Request check = MPI_REQUEST_NULL;
    verification.post(call, &check);
    co_await t.wait(t.adopt(check, -1));
    verification.check(call, t.rank());
  }
  // MPI reads the count arrays until the request completes: scratch too.
  int* ints[4] = {};
  for (int i = 0; i < 4; ++i) {
    if (counts[i].empty()) continue;
    ints[i] = reinterpret_cast<int*>(scratch.get(counts[i].size() * sizeof(int)));
    std::copy(counts[i].begin(), counts[i].end(), ints[i]);
  }
  const std::size_t staged = staged_result_bytes(call, t.rank());
  std::byte* result = staged > 0 ? scratch.get(staged) : call.recv;
  MPI_Request request = MPI_REQUEST_NULL;
  issue(call, t.comm(), t.rank(), &request, ints, result);
  co_await t.wait(t.adopt(request, -1));
  copy_bytes(call.recv, result, staged);
}

void native_blocking(const Call& call, MPI_Comm comm, int rank, double timeout_seconds) {
  std::vector<int> counts[4];
  prepare(call, counts);
  int* const ints[4] = {counts[0].data(), counts[1].data(), counts[2].data(), counts[3].data()};
  std::vector<std::byte> staging(staged_result_bytes(call, rank));
  std::byte* result = staging.empty() ? call.recv : staging.data();
  BlockingDeadline deadline(name(call.op).data(), "native", call.bytes(), rank, timeout_seconds);
  if (Verification::wanted(call)) {
    std::vector<int64_t> words(2 * Verification::words(call));
    Verification verification{words.data(), words.data() + words.size() / 2};
    MPI_Request check = MPI_REQUEST_NULL;
    verification.post(call, &check);
    check_mpi(MPI_Wait(&check, MPI_STATUS_IGNORE), "MPI_Wait (signature)");
    verification.check(call, rank);
  }
  issue(call, comm, rank, nullptr, ints, result);
  copy_bytes(call.recv, result, staging.size());
}

}  // namespace gnnrt::collectives::detail
