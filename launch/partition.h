// `gnnrt partition JOB --parts N --method M --out DIR`: partitions the job's
// dataset once and writes one shard per rank (model/data/shard.h), so that
// `mpirun -np N gnnrt train JOB --shards DIR` has each rank read only its
// own. Prints the partition's statistics (replication factor, edge and
// vertex balance, per rank: vertices, masters, edges, halo rows, and the
// halo bytes of each exchange the job's compiled programs make, by width)
// and writes them in the manifest. Single process; no MPI.
#pragma once

#include <string>
#include <vector>

namespace gnnrt::launch {

struct PartitionCommand {
  std::string job;                // path; empty: the default job
  std::string dataset;            // --dataset: dataset.path
  std::vector<std::string> sets;  // --set path=value
  int parts = 0;                  // 0: the job's partition.parts
  std::string method;             // empty: the job's partition.method
  std::string out;
  uint64_t seed = 0;
  bool seed_given = false;
};

int run_partition(PartitionCommand& command);

}  // namespace gnnrt::launch
