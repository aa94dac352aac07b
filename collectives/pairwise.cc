// Algorithm `pairwise` (alltoallv): p - 1 rounds; in round k rank r sends to
// r + k and receives from r - k, so each round is a permutation and no rank
// is flooded (MPICH's pairwise exchange). The block for itself is copied.
#include "collectives/algorithm.h"

namespace gnnrt::collectives::detail {

Task pairwise_alltoallv(Transfers& t, const Call& call, Scratch&) {
  const int p = t.size(), r = t.rank();
  const std::size_t element = call.type.size();
  copy_bytes(call.recv + call.recv_displs[r] * element, call.send + call.displs[r] * element,
             call.counts[r] * element);
  for (int k = 1; k < p; ++k) {
    const int to = (r + k) % p, from = (r - k + p) % p;
    const int send =
        t.isend(to, call.send + call.displs[to] * element, call.counts[to] * element);
    const int receive = t.irecv(from, call.recv + call.recv_displs[from] * element,
                                call.recv_counts[from] * element);
    co_await t.wait(send, receive);
  }
}

}  // namespace gnnrt::collectives::detail
