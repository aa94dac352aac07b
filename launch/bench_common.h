// Shared by the MPI benchmarks (`gnnrt bench collectives`, `gnnrt bench
// halo`): timing a collective loop the nccl-tests / OSU way, statistics over
// ranks, and how the job sits on the machine (oversubscription and Open
// MPI's mpi_yield_when_idle, which decide small-message latency when ranks
// exceed cores).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace gnnrt::launch {

struct RankStats {
  double avg_us = 0, min_us = 0, max_us = 0;  // per-iteration time, over ranks
};

// Times steps (each one complete operation) that are compared with each
// other (the algorithms of one size; the halo against the dense allreduce).
// Each step first runs `warmup` times; the slowest rank's warm-up time sets
// its iterations per pass (budget_seconds / rounds, at least min_iters /
// rounds, at most max_iters / rounds; every rank runs the same count). Then
// the steps run round-robin, `rounds` passes through the list, each pass
// starting one step later than the one before; a step's per-iteration time
// on a rank is the median over passes, and the result is its avg/min/max
// over ranks. A shared machine that slows down for a few seconds then slows
// every step alike, instead of whichever was being timed. `iterations`
// receives each step's total count.
std::vector<RankStats> time_interleaved(collectives::Communicator& comm,
                                        const std::vector<std::function<void()>>& steps,
                                        double budget_seconds, int warmup, int min_iters,
                                        int max_iters, int rounds,
                                        std::vector<int>* iterations = nullptr);

// Writes `text` to `path` through a temporary file and a rename.
void write_atomically(const std::string& path, const std::string& text);

struct Placement {
  int ranks_on_node = 1;
  unsigned cores = 1;
  bool oversubscribed = false;
  std::string yield_when_idle;  // "1", "0" or "unknown"
  std::string describe() const;
};
Placement placement(const collectives::Communicator& comm);

}  // namespace gnnrt::launch
