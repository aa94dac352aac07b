#include "launch/partition.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "launch/train.h"
#include "model/data/dataset.h"
#include "model/data/partition.h"
#include "model/data/shard.h"
#include "model/job.h"
#include "model/training/full_graph.h"
#include "model/training/halo_plans.h"
#include "model/training/sampled_source.h"

namespace gnnrt::launch {

namespace {

// A sampled job's node shards: each rank's owned nodes, their in-edges and
// features (docs/sampling.md, "Shards").
int write_node_shards(const PartitionCommand& c, const model::proto::Job& job) {
  if (!c.method.empty() || c.seed_given) {
    throw std::invalid_argument(fmt::format(
        "gnnrt partition {}: a sampled job's nodes are owned as its sampling.ownership says (RANGES or METIS, "
        "seeded by the job's seed): use --set sampling.ownership=METIS", !c.method.empty() ? "--method" : "--seed"));
  }
  const model::proto::ShardManifest m = model::write_sampled_shards(c.out, job, c.parts);
  fmt::print("wrote node shards of '{}' ({} nodes, {} in-edges, {} features, {} classes) for {} ranks, owned by "
             "{} -> {}\n", m.name(), m.num_nodes(), m.num_edges(), m.num_features(), m.num_classes(), c.parts,
             m.method(), c.out);
  fmt::print("{:>5} {:>12} {:>14}\n", "rank", "owned nodes", "in-edges");
  for (const auto& r : m.rank()) fmt::print("{:>5} {:>12} {:>14}\n", r.rank(), r.nodes(), r.edges());
  spdlog::info("wrote {} node shards and {}/manifest.pbtxt", c.parts, c.out);
  return 0;
}

}  // namespace

int run_partition(PartitionCommand& c) {
  model::proto::Job job = load_job_with_overrides(c.job, c.dataset, c.sets);
  if (!c.method.empty()) model::apply_override(job, "partition.method=" + c.method);
  if (c.seed_given) model::apply_override(job, fmt::format("partition.seed={}", c.seed));
  model::validate(job);
  if (c.parts == 0) c.parts = job.partition().parts();
  if (c.parts < 1) {
    throw std::invalid_argument("gnnrt partition needs --parts N (or the job's partition.parts)");
  }

  if (model::is_sampled_job(job)) return write_node_shards(c, job);

  model::Dataset data = model::load_dataset(job.dataset().path());
  model::prepare_features(data, job);
  const model::PartitionOptions options = model::partition_options(job, c.parts);
  const model::EdgePartition partition =
      model::partition_edges(data.num_nodes, data.src, data.dst, options);
  const model::proto::ShardManifest m = model::write_job_shards(c.out, data, partition, options, job);
  const model::PartitionStats stats = partition.stats();

  fmt::print("partitioned '{}' ({} nodes, {} edges, {} features) into {} parts with {} -> {}\n",
             data.name, data.num_nodes, data.num_edges(), data.num_features, c.parts,
             model::name(job.partition().method()), c.out);
  fmt::print("replication factor {:.4f}, edge balance {:.4f}, vertex balance {:.4f}, {} shared "
             "vertices, {} halo rows per exchange\n",
             stats.replication_factor, stats.edge_balance, stats.vertex_balance,
             stats.shared_vertices, stats.halo_rows);
  fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>10} {:>16}\n", "rank", "vertices", "masters",
             "edges", "loop edges", "halo rows", "halo bytes/epoch");
  for (const auto& r : m.rank()) {
    fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>10} {:>16}\n", r.rank(), r.nodes(), r.masters(),
               r.edges(), r.edges_self_loops(), r.halo_rows(), r.halo_bytes_per_epoch());
  }
  fmt::print("halo exchanges of the job's programs (all ranks, per exchange):\n");
  for (const auto& h : m.halo()) {
    fmt::print("  {:<12} {:<36} width {:>5}: {:>14} bytes\n", h.program(),
               fmt::format("{} ({})", h.op(), h.layer()), h.width(), h.bytes());
  }
  fmt::print("halo bytes per epoch (one train step and one evaluation), all ranks: {}\n",
             m.halo_bytes_per_epoch());
  spdlog::info("wrote {} shards and {}/manifest.pbtxt", c.parts, c.out);
  return 0;
}

}  // namespace gnnrt::launch
