// Algorithm `native`: MPI's own collective. A blocking call (allreduce(),
// ..., or wait() right away, which the blocking forms do) runs MPI's blocking
// call (MPI_Allreduce, ...: Open MPI's "tuned" component, about twice as fast
// as its non-blocking "libnbc" for small messages) under a BlockingDeadline;
// a non-blocking one posts MPI_Iallreduce, ... and is awaited like any other
// request.
//
// Without the call checks, each call (but a barrier) verifies beside MPI's
// own that every rank made the same one (Call::verify): a non-blocking
// MPI_Iallreduce of its signature and its negation under MPI_MAX, posted
// first, or for alltoallv an MPI_Ialltoall of the send counts against the
// receive counts. MPI's messages carry no count, so without it a rank
// that called with more elements than the others could return a partial
// answer (a broadcast does, silently). Ranks that differ get an error; no
// rank returns MPI's answer first.
#include <mpi.h>

#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <memory>
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

// Issues MPI's call for `call`: non-blocking when `request` is given,
// blocking otherwise. `ints` keeps the int count arrays alive until the
// request completes; `result` is where a reduce_scatter result lands first
// when recv aliases send.
void issue(const Call& call, MPI_Comm comm, int rank, MPI_Request* request,
           std::vector<int> (&ints)[4], std::byte* result) {
  const MPI_Datatype type = mpi_type(call.type);
  const bool blocking = request == nullptr;
  switch (call.op) {
    case Collective::allreduce: {
      const void* send = call.send == call.recv ? MPI_IN_PLACE : call.send;
      const int count = as_int(call.count, "count");
      check_mpi(blocking ? MPI_Allreduce(send, call.recv, count, type, mpi_op(call.reduce), comm)
                         : MPI_Iallreduce(send, call.recv, count, type, mpi_op(call.reduce), comm,
                                          request),
                "MPI_Allreduce");
      break;
    }
    case Collective::reduce_scatter:
      ints[0] = as_ints(call.counts, "block");
      check_mpi(blocking ? MPI_Reduce_scatter(call.send, result, ints[0].data(), type,
                                              mpi_op(call.reduce), comm)
                         : MPI_Ireduce_scatter(call.send, result, ints[0].data(), type,
                                               mpi_op(call.reduce), comm, request),
                "MPI_Reduce_scatter");
      break;
    case Collective::allgather: {
      ints[0] = as_ints(call.counts, "block");
      ints[1] = as_ints(call.displs, "displacement");
      const bool in_place = call.send == call.recv + call.displs[rank] * call.type.size();
      const void* send = in_place ? MPI_IN_PLACE : call.send;
      check_mpi(blocking ? MPI_Allgatherv(send, ints[0][rank], type, call.recv, ints[0].data(),
                                          ints[1].data(), type, comm)
                         : MPI_Iallgatherv(send, ints[0][rank], type, call.recv, ints[0].data(),
                                           ints[1].data(), type, comm, request),
                "MPI_Allgatherv");
      break;
    }
    case Collective::broadcast: {
      const int count = as_int(call.count, "count");
      check_mpi(blocking ? MPI_Bcast(call.recv, count, type, call.root, comm)
                         : MPI_Ibcast(call.recv, count, type, call.root, comm, request),
                "MPI_Bcast");
      break;
    }
    case Collective::alltoallv:
      ints[0] = as_ints(call.counts, "send count");
      ints[1] = as_ints(call.displs, "send displacement");
      ints[2] = as_ints(call.recv_counts, "receive count");
      ints[3] = as_ints(call.recv_displs, "receive displacement");
      check_mpi(blocking ? MPI_Alltoallv(call.send, ints[0].data(), ints[1].data(), type, call.recv,
                                         ints[2].data(), ints[3].data(), type, comm)
                         : MPI_Ialltoallv(call.send, ints[0].data(), ints[1].data(), type,
                                          call.recv, ints[2].data(), ints[3].data(), type, comm,
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
// before MPI's call and checked after both completed.
struct Verification {
  std::vector<int64_t> mine, theirs;

  bool wanted(const Call& call) const { return call.verify != MPI_COMM_NULL; }
  void post(const Call& call, MPI_Request* request) {
    if (call.op == Collective::alltoallv) {
      mine.assign(call.counts.begin(), call.counts.end());
      theirs.assign(mine.size(), -1);
      check_mpi(MPI_Ialltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T, call.verify, request),
                "MPI_Ialltoall (counts)");
      return;
    }
    const auto s = static_cast<int64_t>(call.signature >> 2);
    mine = {s, -s};
    theirs.assign(2, 0);
    check_mpi(MPI_Iallreduce(mine.data(), theirs.data(), 2, MPI_INT64_T, MPI_MAX, call.verify, request),
              "MPI_Iallreduce (signature)");
  }
  // Throws on every rank whose call differs from another's.
  void check(const Call& call, int rank) const {
    const std::string what = fmt::format("{}(native, {} bytes of {})", name(call.op), call.bytes(), name(call.type));
    if (call.op == Collective::alltoallv) {
      for (std::size_t q = 0; q < theirs.size(); ++q) {
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

Task native(Transfers& t, const Call& call, Scratch& scratch) {
  std::vector<int> ints[4];  // live until the request completes
  const std::size_t staged = staged_result_bytes(call, t.rank());
  std::byte* result = staged > 0 ? scratch.get(staged) : call.recv;
  Verification verification;
  int verifying = -1;
  if (verification.wanted(call)) {
    MPI_Request check = MPI_REQUEST_NULL;
    verification.post(call, &check);
    verifying = t.adopt(check, -1);
  }
  MPI_Request request = MPI_REQUEST_NULL;
  issue(call, t.comm(), t.rank(), &request, ints, result);
  co_await t.wait(t.adopt(request, -1), verifying);
  if (verifying >= 0) verification.check(call, t.rank());
  copy_bytes(call.recv, result, staged);
}

void native_blocking(const Call& call, MPI_Comm comm, int rank, double timeout_seconds) {
  std::vector<int> ints[4];
  std::vector<std::byte> staging(staged_result_bytes(call, rank));
  std::byte* result = staging.empty() ? call.recv : staging.data();
  Verification verification;
  MPI_Request check = MPI_REQUEST_NULL;
  if (verification.wanted(call)) verification.post(call, &check);
  try {
    BlockingDeadline deadline(name(call.op).data(), "native", call.bytes(), rank, timeout_seconds);
    issue(call, comm, rank, nullptr, ints, result);
    if (check != MPI_REQUEST_NULL) check_mpi(MPI_Wait(&check, MPI_STATUS_IGNORE), "MPI_Wait (signature)");
  } catch (...) {
    // MPI's call failed (a truncated message: another count) with the
    // verification in flight: MPI may still write its buffers, which stay
    // allocated for good (after a collective error the job ends).
    if (check != MPI_REQUEST_NULL) {
      MPI_Request_free(&check);
      static std::vector<std::unique_ptr<Verification>> kept;  // reachable, not a leak
      kept.push_back(std::make_unique<Verification>(std::move(verification)));
    }
    throw;
  }
  if (verification.wanted(call)) verification.check(call, rank);
  copy_bytes(call.recv, result, staging.size());
}

}  // namespace gnnrt::collectives::detail
