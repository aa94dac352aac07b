#include "model/training/trainer.h"

#include "model/job.h"
#include "model/training/full_graph.h"
#include "model/training/graph_batch_source.h"
#include "model/training/sampled_source.h"
#include "model/training/step_loop.h"

namespace gnnrt::model {

TrainResult train(const proto::Job& job, const TrainOptions& options) {
  validate(job);
  const std::unique_ptr<BatchSource> source = is_sampled_job(job) ? make_sampled_source(job, options)
                                               : is_batch_job(job)  ? make_graph_batch_source(job, options)
                                                                    : make_full_graph_source(job, options);
  return run_step_loop(job, options, *source);
}

}  // namespace gnnrt::model
