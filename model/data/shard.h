// Shards: what one rank of a vertex-cut partition holds, and their files.
//
// A rank's local vertices are the vertices it masters plus the endpoints of
// its edges, in ascending global id. It holds:
//   - its edges of the dataset's graph ("graph") and of the graph with one
//     self loop per vertex ("graph.self_loops": the dataset's edges without
//     self loops and one loop per vertex, numbered in destination order as
//     model::self_loop_ids gives, each loop on its vertex's master), in
//     local ids, in ascending global edge id, with those global ids (GCN/GAT
//     self loops count once per vertex, not once per replica);
//   - the global id and master flag of each local vertex, and its global
//     in-degree in both graphs;
//   - the mirror table of the halo (each local vertex other ranks also hold,
//     and which ranks);
//   - the features and labels of its local vertices, and the train/val/test
//     masks of the vertices it masters (each labelled vertex counts once),
//     with the global count of each mask.
// Nothing of the rest of the graph: per-rank memory follows the share.
//
// Files (`gnnrt partition --out DIR`): DIR/manifest.pbtxt (model/shard.proto:
// what, how, statistics, and per rank each array's shape, dtype and
// xxHash64) and DIR/rank-<K>/<array>.npy, plus DIR/rank-<K>/run.txt with the
// partition run's id. Written into a fresh folder renamed into place, so a
// reader never sees a half-written set. read_shard() verifies everything it
// reads and throws ShardError naming the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "collectives/halo_exchange.h"
#include "model/data/dataset.h"
#include "model/data/partition.h"
#include "model/data/shard_files.h"
#include "model/job.pb.h"
#include "model/shard.pb.h"

namespace gnnrt::model {

struct LocalGraph {
  std::vector<int32_t> src, dst;   // local ids
  std::vector<int64_t> edge_id;    // global edge ids, ascending
  std::vector<int64_t> in_degree;  // [local vertices]: the global in-degree
};

struct Shard {
  int rank = 0, parts = 1;
  int64_t num_nodes = 0;  // global
  int64_t num_features = 0, num_classes = 0;
  int64_t train_count = 0, val_count = 0, test_count = 0;  // global mask counts
  std::vector<int64_t> global_id;  // [N_local], ascending
  std::vector<uint8_t> is_master;  // [N_local]
  LocalGraph graph, self_loops;
  collectives::MirrorTable mirrors;
  std::vector<float> x;  // [N_local, F]; empty when x_sparse holds the features
  std::optional<SparseFeatures> x_sparse;
  std::vector<int64_t> y;
  std::vector<uint8_t> train_mask, val_mask, test_mask;  // master rows only

  int64_t num_local() const { return static_cast<int64_t>(global_id.size()); }
};

// Rank `rank`'s shard of `data` under `partition` (edge_part over data's
// edges, masters, replicas).
Shard make_shard(const Dataset& data, const EdgePartition& partition, int rank);

// Writes every rank's shard and the manifest into `dir` (replacing it).
// `job` gives the dataset and model recorded in the manifest, `halo` the
// exchanges its programs make (model/training/halo_plans.h: write_job_shards).
proto::ShardManifest write_shards(const std::filesystem::path& dir, const Dataset& data,
                                  const EdgePartition& partition, const PartitionOptions& options,
                                  const proto::Job& job, std::vector<proto::HaloExchangePlan> halo);

// The manifest of a folder of vertex-cut shards.
proto::ShardManifest read_manifest(const std::filesystem::path& dir);

// Rank `rank`'s shard, verified against the manifest: the rank count, the
// partition run, every array's presence, size and checksum, and the job's
// dataset and model. Throws ShardError.
Shard read_shard(const std::filesystem::path& dir, int rank, int ranks, const proto::Job& job);

// The partition options a job names (parts: the rank count).
PartitionOptions partition_options(const proto::Job& job, int parts);

// The partition statistics in the manifest's form.
void describe_partition(const PartitionStats& stats, proto::ShardManifest& manifest);

}  // namespace gnnrt::model
