#include "model/training/graph_batch_source.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <span>

#include "collectives/communicator.h"
#include "model/data/batch_dataset.h"
#include "model/job.h"
#include "model/modules/module_graph.h"
#include "model/training/distributed.h"
#include "model/training/graph_batches.h"
#include "model/training/setup.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

class GraphBatchSource final : public BatchSource {
 public:
  GraphBatchSource(const proto::Job& job, const TrainOptions& options)
      : job_(job), comm_(options.communicator), replicated_(comm_ && comm_->size() > 1),
        rank_(comm_ ? comm_->rank() : 0), ranks_(comm_ ? comm_->size() : 1) {}

  ModelParameters load(Core& core) override;
  std::vector<std::string> resume_sections() const override { return {"model", "optimizer", "dataset", "batching"}; }
  int64_t steps_per_epoch() const override { return batches_->batches_per_epoch(); }
  int64_t metric_slots() const override { return module_metric_slots(job_.model()); }
  const runtime::CompiledProgram& prepare(Core& core, int64_t epoch, int64_t index) override;
  nlohmann::json summarize(std::span<const double> sums, int64_t steps, const runtime::Counters& counters,
                           EpochMetrics& m) const override;
  std::string progress(const EpochMetrics& m, const runtime::Counters& counters) const override {
    return fmt::format("loss {:.5f}{} | {} steps, {:.1f} ms, {} compiles, padding {:.1f}% rows, {:.1f}% edges", m.loss,
                       m.train_acc > 0 ? fmt::format(" acc {:.4f}", m.train_acc) : std::string(), m.step, m.ms,
                       counters.compiles, padding_.rows_percent(), padding_.edges_percent());
  }
  std::set<std::string> persistent(const Core& core) const override;
  void finish(TrainResult& result, const Core& core) const override;

 private:
  // The bucket's train-step program, compiled on first use.
  const runtime::CompiledProgram& program(Core& core, int bucket);

  const proto::Job& job_;
  std::shared_ptr<collectives::Communicator> comm_;
  const bool replicated_;
  const int rank_, ranks_;
  BatchDataset data_;
  std::unique_ptr<GraphBatches> batches_;
  std::vector<ParamDecl> params_;
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs_;
  std::vector<int64_t> order_;  // the graphs of epoch order_epoch_ in order
  int64_t order_epoch_ = -1;
  PaddingStats padding_;
  std::set<int> used_;  // buckets
  double compile_ms_ = 0, cache_load_ms_ = 0;  // program(): built and compiled, or loaded
};

// The dataset, its batches and the model's parameters: the model is
// checked (and its parameters declared) on the smallest bucket before
// anything runs.
ModelParameters GraphBatchSource::load(Core&) {
  ModelParameters model;
  uint64_t identity = 0;
  agreed_step(comm_, "loading the dataset", [&] {
    data_ = load_batch_dataset(job_.dataset().path());
    batches_ = std::make_unique<GraphBatches>(data_, job_.batching(), job_.seed(), ranks_);
    Network first = build_module_train_step(job_.model(), batches_->schema(), batches_->buckets().front(), replicated_);
    model = {first.params, std::move(first.aliases), std::move(first.buffers)};
    params_ = std::move(first.params);
    build_module_inference(job_.model(), batches_->schema(), batches_->buckets().front(), replicated_);
    identity = batch_fingerprint(data_);
  });
  if (replicated_) check_same(*comm_, identity, "datasets (the same dataset.path read other bytes)");
  if (rank_ == 0) {
    const GraphBatches& b = *batches_;
    spdlog::info("batch dataset '{}': {} graphs, batches of {} ({} per epoch{}), {} buckets ({}), {} parameters",
                 data_.name, data_.num_graphs, b.batch_size(), b.batches_per_epoch(),
                 replicated_ ? fmt::format(", each split over {} ranks", ranks_) : std::string(), b.buckets().size(),
                 b.growth() > 0                         ? fmt::format("growth {:.3g}", b.growth())
                 : job_.batching().bucket_size() > 0 ? std::string("as the job lists them")
                                                     : std::string("derived from the batches' sizes"),
                 params_.size());
  }
  return model;
}

