// Algorithm `binomial` (broadcast): the root sends to ranks at distance
// p/2, p/4, ..., each receiver forwards down its own subtree, so the data
// reaches every rank in ceil(log2 p) rounds (MPICH's MPIR_Bcast_binomial).
// Ranks are counted relative to the root.
#include "collectives/algorithm.h"

namespace gnnrt::collectives::detail {

Task binomial_broadcast(Transfers& t, const Call& call, Scratch&) {
  const int p = t.size();
  const int relative = (t.rank() - call.root + p) % p;
  const std::size_t bytes = call.count * call.type.size();
  int mask = 1;
  while (mask < p) {
    if (relative & mask) {
      const int parent = (relative - mask + call.root) % p;
      co_await t.wait(t.irecv(parent, call.recv, bytes));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < p) {
      const int child = (relative + mask + call.root) % p;
      t.isend(child, call.recv, bytes);
    }
  }
  co_await t.wait_all();
}

}  // namespace gnnrt::collectives::detail
