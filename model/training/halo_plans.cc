#include "model/training/halo_plans.h"

#include "collectives/halo_exchange.h"
#include "model/modules/network.h"
#include "model/training/setup.h"
#include "runtime/core.h"

namespace gnnrt::model {

using runtime::Core;

std::vector<proto::HaloExchangePlan> halo_exchanges(const proto::Job& job, int64_t features,
                                                    int64_t classes, bool sparse_features) {
  // Sizes do not change which exchanges there are, or their widths.
  const NetworkShape shape{1, features, classes, 1, 1, true, sparse_features ? 1 : -1};
  Core core(runtime::DeviceProfile::named(job.device().profile()), {});
  std::vector<proto::HaloExchangePlan> plans;
  const auto collect = [&](const Network& net, const runtime::CompileOptions& options) {
    const auto compiled = core.compile(net.program, options);
    const runtime::Program& p = compiled->program;
    for (const runtime::Op& op : p.ops) {
      if (op.kind != runtime::OpKind::kHaloSum && op.kind != runtime::OpKind::kHaloMax) continue;
      const int64_t width = p.value(op.outputs[0]).shape[1];
      const std::size_t value_bytes = item_size(p.float_type);
      proto::HaloExchangePlan& plan = plans.emplace_back();
      plan.set_program(p.name);
      plan.set_op(std::string(runtime::to_string(op.kind)));
      plan.set_layer(op.scope);
      plan.set_width(width);
      // Keyed (max/min with a winner): the edge ids travel too.
      const std::size_t row = op.inputs.size() > 1
                                  ? collectives::HaloExchange::keyed_row_bytes(width, value_bytes)
                                  : static_cast<std::size_t>(width) * value_bytes;
      plan.set_row_bytes(static_cast<int64_t>(row));
    }
  };
  const Network train_net = build_train_step(job.model(), shape);
  runtime::CompileOptions train_options;
  train_options.train = runtime::TrainStep{train_net.loss, train_net.param_ids, optimizer_config(job.optimizer())};
  collect(train_net, train_options);
  collect(build_inference(job.model(), shape), {});
  return plans;
}

proto::ShardManifest write_job_shards(const std::filesystem::path& dir, const Dataset& data,
                                      const EdgePartition& partition, const PartitionOptions& options,
                                      const proto::Job& job) {
  return write_shards(dir, data, partition, options, job,
                      halo_exchanges(job, data.num_features, data.num_classes, data.x_sparse.has_value()));
}

}  // namespace gnnrt::model
