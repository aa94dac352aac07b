// A job's two programs compiled on one core, as the trainer compiles them,
// with the train step's gradients kept readable (tests compare them).
#pragma once

#include <memory>

#include "model/job.pb.h"
#include "model/modules/network.h"
#include "model/training/setup.h"
#include "model/training/full_graph.h"
#include "runtime/core.h"

namespace gnnrt::testing {

struct CompiledJob {
  model::Network train_net, infer_net;
  std::shared_ptr<const runtime::CompiledProgram> step, infer;
};

inline CompiledJob compile_job(runtime::Core& core, const model::proto::Job& job,
                               const model::NetworkShape& shape) {
  CompiledJob c{model::build_train_step(job.model(), shape), model::build_inference(job.model(), shape),
                nullptr, nullptr};
  runtime::CompileOptions options;
  options.train = runtime::TrainStep{c.train_net.loss, c.train_net.param_ids,
                                     model::optimizer_config(job.optimizer()), /*keep_grads=*/true};
  c.step = core.compile(c.train_net.program, options);
  c.infer = core.compile(c.infer_net.program, {});
  return c;
}

}  // namespace gnnrt::testing
