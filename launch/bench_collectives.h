// `gnnrt bench collectives` (run under mpirun): the collective-latency
// benchmark in the nccl-tests / OSU convention. For each operation,
// algorithm and size (f32 elements, powers of two from --min-bytes to
// --max-bytes) it prints time avg/min/max over ranks in microseconds,
// algorithm bandwidth (bytes / time) and bus bandwidth (algbw scaled by the
// share of data each rank must move: 2(p-1)/p for allreduce, (p-1)/p for
// allgather, reduce_scatter and alltoallv, 1 for broadcast). --json writes
// the rows; --tune writes the fastest algorithm per size as a tuning table.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace gnnrt::launch {

struct CollectiveBenchOptions {
  std::vector<std::string> ops;  // empty: allreduce, reduce_scatter, allgather, broadcast, alltoallv
  std::string algorithm;         // empty: every algorithm each op has
  std::size_t min_bytes = 4;
  std::size_t max_bytes = std::size_t{64} << 20;
  double seconds_per_size = 0.1;  // per algorithm
  int rounds = 20;                // interleaved passes (bench_common.h: time_interleaved)
  std::string json;  // write the rows here
  std::string tune;  // write (merge into) this tuning table
};

// Returns the process exit status.
int run_collective_bench(collectives::Communicator& comm, const CollectiveBenchOptions& options);

}  // namespace gnnrt::launch
