// Node shards on disk (docs/sampling.md, "Shards"): `gnnrt partition` on a
// sampled job writes each rank's NodeShard once, and `gnnrt train --shards
// DIR` has each rank read only its own: no rank reads the whole graph.
//
//   DIR/manifest.pbtxt      model/shard.proto, format gnnrt-node-shards-1
//   DIR/common/*.npy        train, val, test (int32 node ids, ascending) and,
//                           under METIS ownership, owner (int32 [N])
//   DIR/rank-K/*.npy        indptr (int64 [n+1]), indices (int32 [e]),
//                           x (float32 [n, F]), y (int32 [n]) and, under
//                           METIS ownership, owned_nodes (int32 [n])
//   DIR/{common,rank-K}/run.txt   the partition run's id
//
// The reader verifies the manifest against the job (dataset, rank count,
// ownership, direction), each array's dtype, shape and checksum, and then
// the values the sampler trusts (offsets, ids, labels, finite features),
// throwing ShardError naming the file and row.
#pragma once

#include <filesystem>
#include <functional>

#include "model/data/node_shard.h"
#include "model/job.pb.h"
#include "model/shard.pb.h"

namespace gnnrt::model {

inline constexpr const char* kNodeShardFormat = "gnnrt-node-shards-1";

// Whether the job's nodes are owned by METIS parts on `ranks` ranks (one
// rank owns them all: a range).
inline bool metis_ownership(const proto::Job& job, int ranks) {
  return job.sampling().ownership() == proto::Sampling::METIS && ranks > 1;
}

// Writes `parts` shards, rank r's made by make(r) (one in memory at a
// time), into `dir` (replacing it). `job` gives the dataset, ownership and
// direction recorded in the manifest.
proto::ShardManifest write_node_shards(const std::filesystem::path& dir, const proto::Job& job, int parts,
                                       const std::function<NodeShard(int rank)>& make);

// Rank `rank`'s shard (of `ranks`), verified. `directed_matters`: whether
// the job's sampling.undirected changes the graph (loaded datasets; the
// products-like graph is undirected either way).
NodeShard read_node_shard(const std::filesystem::path& dir, int rank, int ranks, const proto::Job& job,
                          bool directed_matters);

}  // namespace gnnrt::model
