#include "collectives/algorithm.h"

#include <memory_resource>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace gnnrt::collectives {

std::string_view name(Collective op) {
  switch (op) {
    case Collective::allreduce: return "allreduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::allgather: return "allgather";
    case Collective::broadcast: return "broadcast";
    case Collective::alltoallv: return "alltoallv";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

std::string_view name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::automatic: return "auto";
    case Algorithm::native: return "native";
    case Algorithm::ring: return "ring";
    case Algorithm::recursive_doubling: return "recursive_doubling";
    case Algorithm::rabenseifner: return "rabenseifner";
    case Algorithm::binomial: return "binomial";
    case Algorithm::pairwise: return "pairwise";
  }
  return "?";
}

Collective parse_collective(std::string_view text) {
  for (auto op : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
                  Collective::broadcast, Collective::alltoallv, Collective::barrier}) {
    if (name(op) == text) return op;
  }
  throw std::invalid_argument("unknown collective '" + std::string(text) +
                              "' (expected allreduce, reduce_scatter, allgather, broadcast, "
                              "alltoallv or barrier)");
}

Algorithm parse_algorithm(std::string_view text) {
  for (auto a : {Algorithm::automatic, Algorithm::native, Algorithm::ring,
                 Algorithm::recursive_doubling, Algorithm::rabenseifner, Algorithm::binomial,
                 Algorithm::pairwise}) {
    if (name(a) == text) return a;
  }
  throw std::invalid_argument("unknown algorithm '" + std::string(text) +
                              "' (expected auto, native, ring, recursive_doubling, "
                              "rabenseifner, binomial or pairwise)");
}

const std::vector<Algorithm>& algorithms_for(Collective op) {
  static const std::vector<Algorithm> allreduce{Algorithm::native, Algorithm::ring,
                                                Algorithm::recursive_doubling,
                                                Algorithm::rabenseifner};
  static const std::vector<Algorithm> reduce_scatter{Algorithm::native, Algorithm::ring,
                                                     Algorithm::rabenseifner};
  static const std::vector<Algorithm> allgather{Algorithm::native, Algorithm::ring,
                                                Algorithm::recursive_doubling};
  static const std::vector<Algorithm> broadcast{Algorithm::native, Algorithm::binomial};
  static const std::vector<Algorithm> alltoallv{Algorithm::native, Algorithm::pairwise};
  static const std::vector<Algorithm> barrier{Algorithm::native};
  switch (op) {
    case Collective::allreduce: return allreduce;
    case Collective::reduce_scatter: return reduce_scatter;
    case Collective::allgather: return allgather;
    case Collective::broadcast: return broadcast;
    case Collective::alltoallv: return alltoallv;
    case Collective::barrier: return barrier;
  }
  return barrier;
}

bool implements(Algorithm algorithm, Collective op) {
  for (auto a : algorithms_for(op)) {
    if (a == algorithm) return true;
  }
  return false;
}

std::size_t Call::bytes() const {
  const std::size_t element = type.size();
  switch (op) {
    case Collective::allreduce:
    case Collective::broadcast: return count * element;
    case Collective::reduce_scatter:
    case Collective::allgather:
    case Collective::alltoallv:
      return std::accumulate(counts.begin(), counts.end(), std::size_t{0}) * element;
    case Collective::barrier: return 0;
  }
  return 0;
}

namespace detail {

std::pmr::memory_resource& frame_pool() {
  // Never destroyed: a Work may outlive this thread's thread_local objects
  // (static destruction order), and its frame must still be freed. Each
  // thread's pool is kept in this list, so the pool of a thread that has
  // ended (a sampled job's prefetch thread) stays reachable, not leaked.
  using Pool = std::pmr::unsynchronized_pool_resource;
  static auto* const lock = new std::mutex();
  static auto* const pools = new std::vector<std::unique_ptr<Pool>>();
  thread_local Pool* const pool = [] {
    std::lock_guard guard(*lock);
    return pools->emplace_back(std::make_unique<Pool>()).get();
  }();
  return *pool;
}

Blocks balanced_blocks(std::size_t n, int p) {
  std::vector<std::size_t> lengths(p);
  for (int b = 0; b < p; ++b) lengths[b] = n / p + (static_cast<std::size_t>(b) < n % p);
  return contiguous_blocks(lengths);
}

std::size_t Blocks::max_length() const {
  std::size_t m = 0;
  for (auto n : length) m = std::max(m, n);
  return m;
}

Blocks contiguous_blocks(const std::vector<std::size_t>& lengths) {
  Blocks blocks{std::vector<std::size_t>(lengths.size()), lengths};
  for (std::size_t b = 1; b < lengths.size(); ++b) {
    blocks.offset[b] = blocks.offset[b - 1] + lengths[b - 1];
  }
  return blocks;
}

void copy_bytes(std::byte* to, const std::byte* from, std::size_t bytes) {
  if (bytes > 0 && to != from) std::memcpy(to, from, bytes);
}

Task run(Algorithm algorithm, Transfers& t, const Call& call, Scratch& scratch) {
  if (algorithm == Algorithm::native) return native(t, call, scratch);
  switch (call.op) {
    case Collective::allreduce:
      if (algorithm == Algorithm::ring) return ring_allreduce(t, call, scratch);
      if (algorithm == Algorithm::recursive_doubling) return recursive_doubling_allreduce(t, call, scratch);
      if (algorithm == Algorithm::rabenseifner) return rabenseifner_allreduce(t, call, scratch);
      break;
    case Collective::reduce_scatter:
      if (algorithm == Algorithm::ring) return ring_reduce_scatter(t, call, scratch);
      if (algorithm == Algorithm::rabenseifner) return recursive_halving_reduce_scatter(t, call, scratch);
      break;
    case Collective::allgather:
      if (algorithm == Algorithm::ring) return ring_allgather(t, call, scratch);
      if (algorithm == Algorithm::recursive_doubling) return recursive_doubling_allgather(t, call, scratch);
      break;
    case Collective::broadcast:
      if (algorithm == Algorithm::binomial) return binomial_broadcast(t, call, scratch);
      break;
    case Collective::alltoallv:
      if (algorithm == Algorithm::pairwise) return pairwise_alltoallv(t, call, scratch);
      break;
    case Collective::barrier: break;
  }
  throw std::invalid_argument(std::string(name(call.op)) + " has no algorithm '" +
                              std::string(name(algorithm)) + "'");
}

}  // namespace detail
}  // namespace gnnrt::collectives
