#include "model/training/step_loop.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "collectives/communicator.h"
#include "model/training/checkpoint.h"
#include "model/training/checkpointer.h"
#include "model/training/distributed.h"
#include "model/training/schedule.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

constexpr const char* kBestPrefix = "best/";

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class StepLoop {
 public:
  StepLoop(const proto::Job& job, const TrainOptions& options, BatchSource& source)
      : job_(job), options_(options), source_(source), comm_(options.communicator),
        many_(comm_ && comm_->size() > 1), rank_(comm_ ? comm_->rank() : 0), ranks_(comm_ ? comm_->size() : 1),
        core_(device_profile(job, options), core_options(job, options)),
        checkpointer_(job, comm_, options.on_notice) {}

  TrainResult run();

 private:
  template <typename Fn>
  void step(std::string_view what, Fn&& fn) {
    agreed_step(comm_, what, std::forward<Fn>(fn));
  }
  bool writer() const { return rank_ == 0; }

  void init_parameters();
  void read_parameters();
  bool resume();
  EpochMetrics epoch(int64_t e, nlohmann::json& extra);
  int64_t run_steps(int64_t e, int64_t done, double epoch_lr);
  void keep_best();
  void restore_best();
  void check_parameters(int64_t epoch);
  void save(int64_t epoch, int64_t at_step, bool with_metrics = false) const;
  void save_mid_epoch(int64_t epoch, int64_t at_step);
  void write_outputs();

  const proto::Job& job_;
  const TrainOptions& options_;
  BatchSource& source_;
  std::shared_ptr<collectives::Communicator> comm_;
  const bool many_;
  const int rank_, ranks_;
  Core core_;
  Checkpointer checkpointer_;
  ModelParameters model_;
  int64_t per_epoch_ = 1, epochs_ = 0;
  int64_t start_epoch_ = 0, step_ = 0;
  bool resumed_metrics_ = false;  // the checkpoint held a partial epoch's metrics
  double best_val_ = -1, best_test_ = 0;
  int64_t best_epoch_ = -1;
  std::chrono::steady_clock::time_point last_step_report_;  // on_step's last call
  double slow_step_ = 0;  // seconds added to each step (GNNRT_TEST_SLOW_STEP)
};

// Drawn, or --params-in's (read by rank 0); either way rank 0's go to
// every rank, so the ranks start from the same bits.
void StepLoop::init_parameters() {
  if (options_.params_in.empty()) {
    initialize_parameters(core_, model_.params, job_.seed());
  } else {
    read_parameters();
  }
  if (options_.corrupt_after_epoch == 0) flip_first_parameter_bit(core_, model_.params, rank_);
  if (!many_) return;
  for (const ParamDecl& p : model_.params) comm_->broadcast<float>(core_.memory().at(p.name).values<float>(), 0);
}

// --params-in, read by rank 0 (an agreed step); the other ranks hold
// zeros until the broadcast.
void StepLoop::read_parameters() {
  step("reading --params-in", [&] {
    if (!writer()) return;
    load_state_dict(core_, model_.params, model_.aliases, model_.buffers, options_.params_in,
                    !options_.params_non_strict, options_.params_scope);
    // Non-strict or scoped: the keys not loaded start fresh.
    initialize_missing_parameters(core_, model_.params, job_.seed());
  });
  if (writer()) return;
  for (const ParamDecl& p : model_.params) core_.memory().put(p.name, Tensor(DType::kF32, p.shape));
}

