// A job's module graph (model.module, model.loss_term) written as runtime
// Programs for one shape bucket: inputs resolved by name, modules built in
// dependency order through the registry (model/modules/modules.h), the weighted
// losses summed over the real rows of their targets.
//
// Two programs per bucket, over the same parameters (by name) and the
// batch tensors the GraphBatches binds (modules.h's names):
//   train_step  forward in training mode -> loss; metrics[0] += loss,
//               metrics[1 + i] += loss term i
//   infer       forward in eval mode; every loss term's input is an output
//               (named after it); the same metrics (eval losses)
// Bad models throw std::invalid_argument naming the module before anything
// runs: an input nothing provides, a cycle, widths or node sets that do not
// match, an unknown edge set.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/job.pb.h"
#include "model/modules/modules.h"
#include "model/modules/network.h"

namespace gnnrt::model {

// metrics[] of a module-graph program: [0] the total loss, [1 + i] term
// i's loss, then per term (correct, total) rows, counted for
// cross-entropy terms (argmax equal to the label) and 0 for the others.
inline int64_t module_metric_slots(const proto::Model& model) { return 1 + 3 * model.loss_term_size(); }
inline int64_t correct_slot(const proto::Model& model, int term) { return 1 + model.loss_term_size() + 2 * term; }

// replicated: one rank's share of a data-parallel batch (runtime/builder.h).
Network build_module_train_step(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                                bool replicated = false);
// `outputs`: module names made outputs of the inference program (named
// after the module); empty: every loss term's input.
Network build_module_inference(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                               bool replicated = false, const std::vector<std::string>& outputs = {});

// A segment of a layer chain (one convolution and the modules around it)
// as the two programs of an AggregationSplit (modules.h): split.part says
// which; `outputs` as above, for the transform part. Fills in `split`;
// throws when the model has no convolution or one that does not split.
Network build_split_inference(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                              AggregationSplit& split, const std::vector<std::string>& outputs);

// What each module and data tensor is (rows, set, width), by name, as the
// model builds on `shape` in eval mode.
std::map<std::string, Port> module_ports(const proto::Model& model, const Schema& schema, const BucketShape& shape);

// The modules in the order they are built (each after its inputs); throws
// on a missing input or a cycle.
std::vector<int> module_order(const proto::Model& model, const Schema& schema);

}  // namespace gnnrt::model
