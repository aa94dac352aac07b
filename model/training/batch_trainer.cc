#include "model/training/batch_trainer.h"
#include "model/training/schedule.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <thread>
#include <utility>

#include "collectives/communicator.h"
#include "model/data/batch_dataset.h"
#include "model/job.h"
#include "model/modules/module_graph.h"
#include "model/training/batch_source.h"
#include "model/training/checkpoint.h"
#include "model/training/checkpointer.h"
#include "model/training/distributed.h"
#include "runtime/npy.h"
#include "runtime/program_cache.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}



class BatchTrainer {
 public:
  BatchTrainer(const proto::Job& job, const TrainOptions& options)
      : job_(job), options_(options), comm_(options.communicator),
        replicated_(comm_ && comm_->size() > 1), rank_(comm_ ? comm_->rank() : 0),
        ranks_(comm_ ? comm_->size() : 1), core_(device_profile(job, options), core_options(job, options)),
        checkpointer_(job, comm_, /*by_step=*/true, options.on_notice) {}

  TrainResult run();

 private:
  // Runs fn; on many ranks, agrees on its outcome (model/training/distributed.h):
  // a failure on one rank is an error on every rank, none left waiting.
  template <typename Fn>
  void step(std::string_view what, Fn&& fn) {
    agreed_step(comm_, what, std::forward<Fn>(fn));
  }
  bool writer() const { return rank_ == 0; }

  // The bucket's train-step program, compiled on first use.
  const runtime::CompiledProgram& program(int bucket);
  void init_parameters();
  bool resume();
  void save(int64_t epoch, int64_t at_step, bool with_metrics = false) const;
  void check_parameters(int64_t epoch);
  // A checkpoint after `step`, inside 0-based epoch `epoch`: `epoch` epochs
  // complete, and the metrics so far (summed over the ranks).
  void save_mid_epoch(int64_t epoch, int64_t at_step);
  uint64_t load();
  int64_t run_batches(int64_t e, int64_t done, double epoch_lr, PaddingStats& padding, std::set<int>& used);
  nlohmann::json metrics_extra(const std::vector<double>& v, int64_t batches, size_t buckets_used,
                               const PaddingStats& padding) const;

  const proto::Job& job_;
  const TrainOptions& options_;
  std::shared_ptr<collectives::Communicator> comm_;
  const bool replicated_;
  const int rank_, ranks_;
  Core core_;
  Checkpointer checkpointer_;
  BatchDataset data_;
  std::unique_ptr<BatchSource> source_;
  std::vector<ParamDecl> params_;
  std::vector<ParamAlias> aliases_;
  std::vector<Buffer> buffers_;
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs_;
  int64_t start_epoch_ = 0, step_ = 0;
  double compile_ms_ = 0, cache_load_ms_ = 0;  // program(): built and compiled, or loaded
  std::chrono::steady_clock::time_point last_step_report_;  // on_step's last call (run() starts the clock)
  bool resumed_metrics_ = false;  // the checkpoint held a partial epoch's metrics
};

const runtime::CompiledProgram& BatchTrainer::program(int bucket) {
  auto& p = programs_[bucket];
  if (!p) {
    // Building the program and compiling it, or loading it from the cache:
    // what a first start and a cached start cost.
    const auto start = std::chrono::steady_clock::now();
    const int64_t compiles = core_.counters().compiles;
    Network net = build_module_train_step(job_.model(), source_->schema(), source_->buckets()[bucket], replicated_);
    runtime::CompileOptions o;
    o.train = runtime::TrainStep{net.loss, net.param_ids, optimizer_config(job_.optimizer())};
    o.bucket_bytes = static_cast<int64_t>(job_.partition().bucket_mb() * (1 << 20));
    p = core_.compile(std::move(net.program), o);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    (core_.counters().compiles > compiles ? compile_ms_ : cache_load_ms_) += ms;
  }
  return *p;
}