bool StepLoop::resume() {
  const auto loaded = checkpointer_.resume(core_, source_.resume_sections());
  if (!loaded) return false;
  const std::string path = loaded->path.string();
  step("resuming from the checkpoint", [&] {
    // Every parameter must come back with the shape this job builds.
    auto& mem = core_.memory();
    for (const ParamDecl& p : model_.params) {
      if (!mem.has(p.name)) {
        throw CheckpointError(fmt::format("checkpoint {}: has no parameter '{}' {}; was it written by "
                                          "a different model?",
                                          path, p.name, runtime::shape_string(p.shape)));
      }
      if (mem.at(p.name).shape() != p.shape) {
        throw CheckpointError(fmt::format("checkpoint {}: parameter '{}' has shape {}, the model needs {}", path,
                                          p.name, runtime::shape_string(mem.at(p.name).shape()),
                                          runtime::shape_string(p.shape)));
      }
    }
  });
  const proto::CheckpointState& state = loaded->state;
  start_epoch_ = state.epoch();
  step_ = state.step();
  if (source_.keeps_best()) {
    best_val_ = state.best_val_acc();
    best_epoch_ = state.best_epoch();
    best_test_ = state.best_test_acc();
  }
  // A mid-epoch checkpoint's metrics are the ranks' sum: rank 0 carries
  // them on, the others start from zero.
  if (core_.memory().has(kMetrics)) {
    resumed_metrics_ = true;
    if (!writer()) core_.memory().at(kMetrics) = Tensor(DType::kF64, core_.memory().at(kMetrics).shape());
  }
  if (writer()) spdlog::info("resumed from {} at epoch {}, step {}", path, start_epoch_, step_);
  return true;
}

// Epoch e's steps from the `done`-th on (a resume mid-epoch). Returns the
// steps the epoch has taken.
int64_t StepLoop::run_steps(int64_t e, int64_t done, double epoch_lr) {
  const bool per_step = job_.schedule().per_step();
  const int every_steps = checkpointer_.enabled() ? job_.checkpoint().every_steps() : 0;
  int64_t steps = done;
  for (int64_t i = done; i < per_epoch_; ++i) {
    const runtime::CompiledProgram& program = source_.prepare(core_, e, i);
    const double lr = per_step ? learning_rate(job_, step_, epochs_ * per_epoch_) : epoch_lr;
    core_.run(program, {.step = ++step_, .lr = lr, .seed = job_.seed()});
    ++steps;
    if (slow_step_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow_step_));
    // Reports within an epoch, where an epoch has several steps.
    if (per_epoch_ > 1 && options_.on_step && ms_since(last_step_report_) >= 500) {
      options_.on_step(e, step_);  // e epochs done
      last_step_report_ = std::chrono::steady_clock::now();
    }
    if (every_steps > 0 && step_ % every_steps == 0 && steps < per_epoch_) save_mid_epoch(e, step_);
  }
  return steps;
}

EpochMetrics StepLoop::epoch(int64_t e, nlohmann::json& extra) {
  EpochMetrics m;
  m.epoch = e + 1;
  m.lr = job_.schedule().per_step() ? learning_rate(job_, e * per_epoch_, epochs_ * per_epoch_)
                                    : learning_rate(job_, e);
  const runtime::Counters before = core_.counters();
  const auto start = std::chrono::steady_clock::now();
  // A resume mid-epoch continues at the next step, with the epoch's
  // metrics so far (saved with the checkpoint).
  const int64_t done = std::max<int64_t>(0, step_ - e * per_epoch_);
  if (done == 0 || !resumed_metrics_) core_.memory().put(kMetrics, Tensor(DType::kF64, {source_.metric_slots()}));
  resumed_metrics_ = false;
  const int64_t steps = run_steps(e, done, m.lr);
  m.step = step_;
  m.train_ms = ms_since(start);
  if (options_.corrupt_after_epoch == m.epoch) flip_first_parameter_bit(core_, model_.params, rank_);
  const auto evaluated = std::chrono::steady_clock::now();
  source_.evaluate(core_, {.step = step_, .lr = m.lr, .seed = job_.seed()});
  m.infer_ms = ms_since(evaluated);
  // The one host synchronisation of the epoch: the metrics, and on many
  // ranks one all-reduce of them with the stop requests and halo bytes.
  const runtime::Counters& after = core_.counters();
  std::vector<double> v = core_.read(kMetrics).to_vector<double>();
  v.push_back(options_.stop_requested && options_.stop_requested() ? 1.0 : 0.0);
  v.push_back(after.halo_bytes - before.halo_bytes);
  if (many_) comm_->allreduce<double>(v);
  m.ms = ms_since(start);
  m.halo_bytes = v.back();
  v.pop_back();
  m.stop = v.back() > 0;
  v.pop_back();
  m.simulated_ms = (after.simulated_seconds - before.simulated_seconds) * 1e3;
  m.compute_ms = (after.compute_seconds - before.compute_seconds) * 1e3;
  m.halo_ms = (after.halo_seconds - before.halo_seconds) * 1e3;
  m.grad_ms = (after.gradient_seconds - before.gradient_seconds) * 1e3;
  m.wait_ms = std::max(0.0, m.ms - m.compute_ms - m.halo_ms - m.grad_ms);
  extra = source_.summarize(v, steps, after, m);
  return m;
}

