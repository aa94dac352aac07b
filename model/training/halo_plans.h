// The halo exchanges a job's programs make on a vertex-cut graph, as the
// shard manifest records them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "model/data/shard.h"
#include "model/job.pb.h"
#include "model/shard.pb.h"

namespace gnnrt::model {

// The halo exchanges the job's programs make on a partitioned graph with
// this many features and classes, in program order (train step, then
// inference), with their widths and row bytes (bytes left 0: they follow
// from a partition's halo rows). Compiles both programs (no cache).
std::vector<proto::HaloExchangePlan> halo_exchanges(const proto::Job& job, int64_t features,
                                                    int64_t classes, bool sparse_features);

// write_shards with the job's halo exchanges in the manifest.
proto::ShardManifest write_job_shards(const std::filesystem::path& dir, const Dataset& data,
                                      const EdgePartition& partition, const PartitionOptions& options,
                                      const proto::Job& job);

}  // namespace gnnrt::model
