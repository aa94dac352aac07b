#include "launch/partition.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "collectives/halo_exchange.h"
#include "launch/train.h"
#include "model/dataset.h"
#include "model/job.h"
#include "model/network.h"
#include "model/partition.h"
#include "model/shard.h"
#include "model/trainer.h"
#include "runtime/core.h"

namespace gnnrt::launch {

int run_partition(PartitionCommand& c) {
  model::proto::Job job = load_job_with_overrides(c.job, c.dataset, c.sets);
  if (!c.method.empty()) model::apply_override(job, "partition.method=" + c.method);
  if (c.seed_given) model::apply_override(job, fmt::format("partition.seed={}", c.seed));
  model::validate(job);
  if (c.parts < 1) throw std::invalid_argument(fmt::format("--parts {} must be >= 1", c.parts));

  model::Dataset data = model::load_dataset(job.dataset().path());
  if (job.dataset().normalize_features()) model::normalize_features(data);
  const model::PartitionOptions options = model::partition_options(job, c.parts);
  const model::EdgePartition partition =
      model::partition_edges(data.num_nodes, data.src, data.dst, options);
  const model::proto::ShardManifest m = model::write_shards(c.out, data, partition, options, job);
  const model::PartitionStats stats = partition.stats();

  // The halo exchanges the job's programs make, by width: compiled for a
  // rank (sizes do not change which exchanges there are, or their widths).
  model::NetworkShape shape{1, data.num_features, data.num_classes, 1, 1, true};
  runtime::Core core(runtime::DeviceProfile::named(job.device().profile()), {});
  std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> halos;  // program, op, width, bytes per row
  const auto collect = [&](const model::Network& net, const runtime::CompileOptions& o) {
    const auto compiled = core.compile(net.program, o);
    const runtime::Program& p = compiled->program;
    for (const runtime::Op& op : p.ops) {
      if (op.kind != runtime::OpKind::kHaloSum && op.kind != runtime::OpKind::kHaloMax) continue;
      const auto& v = p.value(op.outputs[0]);
      // Keyed (max/min with a winner): the edge ids too (HaloExchange::keyed_row_bytes).
      const int64_t row = op.inputs.size() > 1
                              ? static_cast<int64_t>(collectives::HaloExchange::keyed_row_bytes(v.shape[1], 4))
                              : v.shape[1] * 4;
      halos.emplace_back(p.name, fmt::format("{} ({})", runtime::to_string(op.kind), op.scope),
                         v.shape[1], row);
    }
  };
  const model::Network train_net = model::build_train_step(job.model(), shape);
  runtime::CompileOptions train_options;
  train_options.train = runtime::TrainStep{train_net.loss, train_net.param_ids,
                                           model::optimizer_config(job.optimizer())};
  collect(train_net, train_options);
  collect(model::build_inference(job.model(), shape), {});

  fmt::print("partitioned '{}' ({} nodes, {} edges, {} features) into {} parts with {} -> {}\n",
             data.name, data.num_nodes, data.num_edges(), data.num_features, c.parts,
             job.partition().method(), c.out);
  fmt::print("replication factor {:.4f}, edge balance {:.4f}, vertex balance {:.4f}, {} shared "
             "vertices, {} halo rows per exchange\n",
             stats.replication_factor, stats.edge_balance, stats.vertex_balance,
             stats.shared_vertices, stats.halo_rows);
  fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>10}\n", "rank", "vertices", "masters", "edges",
             "loop edges", "halo rows");
  for (const auto& r : m.rank()) {
    fmt::print("{:>5} {:>10} {:>10} {:>12} {:>12} {:>10}\n", r.rank(), r.nodes(), r.masters(),
               r.edges(), r.edges_self_loops(), r.halo_rows());
  }
  double epoch_bytes = 0;
  fmt::print("halo exchanges of the job's programs (all ranks, per exchange):\n");
  for (const auto& [program, op, width, row] : halos) {
    const double bytes = static_cast<double>(stats.halo_rows * row);
    epoch_bytes += bytes;
    fmt::print("  {:<12} {:<36} width {:>5}: {:>14.0f} bytes\n", program, op, width, bytes);
  }
  fmt::print("halo bytes per epoch (one train step and one evaluation), all ranks: {:.0f}\n",
             epoch_bytes);
  spdlog::info("wrote {} shards and {}/manifest.pbtxt", c.parts, c.out);
  return 0;
}

}  // namespace gnnrt::launch