void StepLoop::keep_best() {
  auto& mem = core_.memory();
  for (const ParamDecl& p : model_.params) mem.put(kBestPrefix + p.name, mem.at(p.name));
}

void StepLoop::restore_best() {
  auto& mem = core_.memory();
  for (const ParamDecl& p : model_.params) {
    if (mem.has(kBestPrefix + p.name)) mem.put(p.name, mem.at(kBestPrefix + p.name));
  }
}

// The ranks' parameters must stay the same bits (the same all-reduced
// gradients, the same updates): compared after the first epoch of a run,
// the last, and every epoch that passes a multiple of
// partition.checksum_every steps.
void StepLoop::check_parameters(int64_t epoch) {
  const int every = job_.partition().checksum_every();
  if (!many_ || every == 0) return;
  const bool due = epoch == start_epoch_ + 1 || epoch == epochs_ || step_ / every != (step_ - per_epoch_) / every;
  if (!due) return;
  try {
    check_same(*comm_, parameter_checksum(core_, model_.params), "parameters");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("after step {}, the ranks' parameters diverged: {}", step_, e.what()));
  }
}

// Parameters, optimizer state and the best parameters; the metrics too
// mid-epoch; not the data.
void StepLoop::save(int64_t epoch, int64_t at_step, bool with_metrics) const {
  std::set<std::string> names = source_.persistent(core_);
  for (const auto& [name, t] : core_.memory().tensors()) {
    if (name.rfind(kBestPrefix, 0) == 0) names.insert(name);
  }
  names.erase(kMetrics);
  if (with_metrics) names.insert(kMetrics);
  std::function<void(proto::CheckpointState&)> best;
  if (source_.keeps_best()) {
    best = [&](proto::CheckpointState& state) {
      state.set_best_val_acc(best_val_);
      state.set_best_epoch(best_epoch_);
      state.set_best_test_acc(best_test_);
    };
  }
  checkpointer_.write(core_, names, epoch, at_step, best);
}

// A checkpoint after `at_step`, inside 0-based epoch `epoch`: `epoch`
// epochs complete, and the metrics so far (summed over the ranks).
void StepLoop::save_mid_epoch(int64_t epoch, int64_t at_step) {
  Tensor& metrics = core_.memory().at(kMetrics);
  Tensor mine = metrics;
  if (many_) comm_->allreduce<double>(metrics.values<double>());
  save(epoch, at_step, /*with_metrics=*/true);
  metrics = std::move(mine);
}

// The kept (or last) parameters: --logits-out from them, and --params-out.
void StepLoop::write_outputs() {
  restore_best();
  if (!options_.logits_out.empty()) {
    source_.write_logits(core_, options_.logits_out, {.step = start_epoch_ + 1, .lr = 0, .seed = job_.seed()});
  }
  if (!options_.params_out.empty() && writer()) {
    write_state_dict(core_, model_.params, model_.aliases, model_.buffers, options_.params_out);
  }
}