// Drawn, or --params-in's; either way rank 0's go to every rank, as
// PyTorch DDP broadcasts rank 0's module state at construction.
void BatchTrainer::init_parameters() {
  step("reading --params-in", [&] {
    if (options_.params_in.empty()) {
      initialize_parameters(core_, params_, job_.seed());
      return;
    }
    load_state_dict(core_, params_, aliases_, buffers_, options_.params_in, !options_.params_non_strict,
                    options_.params_scope);
    // Non-strict or scoped: the keys not loaded start fresh.
    initialize_missing_parameters(core_, params_, job_.seed());
  });
  if (options_.corrupt_after_epoch == 0) flip_first_parameter_bit(core_, params_, rank_);
  if (!replicated_) return;
  for (const ParamDecl& p : params_) comm_->broadcast<float>(core_.memory().at(p.name).values<float>(), 0);
}

bool BatchTrainer::resume() {
  const auto loaded = checkpointer_.resume(core_, {"model", "optimizer", "dataset", "batching"});
  if (!loaded) return false;
  step("resuming from the checkpoint", [&] {
    for (const ParamDecl& p : params_) {
      if (!core_.memory().has(p.name) || core_.memory().at(p.name).shape() != p.shape) {
        throw CheckpointError(fmt::format("checkpoint {}: no parameter '{}' {}", loaded->path.string(), p.name,
                                          runtime::shape_string(p.shape)));
      }
    }
  });
  start_epoch_ = loaded->state.epoch();
  step_ = loaded->state.step();
  // A mid-epoch checkpoint's metrics are the ranks' sum: rank 0 carries
  // them on, the others start from zero.
  if (core_.memory().has(kMetrics)) {
    resumed_metrics_ = true;
    if (!writer()) core_.memory().at(kMetrics) = Tensor(DType::kF64, core_.memory().at(kMetrics).shape());
  }
  if (writer()) spdlog::info("resumed from {} at epoch {}, step {}", loaded->path.string(), start_epoch_, step_);
  return true;
}

void BatchTrainer::save_mid_epoch(int64_t epoch, int64_t at_step) {
  Tensor& metrics = core_.memory().at(kMetrics);
  Tensor mine = metrics;
  if (replicated_) comm_->allreduce<double>(metrics.values<double>());
  save(epoch, at_step, /*with_metrics=*/true);
  metrics = std::move(mine);
}

// Parameters and optimizer state: the persistent values of the programs
// (every bucket's program has the same ones, by name); the metrics too
// mid-epoch.
void BatchTrainer::save(int64_t epoch, int64_t at_step, bool with_metrics) const {
  std::set<std::string> names;
  for (const auto& [bucket, p] : programs_) {
    for (const auto& v : p->program.values) {
      if (v.role == runtime::Role::kParameter || v.role == runtime::Role::kState) names.insert(v.name);
    }
  }
  for (const ParamDecl& p : params_) names.insert(p.name);
  names.erase(kMetrics);
  if (with_metrics) names.insert(kMetrics);
  checkpointer_.write(core_, names, epoch, at_step);
}

// The ranks' parameters must stay the same bits: compared after the first
// epoch of a run, the last, and every epoch that passes a multiple of
// partition.checksum_every steps.
void BatchTrainer::check_parameters(int64_t epoch) {
  const int every = job_.partition().checksum_every();
  if (!replicated_ || every == 0) return;
  const int64_t per_epoch = source_->batches_per_epoch();
  const bool due = epoch == start_epoch_ + 1 || epoch == job_.schedule().epochs() ||
                   step_ / every != (step_ - per_epoch) / every;
  if (!due) return;
  try {
    check_same(*comm_, parameter_checksum(core_, params_), "parameters");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("after step {}, the ranks' parameters diverged: {}", step_, e.what()));
  }
}

