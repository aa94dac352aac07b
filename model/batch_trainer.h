// Mini-batch training of a module-graph model on a batch dataset, on one
// simulated core: the step loop. Each epoch visits the graphs in an order
// drawn from (seed, epoch), batch_size graphs at a time (the last batch
// partial); the BatchSource pads each batch to its shape bucket and binds
// it; the bucket's train-step program (compiled on first use, through the
// program cache; parameters and optimizer state shared by name) takes one
// optimizer step at the global step count, which keys Adam's bias
// correction and dropout. The loss is read once per epoch (the mean of the
// batches' losses). Checkpoints hold epoch and step; a resumed run equals
// the uninterrupted one bitwise.
#pragma once

#include "model/job.pb.h"
#include "model/trainer.h"

namespace gnnrt::model {

// Whether a job trains on a batch dataset (a module-graph model).
bool is_batch_job(const proto::Job& job);

TrainResult train_batches(const proto::Job& job, const TrainOptions& options);

// --params-in, as torch's load_state_dict: strict, every key loaded or one
// error listing the missing keys, the unexpected keys and the mismatched
// shapes; non-strict loads the intersection and lists the rest (warning).
// An alias key is expected too, with its parameter's shape; the
// parameter's own key gives the values, and an alias holding other values
// is mismatched (torch saves one tensor under both names). A non-empty `scope` loads the keys
// under "<scope>." only (torch's model.<scope>.load_state_dict): the others
// are neither expected nor loaded, and a file outside the scope is
// unexpected.
void load_state_dict(runtime::Core& core, const std::vector<ParamDecl>& params,
                     const std::vector<ParamAlias>& aliases, const std::filesystem::path& dir, bool strict,
                     const std::string& scope = "");

// Refuses a parameter file's non-finite values (NaN, Inf; float64 beyond
// float32's range): std::invalid_argument "--params-in FILE: KEY[i, j] is
// nan", the first such value's position.
void check_finite_parameter(const Tensor& values, const std::string& key, const std::filesystem::path& file);

// --params-out: <key>.npy for every parameter and alias.
void write_state_dict(const runtime::Core& core, const std::vector<ParamDecl>& params,
                      const std::vector<ParamAlias>& aliases, const std::filesystem::path& dir);

}  // namespace gnnrt::model
