// `gnnrt bench halo` (run under mpirun): what a vertex-cut halo exchange
// costs next to the naive alternative. The graph is a data set's
// (--dataset: Cora, PubMed, any spec model::load_dataset takes) or a random
// one that every rank generates alike (a fraction --locality of the edges
// join vertices at most --window ids apart, as in graphs with community
// structure, the rest are uniform). Every rank partitions its edges the same
// way (model/data/partition.h: random, destination, hdrf or metis); a rank holds
// the endpoints of its edges, and vertices held by several ranks are
// mirrors. It times one halo all-reduce (sum) of a [local rows, F] f32 buffer
// over each transport and one dense allreduce of the full [nodes, F] matrix,
// interleaved, and reports time (avg/min/max over ranks) and bytes sent per
// rank.
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
  std::string dataset;                    // empty: the generated graph
  std::string partition = "destination";  // random | destination | hdrf | metis
  uint64_t seed = 1;
  double seconds = 1.0;  // time budget per method
  int rounds = 10;       // interleaved passes
  std::string json;
};

int run_halo_bench(collectives::Communicator& comm, const HaloBenchOptions& options);

}  // namespace gnnrt::launch
