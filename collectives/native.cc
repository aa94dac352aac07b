// Algorithm `native`: MPI's own non-blocking collective (MPI_Iallreduce,
// MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibcast, MPI_Ialltoallv,
// MPI_Ibarrier), awaited like any other request. Open MPI picks its own
// algorithm inside (the "tuned"/"libnbc" components).
#include <mpi.h>

#include <climits>
#include <cstring>
#include <string>

#include "collectives/algorithm.h"
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

}  // namespace

Task native(Transfers& t, const Call& call, Scratch& scratch) {
  const MPI_Datatype type = mpi_type(call.type);
  const std::size_t element = call.type.size();
  MPI_Comm comm = t.comm();
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs, recv_counts, recv_displs;  // live until the request completes
  std::byte* result = nullptr;  // set when the result lands in scratch first
  switch (call.op) {
    case Collective::allreduce: {
      const void* send = call.send == call.recv ? MPI_IN_PLACE : call.send;
      check_mpi(MPI_Iallreduce(send, call.recv, as_int(call.count, "count"), type,
                               mpi_op(call.reduce), comm, &request),
                "MPI_Iallreduce");
      break;
    }
    case Collective::reduce_scatter: {
      counts = as_ints(call.counts, "block");
      const std::size_t mine = call.counts[t.rank()] * element;
      const std::size_t total = call.bytes();
      const bool aliased = call.recv < call.send + total && call.send < call.recv + mine;
      result = aliased ? scratch.get(mine) : call.recv;
      check_mpi(MPI_Ireduce_scatter(call.send, result, counts.data(), type, mpi_op(call.reduce),
                                    comm, &request),
                "MPI_Ireduce_scatter");
      break;
    }
    case Collective::allgather: {
      counts = as_ints(call.counts, "block");
      displs = as_ints(call.displs, "displacement");
      const bool in_place = call.send == call.recv + call.displs[t.rank()] * element;
      check_mpi(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : call.send, counts[t.rank()], type,
                                call.recv, counts.data(), displs.data(), type, comm, &request),
                "MPI_Iallgatherv");
      break;
    }
    case Collective::broadcast:
      check_mpi(MPI_Ibcast(call.recv, as_int(call.count, "count"), type, call.root, comm, &request),
                "MPI_Ibcast");
      break;
    case Collective::alltoallv:
      counts = as_ints(call.counts, "send count");
      displs = as_ints(call.displs, "send displacement");
      recv_counts = as_ints(call.recv_counts, "receive count");
      recv_displs = as_ints(call.recv_displs, "receive displacement");
      check_mpi(MPI_Ialltoallv(call.send, counts.data(), displs.data(), type, call.recv,
                               recv_counts.data(), recv_displs.data(), type, comm, &request),
                "MPI_Ialltoallv");
      break;
    case Collective::barrier:
      check_mpi(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
      break;
  }
  co_await t.wait(t.adopt(request, -1));
  if (call.op == Collective::reduce_scatter && result != call.recv) {
    std::memcpy(call.recv, result, call.counts[t.rank()] * element);
  }
}

}  // namespace gnnrt::collectives::detail
