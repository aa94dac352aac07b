#include "model/training/setup.h"

#include <fmt/format.h>

#include "runtime/program_cache.h"

namespace gnnrt::model {

runtime::DeviceProfile device_profile(const proto::Job& job, const CoreSettings& settings) {
  auto p = runtime::DeviceProfile::named(settings.profile.empty() ? job.device().profile() : settings.profile);
  if (settings.hbm_bytes > 0) {
    p.hbm_bytes = settings.hbm_bytes;
  } else if (job.device().hbm_bytes() > 0) {
    p.hbm_bytes = job.device().hbm_bytes();
  }
  return p;
}

runtime::CoreOptions core_options(const proto::Job& job, const CoreSettings& settings) {
  runtime::CoreOptions o;
  if (!settings.no_cache) {
    o.cache_dir = settings.cache_dir.empty() ? runtime::default_cache_dir() : settings.cache_dir;
  }
  o.debug = settings.debug;
  o.trace = !settings.trace_path.empty();
  o.flush_denormals = job.device().flush_denormals();
  o.communicator = settings.communicator;
  o.threads = settings.threads;
  return o;
}

runtime::OptimizerConfig optimizer_config(const proto::Optimizer& o) {
  runtime::OptimizerConfig opt;
  using Kind = runtime::OptimizerConfig::Kind;
  switch (o.kind()) {  // no default: a new kind warns here
    case proto::Optimizer::ADAM:
      opt.kind = Kind::kAdam;
      break;
    case proto::Optimizer::ADAMW:
      opt.kind = Kind::kAdamW;
      break;
    case proto::Optimizer::SGD:
      opt.kind = Kind::kSgd;
      break;
  }
  opt.weight_decay = o.weight_decay();
  opt.momentum = o.momentum();
  opt.nesterov = o.nesterov();
  opt.beta1 = o.beta1();
  opt.beta2 = o.beta2();
  opt.eps = o.eps();
  return opt;
}

std::filesystem::path rank_path(const std::filesystem::path& path, int rank) {
  if (rank == 0) return path;
  return path.parent_path() / fmt::format("{}.rank-{}{}", path.stem().string(), rank,
                                           path.extension().string());
}

}  // namespace gnnrt::model
