// The core a job runs on, and the job's optimizer in the runtime's terms.
#pragma once

#include <filesystem>

#include "model/job.pb.h"
#include "model/training/options.h"
#include "runtime/core.h"

namespace gnnrt::model {

runtime::OptimizerConfig optimizer_config(const proto::Optimizer& optimizer);

// The core a job trains on: the job's device profile (settings.profile and
// hbm_bytes override it) and the core's options (cache, debug, trace,
// subnormals, the communicator).
runtime::DeviceProfile device_profile(const proto::Job& job, const CoreSettings& settings);
runtime::CoreOptions core_options(const proto::Job& job, const CoreSettings& settings);

// `path` for rank 0; `<stem>.rank-K<ext>` for rank K > 0.
std::filesystem::path rank_path(const std::filesystem::path& path, int rank);

}  // namespace gnnrt::model
