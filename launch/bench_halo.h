// `gnnrt bench halo` (run under mpirun): what a vertex-cut halo exchange
// costs next to the naive alternative. A random graph (every rank generates
// the same one; a fraction --locality of the edges join vertices at most
// --window ids apart, as in graphs with community structure, the rest are
// uniform) is edge-partitioned over the ranks (random edges, or 1D by
// destination); each rank holds the endpoints of its edges, and vertices held
// by several ranks are mirrors. It times one halo all-reduce (sum) of a
// [local rows, F] f32 buffer over each transport, and one dense allreduce of
// the full [nodes, F] matrix, and reports time (avg/min/max over ranks) and
// bytes sent per rank.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/communicator.h"

namespace gnnrt::launch {

struct HaloBenchOptions {
  int64_t nodes = 100000;
  double avg_degree = 10;
  int64_t features = 64;
  double locality = 0.9;   // fraction of edges within `window` ids
  int64_t window = 1000;
  std::string partition = "destination";  // random | destination
  uint64_t seed = 1;
  double seconds = 1.0;  // time budget per method
  std::string json;
};

int run_halo_bench(collectives::Communicator& comm, const HaloBenchOptions& options);

}  // namespace gnnrt::launch