TrainResult BatchTrainer::run() {
  // Ranks started with different jobs stop here, the fields named.
  if (replicated_) check_same_job(*comm_, job_);
  TrainResult result;
  result.ranks = ranks_;
  uint64_t identity = 0;
  step("loading the dataset", [&] { identity = load(); });
  if (replicated_) check_same(*comm_, identity, "datasets (the same dataset.path read other bytes)");
  if (!resume()) init_parameters();
  for (const auto* path : {&options_.metrics_path, &options_.trace_path}) {
    if (!path->empty() && path->has_parent_path()) std::filesystem::create_directories(path->parent_path());
  }
  MetricsSink metrics_out;
  step("opening --metrics", [&] {
    if (!options_.metrics_path.empty() && writer()) metrics_out = MetricsSink(options_.metrics_path, start_epoch_);
  });
  const BatchSource& source = *source_;
  if (writer()) {
    spdlog::info("batch dataset '{}': {} graphs, batches of {} ({} per epoch{}), {} buckets ({}), {} parameters",
                 data_.name, data_.num_graphs, source.batch_size(), source.batches_per_epoch(),
                 replicated_ ? fmt::format(", each split over {} ranks", ranks_) : std::string(),
                 source.buckets().size(),
                 source.growth() > 0 ? fmt::format("growth {:.3g}", source.growth())
                 : job_.batching().bucket_size() > 0 ? std::string("as the job lists them")
                                                     : std::string("derived from the batches' sizes"),
                 params_.size());
  }
  const int64_t epochs = job_.schedule().epochs();
  const int64_t slots = module_metric_slots(job_.model());
  last_step_report_ = std::chrono::steady_clock::now();
  PaddingStats padding;
  std::set<int> used;
  const int64_t per_epoch = source.batches_per_epoch();
  const bool per_step = job_.schedule().per_step();
  const int every_steps = job_.checkpoint().dir().empty() ? 0 : job_.checkpoint().every_steps();
  for (int64_t e = start_epoch_; e < epochs; ++e) {
    EpochMetrics m;
    m.epoch = e + 1;
    m.lr = per_step ? learning_rate(job_, e * per_epoch, epochs * per_epoch) : learning_rate(job_, e);
    const runtime::Counters before = core_.counters();
    const auto start = std::chrono::steady_clock::now();
    // A resume mid-epoch continues at the next batch, with the epoch's
    // metrics so far (saved with the checkpoint).
    const int64_t done = std::max<int64_t>(0, step_ - e * per_epoch);
    if (done == 0 || !resumed_metrics_) core_.memory().put(kMetrics, Tensor(DType::kF64, {slots}));
    resumed_metrics_ = false;
    const int64_t batches = run_batches(e, done, m.lr, padding, used);
    if (options_.corrupt_after_epoch == m.epoch) flip_first_parameter_bit(core_, params_, rank_);
    // One read of the metrics per epoch; on many ranks their sum (each
    // rank's losses are its share of the global means).
    std::vector<double> v = core_.read(kMetrics).to_vector<double>();
    v.push_back(options_.stop_requested && options_.stop_requested() ? 1.0 : 0.0);
    if (replicated_) comm_->allreduce<double>(v);
    m.stop = v.back() > 0;
    // The first cross-entropy term's accuracy over the epoch's real rows.
    for (int i = 0; i < job_.model().loss_term_size(); ++i) {
      const auto slot = static_cast<size_t>(correct_slot(job_.model(), i));
      if (job_.model().loss_term(i).kind() == proto::LossTerm::CROSS_ENTROPY && v[slot + 1] > 0) {
        m.train_acc = v[slot] / v[slot + 1];
        break;
      }
    }
    m.loss = batches > 0 ? v[0] / static_cast<double>(batches) : 0;
    m.ms = m.train_ms = ms_since(start);
    const runtime::Counters& after = core_.counters();
    m.simulated_ms = (after.simulated_seconds - before.simulated_seconds) * 1e3;
    m.compute_ms = (after.compute_seconds - before.compute_seconds) * 1e3;
    m.grad_ms = (after.gradient_seconds - before.gradient_seconds) * 1e3;
    m.wait_ms = std::max(0.0, m.ms - m.compute_ms - m.grad_ms);
    if (!std::isfinite(m.loss)) {
      throw std::runtime_error(fmt::format("the loss became {} at epoch {}; rerun with --debug to find the op that made it",
                                           m.loss, m.epoch));
    }
    check_parameters(m.epoch);
    result.epochs.push_back(m);
    result.last_loss = m.loss;
    if (options_.progress && writer()) {
      spdlog::info("epoch {:>4}/{} loss {:.5f}{} | {} steps, {:.1f} ms, {} compiles, padding {:.1f}% rows, {:.1f}% edges",
                   m.epoch, epochs, m.loss, m.train_acc > 0 ? fmt::format(" acc {:.4f}", m.train_acc) : std::string(),
                   step_, m.ms, after.compiles, padding.rows_percent(), padding.edges_percent());
    }
    step("writing --metrics", [&] {
      if (metrics_out.open()) metrics_out.write(m, core_.counters(), ranks_, metrics_extra(v, batches, used.size(), padding));
    });
    if (options_.on_epoch) options_.on_epoch(m);
    const int every = job_.checkpoint().every();
    const bool checkpoint = !job_.checkpoint().dir().empty() &&
                            ((every > 0 && m.epoch % every == 0) || (every_steps > 0 && step_ % every_steps == 0));
    if (checkpoint) save(m.epoch, step_);
    if (m.stop && m.epoch < epochs) {
      if (checkpointer_.enabled() && !checkpoint) save(m.epoch, step_);
      if (writer()) spdlog::info("stopped after epoch {} on request", m.epoch);
      result.stopped = true;
      break;
    }
  }
  // Only when this run trained: a resumed run with nothing left to do has
  // compiled no program and would write a checkpoint without its optimizer
  // state over the complete one.
  if (!result.stopped && checkpointer_.enabled() && !programs_.empty()) save(std::max(epochs, start_epoch_), step_);
  step("writing the outputs", [&] {
    if (options_.params_out.empty() || !writer()) return;
    write_state_dict(core_, params_, aliases_, buffers_, options_.params_out);
  });
  if (!options_.trace_path.empty()) core_.write_trace(rank_path(options_.trace_path, rank_));
  result.start_epoch = start_epoch_;
  result.counters = core_.counters();
  result.steps = step_;
  result.buckets_used = static_cast<int64_t>(used.size());
  result.buckets = static_cast<int64_t>(source.buckets().size());
  result.padding_rows_percent = padding.rows_percent();
  result.padding_edges_percent = padding.edges_percent();
  result.compile_ms = compile_ms_;
  result.cache_load_ms = cache_load_ms_;
  spdlog::info("{} steps; {} compiles ({:.1f} ms), {} cache hits ({:.1f} ms); {} of {} buckets used; padding {:.1f}% of "
               "rows, {:.1f}% of edges", step_, result.counters.compiles, compile_ms_, result.counters.cache_hits,
               cache_load_ms_, used.size(), source.buckets().size(), padding.rows_percent(), padding.edges_percent());
  return result;
}