TrainResult StepLoop::run() {
  TrainResult result;
  result.ranks = ranks_;
  // Output files may name folders that do not exist yet.
  if (!options_.logits_out.empty() && !source_.writes_logits()) {
    throw std::invalid_argument("--logits-out is for full-graph jobs; a batch job's outputs come from gnnrt infer");
  }
  for (const auto* path : {&options_.metrics_path, &options_.logits_out, &options_.trace_path}) {
    if (!path->empty() && path->has_parent_path()) std::filesystem::create_directories(path->parent_path());
  }
  // Ranks started with different jobs (another --set on some) stop here,
  // before anything is read, with the fields and ranks named.
  if (many_) check_same_job(*comm_, job_);
  model_ = source_.load(core_);
  per_epoch_ = source_.steps_per_epoch();
  epochs_ = job_.schedule().epochs();
  if (!resume()) init_parameters();
  // Rank 0 writes the files; its failures are agreed on, so every rank
  // stops with the error instead of waiting in the next collective.
  MetricsSink metrics_out;
  step("opening --metrics", [&] {
    if (!options_.metrics_path.empty() && writer()) metrics_out = MetricsSink(options_.metrics_path, start_epoch_);
  });
  // Tests of the launcher's progress check stretch each step (seconds).
  const char* slow = std::getenv("GNNRT_TEST_SLOW_STEP");
  slow_step_ = slow != nullptr && *slow != '\0' ? std::atof(slow) : 0;
  last_step_report_ = std::chrono::steady_clock::now();
  for (int64_t e = start_epoch_; e < epochs_; ++e) {
    nlohmann::json extra;
    const EpochMetrics m = epoch(e, extra);
    // Diverged ranks first: their loss may be the NaN.
    check_parameters(m.epoch);
    if (!std::isfinite(m.loss)) {
      throw std::runtime_error(fmt::format(
          "the loss became {} at epoch {}; rerun with --debug to find the op that made it", m.loss, m.epoch));
    }
    if (source_.keeps_best() && (m.val_acc > best_val_ || !source_.has_validation())) {
      best_val_ = m.val_acc;
      best_test_ = m.test_acc;
      best_epoch_ = m.epoch;
      keep_best();
    }
    result.epochs.push_back(m);
    result.last_loss = m.loss;
    if (options_.progress && writer()) {
      spdlog::info("epoch {:>4}/{} {}", m.epoch, epochs_, source_.progress(m, core_.counters()));
    }
    if (!options_.metrics_path.empty()) {
      step("writing --metrics", [&] {
        if (metrics_out.open()) metrics_out.write(m, core_.counters(), ranks_, extra);
      });
    }
    if (options_.on_epoch) options_.on_epoch(m);
    const int every = job_.checkpoint().every();
    const int every_steps = job_.checkpoint().every_steps();
    const bool checkpoint = checkpointer_.enabled() && ((every > 0 && m.epoch % every == 0) ||
                                                        (every_steps > 0 && step_ % every_steps == 0));
    if (checkpoint) save(m.epoch, step_);
    if (m.stop && m.epoch < epochs_) {
      if (checkpointer_.enabled() && !checkpoint) save(m.epoch, step_);
      if (writer()) spdlog::info("stopped after epoch {} on request", m.epoch);
      result.stopped = true;
      break;
    }
  }
  // Not when this run compiled no program (a resumed run with nothing
  // left to do, for sources that compile on first use): the checkpoint
  // would lack the optimizer state of the complete one.
  if (!result.stopped && checkpointer_.enabled() && !source_.persistent(core_).empty()) {
    save(std::max(epochs_, start_epoch_), step_);
  }
  // A stopped run resumes later: its outputs are the finished run's.
  if (!result.stopped) step("writing the outputs", [&] { write_outputs(); });
  if (!options_.trace_path.empty()) {
    step("writing --trace", [&] { core_.write_trace(rank_path(options_.trace_path, rank_)); });
  }
  result.start_epoch = start_epoch_;
  result.steps = step_;
  if (source_.keeps_best()) {
    result.best_epoch = best_epoch_;
    result.best_val_acc = std::max(best_val_, 0.0);
    result.test_acc = best_test_;
  }
  result.counters = core_.counters();
  source_.finish(result, core_);
  return result;
}

}  // namespace

TrainResult run_step_loop(const proto::Job& job, const TrainOptions& options, BatchSource& source) {
  return StepLoop(job, options, source).run();
}

}  // namespace gnnrt::model
