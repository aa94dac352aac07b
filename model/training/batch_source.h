// BatchSource: what the one training loop (model/training/step_loop.h)
// takes its steps from. Three implement it:
//   - the whole graph on one core: one step per epoch, then an evaluation
//     (model/training/full_graph.h);
//   - this rank's vertex-cut shard of the graph: the same, with the halo
//     exchanges inside the programs (model/training/full_graph.h);
//   - batches of small graphs padded into shape buckets, one program per
//     bucket (model/training/graph_batch_source.h).
// The loop owns the epochs and steps, the learning rate, the parameters'
// start (drawn or --params-in, broadcast), resuming and checkpoints, the
// metrics records, stop requests and the outputs; a source owns its data,
// its programs and what its metrics slots mean.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "model/modules/network.h"
#include "model/training/options.h"
#include "runtime/core.h"

namespace gnnrt::model {

// The model's state_dict: its parameters, their aliases and its buffers.
struct ModelParameters {
  std::vector<ParamDecl> params;
  std::vector<ParamAlias> aliases;
  std::vector<Buffer> buffers;
};

// What BatchSource::persistent returns for a source whose programs are
// compiled per shape (any map of them, by bucket): their parameters and
// optimizer state, by name, and the declared parameters; empty while none
// is compiled.
template <typename Programs>
std::set<std::string> persistent_names(const Programs& programs, const std::vector<ParamDecl>& params) {
  std::set<std::string> names;
  if (programs.empty()) return names;
  for (const auto& [bucket, p] : programs) {
    for (const auto& v : p->program.values) {
      if (v.role == runtime::Role::kParameter || v.role == runtime::Role::kState) names.insert(v.name);
    }
  }
  for (const ParamDecl& p : params) names.insert(p.name);
  return names;
}

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // Reads this rank's data onto the core and builds the programs (or, for
  // programs built per shape, checks the model on one); on many ranks each
  // failure is agreed on. Returns the model's parameters.
  virtual ModelParameters load(runtime::Core& core) = 0;
  // The top-level job sections ("model", "batching", ...) a checkpoint
  // must have written alike to be resumed.
  virtual std::vector<std::string> resume_sections() const = 0;
  virtual int64_t steps_per_epoch() const = 0;
  // The length of the core's "metrics" tensor, which the programs
  // accumulate into and the loop reads once per epoch.
  virtual int64_t metric_slots() const = 0;

  // Puts step `index` (0-based within 0-based `epoch`) on the core and
  // returns the program that takes it (compiled on first use).
  virtual const runtime::CompiledProgram& prepare(runtime::Core& core, int64_t epoch, int64_t index) = 0;
  // After an epoch's steps, keyed like its last step: the evaluation runs
  // (the full graph's inference program), none by default.
  virtual void evaluate(runtime::Core& /*core*/, const runtime::RunContext& /*context*/) {}

  // Whether the loop keeps the parameters of the best validation accuracy
  // (else the last), and whether there are validation rows to judge by
  // (without, every epoch is the best).
  virtual bool keeps_best() const { return false; }
  virtual bool has_validation() const { return false; }
  // Epoch m's loss and accuracies from `sums` (the metrics slots summed
  // over the ranks) after `steps` steps of the epoch; returns the source's
  // own fields of the epoch's --metrics record.
  virtual nlohmann::json summarize(std::span<const double> sums, int64_t steps, const runtime::Counters& counters,
                                   EpochMetrics& m) const = 0;
  // The epoch's progress line after "epoch E/N ".
  virtual std::string progress(const EpochMetrics& m, const runtime::Counters& counters) const = 0;

  // The core's tensors a checkpoint holds (parameters and optimizer state,
  // not the metrics); empty while no program is compiled.
  virtual std::set<std::string> persistent(const runtime::Core& core) const = 0;
  // --logits-out: whether the source writes them, and writing them (rank 0
  // writes; on many ranks every rank takes part).
  virtual bool writes_logits() const { return false; }
  virtual void write_logits(runtime::Core& /*core*/, const std::filesystem::path& /*path*/,
                            const runtime::RunContext& /*context*/) {}
  // The source's own fields of the run's result, and its closing lines.
  virtual void finish(TrainResult& /*result*/, const runtime::Core& /*core*/) const {}
};

}  // namespace gnnrt::model