// The dataset, its batch source and the model's parameters: the model is
// checked (and its parameters declared) on the smallest bucket before
// anything runs. Returns the dataset's fingerprint.
uint64_t BatchTrainer::load() {
  data_ = load_batch_dataset(job_.dataset().path());
  source_ = std::make_unique<BatchSource>(data_, job_.batching(), job_.seed(), ranks_);
  Network first = build_module_train_step(job_.model(), source_->schema(), source_->buckets().front(), replicated_);
  params_ = std::move(first.params);
  aliases_ = std::move(first.aliases);
  buffers_ = std::move(first.buffers);
  build_module_inference(job_.model(), source_->schema(), source_->buckets().front(), replicated_);
  return batch_fingerprint(data_);
}

// Epoch e's batches from the `done`-th on: each rank binds its share of a
// global batch to its bucket and takes one optimizer step. Returns the
// batches the epoch has taken.
int64_t BatchTrainer::run_batches(int64_t e, int64_t done, double epoch_lr, PaddingStats& padding,
                                  std::set<int>& used) {
  const BatchSource& source = *source_;
  const int64_t epochs = job_.schedule().epochs();
  const auto batch = static_cast<size_t>(source.batch_size());
  const int64_t per_epoch = source.batches_per_epoch();
  const bool per_step = job_.schedule().per_step();
  const int every_steps = job_.checkpoint().dir().empty() ? 0 : job_.checkpoint().every_steps();
  // Tests of the launcher's progress check stretch each step (seconds).
  const char* slow = std::getenv("GNNRT_TEST_SLOW_STEP");
  const double slow_step = slow != nullptr && *slow != '\0' ? std::atof(slow) : 0;
  const std::vector<int64_t> order = source.order(job_.seed(), e, job_.batching().shuffle());
  int64_t batches = done;
  for (size_t at = static_cast<size_t>(done) * batch; at < order.size(); at += batch) {
    const auto global = std::span<const int64_t>(order).subspan(at, std::min(batch, order.size() - at));
    const auto mine = BatchSource::share(global, rank_, ranks_);
    // Each rank picks, compiles (on first use) and binds its own bucket:
    // on many ranks a failure there is agreed on, so no rank waits in the
    // step's all-reduce for one that has left.
    const runtime::CompiledProgram* p = nullptr;
    const auto prepare = [&] {
      const int bucket = source.bucket_for(mine);
      used.insert(bucket);
      p = &program(bucket);
      source.bind(core_, mine, global, bucket, &padding);
    };
    if (replicated_) {
      step("preparing the batch", prepare);
    } else {
      prepare();
    }
    const double lr = per_step ? learning_rate(job_, step_, epochs * per_epoch) : epoch_lr;
    core_.run(*p, {.step = ++step_, .lr = lr, .seed = job_.seed()});
    ++batches;
    if (slow_step > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow_step));
    if (options_.on_step && ms_since(last_step_report_) >= 500) {
      options_.on_step(e, step_);  // e epochs done
      last_step_report_ = std::chrono::steady_clock::now();
    }
    if (every_steps > 0 && step_ % every_steps == 0 && batches < per_epoch) save_mid_epoch(e, step_);
  }
  return batches;
}

