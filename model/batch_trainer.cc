#include "model/batch_trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
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
#include "model/batch_dataset.h"
#include "model/batch_source.h"
#include "model/checkpoint.h"
#include "model/checkpointer.h"
#include "model/distributed.h"
#include "model/job.h"
#include "model/module_graph.h"
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
  // Runs fn; on many ranks, agrees on its outcome (model/distributed.h):
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
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs_;
  int64_t start_epoch_ = 0, step_ = 0;
  double compile_ms_ = 0, cache_load_ms_ = 0;  // program(): built and compiled, or loaded
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
    load_state_dict(core_, params_, aliases_, options_.params_in, !options_.params_non_strict, options_.params_scope);
    // Non-strict or scoped: the keys not loaded start fresh.
    std::vector<ParamDecl> fresh;
    for (const ParamDecl& p : params_) {
      if (!core_.memory().has(p.name)) fresh.push_back(p);
    }
    if (!fresh.empty()) initialize_parameters(core_, fresh, job_.seed());
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
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  // Ranks started with different jobs stop here, the fields named.
  if (replicated_) check_same_job(*comm_, job_);
  TrainResult result;
  result.ranks = ranks_;
  uint64_t identity = 0;
  step("loading the dataset", [&] {
    data_ = load_batch_dataset(job_.dataset().path());
    identity = batch_fingerprint(data_);
    source_ = std::make_unique<BatchSource>(data_, job_.batching(), job_.seed(), ranks_);
    // The model is checked (and its parameters declared) on the smallest
    // bucket before anything runs.
    Network first = build_module_train_step(job_.model(), source_->schema(), source_->buckets().front(), replicated_);
    params_ = std::move(first.params);
    aliases_ = std::move(first.aliases);
    build_module_inference(job_.model(), source_->schema(), source_->buckets().front(), replicated_);
  });
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
  PaddingStats padding;
  std::set<int> used;
  const auto batch = static_cast<size_t>(source.batch_size());
  const int64_t per_epoch = source.batches_per_epoch();
  const bool per_step = job_.schedule().per_step();
  const int every_steps = job_.checkpoint().dir().empty() ? 0 : job_.checkpoint().every_steps();
  auto last_step_report = std::chrono::steady_clock::now();
  // Tests of the launcher's progress check stretch each step (seconds).
  const char* slow = std::getenv("GNNRT_TEST_SLOW_STEP");
  const double slow_step = slow != nullptr && *slow != '\0' ? std::atof(slow) : 0;
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
      const double lr = per_step ? learning_rate(job_, step_, epochs * per_epoch) : m.lr;
      core_.run(*p, {.step = ++step_, .lr = lr, .seed = job_.seed()});
      ++batches;
      if (slow_step > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow_step));
      if (options_.on_step && ms_since(last_step_report) >= 500) {
        options_.on_step(e, step_);  // e epochs done
        last_step_report = std::chrono::steady_clock::now();
      }
      if (every_steps > 0 && step_ % every_steps == 0 && batches < per_epoch) save_mid_epoch(e, step_);
    }
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
    std::string line;
    if (metrics_out.open()) {
      nlohmann::json j{{"epoch", m.epoch}, {"step", step_}, {"loss", m.loss}, {"lr", m.lr}, {"ms", m.ms},
                       {"simulated_ms", m.simulated_ms}, {"compiles", after.compiles},
                       {"cache_hits", after.cache_hits}, {"buckets_used", used.size()},
                       {"padding_rows_percent", padding.rows_percent()},
                       {"padding_edges_percent", padding.edges_percent()}, {"ranks", ranks_},
                       {"compute_ms", m.compute_ms}, {"grad_ms", m.grad_ms}, {"wait_ms", m.wait_ms},
                       {"compile_ms", compile_ms_}, {"cache_load_ms", cache_load_ms_}};
      for (int i = 0; i < job_.model().loss_term_size(); ++i) {
        const auto& t = job_.model().loss_term(i);
        j[fmt::format("loss_{}", t.input())] = batches > 0 ? v[1 + i] / static_cast<double>(batches) : 0;
        const auto slot = static_cast<size_t>(correct_slot(job_.model(), i));
        if (t.kind() == proto::LossTerm::CROSS_ENTROPY && v[slot + 1] > 0) {
          j[fmt::format("acc_{}", t.input())] = v[slot] / v[slot + 1];
        }
      }
      line = j.dump();
    }
    step("writing --metrics", [&] { metrics_out.write(line); });
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
    write_state_dict(core_, params_, aliases_, options_.params_out);
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

}  // namespace