const runtime::CompiledProgram& GraphBatchSource::program(Core& core, int bucket) {
  auto& p = programs_[bucket];
  if (!p) {
    // Building the program and compiling it, or loading it from the cache:
    // what a first start and a cached start cost.
    const auto start = std::chrono::steady_clock::now();
    const int64_t compiles = core.counters().compiles;
    Network net = build_module_train_step(job_.model(), batches_->schema(), batches_->buckets()[bucket], replicated_);
    runtime::CompileOptions o;
    o.train = runtime::TrainStep{net.loss, net.param_ids, optimizer_config(job_.optimizer())};
    o.bucket_bytes = static_cast<int64_t>(job_.partition().bucket_mb() * (1 << 20));
    p = core.compile(std::move(net.program), o);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    (core.counters().compiles > compiles ? compile_ms_ : cache_load_ms_) += ms;
  }
  return *p;
}

// Rank `rank_`'s share of global batch `index` of the epoch, bound to its
// bucket. Each rank picks, compiles (on first use) and binds its own
// bucket: on many ranks a failure there is agreed on, so no rank waits in
// the step's all-reduce for one that has left.
const runtime::CompiledProgram& GraphBatchSource::prepare(Core& core, int64_t epoch, int64_t index) {
  if (epoch != order_epoch_) {
    order_ = batches_->order(job_.seed(), epoch, job_.batching().shuffle());
    order_epoch_ = epoch;
  }
  const auto batch = static_cast<size_t>(batches_->batch_size());
  const size_t at = static_cast<size_t>(index) * batch;
  const auto global = std::span<const int64_t>(order_).subspan(at, std::min(batch, order_.size() - at));
  const auto mine = GraphBatches::share(global, rank_, ranks_);
  const runtime::CompiledProgram* p = nullptr;
  agreed_step(comm_, "preparing the batch", [&] {
    const int bucket = batches_->bucket_for(mine);
    used_.insert(bucket);
    p = &program(core, bucket);
    batches_->bind(core, mine, global, bucket, &padding_);
  });
  return *p;
}

// The first cross-entropy term's accuracy over the epoch's real rows; the
// loss terms' means and accuracies, the steps, buckets, padding and
// compile times so far.
nlohmann::json GraphBatchSource::summarize(std::span<const double> v, int64_t steps, const runtime::Counters&,
                                           EpochMetrics& m) const {
  const proto::Model& model = job_.model();
  // The means of the epoch's batch losses.
  const auto mean = [&](double sum) { return steps > 0 ? sum / static_cast<double>(steps) : 0.0; };
  m.loss = mean(v[0]);
  nlohmann::json j{{"step", m.step},
                   {"buckets_used", used_.size()},
                   {"padding_rows_percent", padding_.rows_percent()},
                   {"padding_edges_percent", padding_.edges_percent()},
                   {"compile_ms", compile_ms_},
                   {"cache_load_ms", cache_load_ms_}};
  bool first = true;  // the first cross-entropy term with real rows gives train_acc
  for (int i = 0; i < model.loss_term_size(); ++i) {
    const auto& t = model.loss_term(i);
    j[fmt::format("loss_{}", t.input())] = mean(v[1 + i]);
    const auto slot = static_cast<size_t>(correct_slot(model, i));
    if (t.kind() != proto::LossTerm::CROSS_ENTROPY || v[slot + 1] <= 0) continue;
    const double acc = v[slot] / v[slot + 1];
    j[fmt::format("acc_{}", t.input())] = acc;
    if (first) m.train_acc = acc;
    first = false;
  }
  return j;
}

// Parameters and optimizer state: the persistent values of the programs
// (every bucket's program has the same ones, by name).
std::set<std::string> GraphBatchSource::persistent(const Core&) const { return persistent_names(programs_, params_); }

void GraphBatchSource::finish(TrainResult& result, const Core&) const {
  result.buckets_used = static_cast<int64_t>(used_.size());
  result.buckets = static_cast<int64_t>(batches_->buckets().size());
  result.padding_rows_percent = padding_.rows_percent();
  result.padding_edges_percent = padding_.edges_percent();
  result.compile_ms = compile_ms_;
  result.cache_load_ms = cache_load_ms_;
  spdlog::info("{} steps; {} compiles ({:.1f} ms), {} cache hits ({:.1f} ms); {} of {} buckets used; padding {:.1f}% of "
               "rows, {:.1f}% of edges", result.steps, result.counters.compiles, compile_ms_, result.counters.cache_hits,
               cache_load_ms_, used_.size(), batches_->buckets().size(), padding_.rows_percent(),
               padding_.edges_percent());
}

}  // namespace

bool is_batch_job(const proto::Job& job) {
  return job.model().module_size() > 0 || is_batch_dataset(job.dataset().path());
}

std::unique_ptr<BatchSource> make_graph_batch_source(const proto::Job& job, const TrainOptions& options) {
  return std::make_unique<GraphBatchSource>(job, options);
}

}  // namespace gnnrt::model