// The batch trainer's fields of epoch m's --metrics record: the loss terms'
// means and accuracies from the summed metrics v, the steps, buckets,
// padding and compile times so far.
nlohmann::json BatchTrainer::metrics_extra(const std::vector<double>& v, int64_t batches, size_t buckets_used,
                                           const PaddingStats& padding) const {
  nlohmann::json j{{"step", step_},
                   {"buckets_used", buckets_used},
                   {"padding_rows_percent", padding.rows_percent()},
                   {"padding_edges_percent", padding.edges_percent()},
                   {"compile_ms", compile_ms_},
                   {"cache_load_ms", cache_load_ms_}};
  for (int i = 0; i < job_.model().loss_term_size(); ++i) {
    const auto& t = job_.model().loss_term(i);
    j[fmt::format("loss_{}", t.input())] = batches > 0 ? v[1 + i] / static_cast<double>(batches) : 0;
    const auto slot = static_cast<size_t>(correct_slot(job_.model(), i));
    if (t.kind() == proto::LossTerm::CROSS_ENTROPY && v[slot + 1] > 0) {
      j[fmt::format("acc_{}", t.input())] = v[slot] / v[slot + 1];
    }
  }
  return j;
}

}  // namespace

bool is_batch_job(const proto::Job& job) {
  return job.model().module_size() > 0 || is_batch_dataset(job.dataset().path());
}

TrainResult train_batches(const proto::Job& job, const TrainOptions& options) {
  return BatchTrainer(job, options).run();
}

}  // namespace gnnrt::model