void check_finite_parameter(const Tensor& t, const std::string& key, const std::filesystem::path& file) {
  const auto first_bad = [&](auto values) -> int64_t {
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = static_cast<double>(values[i]);
      if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max()) return static_cast<int64_t>(i);
    }
    return -1;
  };
  int64_t bad = -1;
  double value = 0;
  if (t.dtype() == DType::kF32) {
    bad = first_bad(t.values<float>());
    if (bad >= 0) value = t.values<float>()[static_cast<size_t>(bad)];
  } else if (t.dtype() == DType::kF64) {
    bad = first_bad(t.values<double>());
    if (bad >= 0) value = t.values<double>()[static_cast<size_t>(bad)];
  }
  if (bad < 0) return;
  std::vector<int64_t> index(t.shape().size());
  for (size_t d = index.size(), rest = static_cast<size_t>(bad); d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<size_t>(t.shape()[d]));
    rest /= static_cast<size_t>(t.shape()[d]);
  }
  throw std::invalid_argument(fmt::format("--params-in {}: {}[{}] is {}{}", file.string(), key, fmt::join(index, ", "),
                                          value, std::isfinite(value) ? " (too large for float32)" : ""));
}

void load_state_dict(Core& core, const std::vector<ParamDecl>& params, const std::vector<ParamAlias>& aliases,
                     const std::filesystem::path& dir, bool strict, const std::string& scope) {
  std::set<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() == ".npy") files.insert(p.stem().string());
  }
  if (ec) throw std::invalid_argument(fmt::format("--params-in {}: {}", dir.string(), ec.message()));
  std::vector<std::string> missing, mismatched;
  std::map<std::string, Tensor> loaded;
  // Every key the model has: its parameters', then their aliases' (checked
  // for their shape; a parameter's values come from its own key).
  std::vector<std::pair<std::string, const ParamDecl*>> keys;
  for (const ParamDecl& p : params) keys.emplace_back(p.name, &p);
  for (const ParamAlias& a : aliases) {
    const auto p = std::find_if(params.begin(), params.end(), [&](const ParamDecl& d) { return d.name == a.param; });
    if (p == params.end()) throw std::logic_error("alias " + a.key + " of no parameter " + a.param);
    keys.emplace_back(a.key, &*p);
  }
  if (!scope.empty()) {
    const auto outside = [&](const auto& k) { return !k.first.starts_with(scope + "."); };
    const auto n = std::erase_if(keys, outside);
    if (keys.empty()) throw std::invalid_argument(fmt::format("--params-scope {}: the model has no key under '{}.'", scope, scope));
    spdlog::info("--params-scope {}: {} keys under '{}.', {} others start from their initialisation", scope,
                 keys.size(), scope, n);
  }
  for (const auto& [key, p] : keys) {
    if (!files.erase(key)) {
      missing.push_back(fmt::format("{} {}", key, runtime::shape_string(p->shape)));
      continue;
    }
    const Tensor t = read_npy(dir / (key + ".npy"));
    if (t.shape() != p->shape || !is_floating(t.dtype())) {
      mismatched.push_back(fmt::format("{}: {} {} in the file, {} float32 in the model", key,
                                       runtime::shape_string(t.shape()), to_string(t.dtype()),
                                       runtime::shape_string(p->shape)));
      continue;
    }
    check_finite_parameter(t, key, dir / (key + ".npy"));
    if (key == p->name) {
      loaded.emplace(key, t.cast(DType::kF32));
    } else if (const auto it = loaded.find(p->name); it != loaded.end()) {
      // torch saves one tensor under both names: values that differ are
      // not a state_dict of this model, and one of them would be dropped.
      const Tensor alias = t.cast(DType::kF32);
      const std::span<const float> a = alias.values<float>(), v = std::as_const(it->second).values<float>();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - v[i]));
      const std::span<const std::byte> ab = alias.bytes(), vb = std::as_const(it->second).bytes();
      if (ab.size() != vb.size() || std::memcmp(ab.data(), vb.data(), ab.size()) != 0) {
        mismatched.push_back(fmt::format("{}: names the same parameter as {}, but its values differ (max |diff| {:g})",
                                         key, p->name, worst));
      }
    }
  }
  const std::vector<std::string> unexpected(files.begin(), files.end());
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    const std::string what = fmt::format(
        "--params-in {}: missing keys: [{}]; unexpected keys: [{}]; mismatched: [{}]", dir.string(),
        fmt::join(missing, ", "), fmt::join(unexpected, ", "), fmt::join(mismatched, "; "));
    if (strict) throw std::invalid_argument(what + " (--params-non-strict loads the rest)");
    spdlog::warn("{}; loaded the other {} keys", what, loaded.size());
  }
  for (auto& [name, t] : loaded) core.memory().put(name, std::move(t));
}

void write_state_dict(const Core& core, const std::vector<ParamDecl>& params, const std::vector<ParamAlias>& aliases,
                      const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const ParamDecl& p : params) write_npy(dir / (p.name + ".npy"), core.memory().at(p.name));
  for (const ParamAlias& a : aliases) write_npy(dir / (a.key + ".npy"), core.memory().at(a.param));
}

bool is_batch_job(const proto::Job& job) {
  return job.model().module_size() > 0 || is_batch_dataset(job.dataset().path());
}

TrainResult train_batches(const proto::Job& job, const TrainOptions& options) {
  return BatchTrainer(job, options).run();
}

}  // namespace gnnrt::model
