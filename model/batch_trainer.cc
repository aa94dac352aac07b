#include "model/batch_trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <google/protobuf/text_format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "collectives/communicator.h"
#include "model/batch_dataset.h"
#include "model/batch_source.h"
#include "model/checkpoint.h"
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

std::string text_of(const google::protobuf::Message& m) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  return text;
}

// --params-in, as torch's load_state_dict: strict, every key loaded or one
// error listing the missing keys, the unexpected keys and the mismatched
// shapes; non-strict loads the intersection and lists the rest in a warning.
void load_state_dict(Core& core, const std::vector<ParamDecl>& params, const std::filesystem::path& dir,
                     bool strict) {
  std::set<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() == ".npy") files.insert(p.stem().string());
  }
  if (ec) throw std::invalid_argument(fmt::format("--params-in {}: {}", dir.string(), ec.message()));
  std::vector<std::string> missing, mismatched;
  std::map<std::string, Tensor> loaded;
  for (const ParamDecl& p : params) {
    if (!files.erase(p.name)) {
      missing.push_back(fmt::format("{} {}", p.name, runtime::shape_string(p.shape)));
      continue;
    }
    const Tensor t = read_npy(dir / (p.name + ".npy"));
    if (t.shape() != p.shape || !is_floating(t.dtype())) {
      mismatched.push_back(fmt::format("{}: {} {} in the file, {} float32 in the model", p.name,
                                       runtime::shape_string(t.shape()), to_string(t.dtype()),
                                       runtime::shape_string(p.shape)));
      continue;
    }
    loaded.emplace(p.name, t.cast(DType::kF32));
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

class BatchTrainer {
 public:
  BatchTrainer(const proto::Job& job, const TrainOptions& options)
      : job_(job), options_(options), core_(profile(), core_options()),
        data_(load_batch_dataset(job.dataset().path())), source_(data_, job.batching(), job.seed()) {}

  TrainResult run();

 private:
  runtime::DeviceProfile profile() const {
    auto p = runtime::DeviceProfile::named(options_.profile.empty() ? job_.device().profile() : options_.profile);
    if (options_.hbm_bytes > 0) p.hbm_bytes = options_.hbm_bytes;
    else if (job_.device().hbm_bytes() > 0) p.hbm_bytes = job_.device().hbm_bytes();
    return p;
  }
  runtime::CoreOptions core_options() const {
    runtime::CoreOptions o;
    if (!options_.no_cache) o.cache_dir = options_.cache_dir.empty() ? runtime::default_cache_dir() : options_.cache_dir;
    o.debug = options_.debug;
    o.trace = !options_.trace_path.empty();
    o.flush_denormals = job_.device().flush_denormals();
    return o;
  }

  // The bucket's train-step program, compiled on first use.
  const runtime::CompiledProgram& program(int bucket);
  bool resume();
  void save(int64_t epoch, int64_t step) const;

  const proto::Job& job_;
  const TrainOptions& options_;
  Core core_;
  BatchDataset data_;
  BatchSource source_;
  std::vector<ParamDecl> params_;
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs_;
  int64_t start_epoch_ = 0, step_ = 0;
};

const runtime::CompiledProgram& BatchTrainer::program(int bucket) {
  auto& p = programs_[bucket];
  if (!p) {
    Network net = build_module_train_step(job_.model(), source_.schema(), source_.buckets()[bucket]);
    runtime::CompileOptions o;
    o.train = runtime::TrainStep{net.loss, net.param_ids, optimizer_config(job_.optimizer())};
    p = core_.compile(std::move(net.program), o);
  }
  return *p;
}

bool BatchTrainer::resume() {
  if (job_.checkpoint().dir().empty() || !job_.checkpoint().resume()) return false;
  const auto loaded = load_newest_checkpoint(job_.checkpoint().dir());
  if (!loaded) return false;
  const proto::CheckpointState& state = loaded->state;
  const std::string path = loaded->path.string();
  if (state.seed() != job_.seed()) {
    throw CheckpointError(fmt::format("checkpoint {}: trained with seed {}, the job has seed {}", path, state.seed(), job_.seed()));
  }
  const proto::Job saved = parse_job(state.job(), path);
  for (const auto& [what, a, b] : {std::tuple{"model", text_of(saved.model()), text_of(job_.model())},
                                   std::tuple{"optimizer", text_of(saved.optimizer()), text_of(job_.optimizer())},
                                   std::tuple{"dataset", text_of(saved.dataset()), text_of(job_.dataset())},
                                   std::tuple{"batching", text_of(saved.batching()), text_of(job_.batching())}}) {
    if (a != b) {
      throw CheckpointError(fmt::format("checkpoint {} was trained with another {}; remove it or set "
                                        "checkpoint.resume=false", path, what));
    }
  }
  for (const auto& t : state.tensors()) {
    Tensor a(parse_dtype(t.dtype()), {t.shape().begin(), t.shape().end()});
    if (a.bytes().size() != t.data().size()) {
      throw CheckpointError(fmt::format("checkpoint {}: tensor '{}' has {} bytes for shape {}", path, t.name(),
                                        t.data().size(), runtime::shape_string(a.shape())));
    }
    std::memcpy(a.bytes().data(), t.data().data(), t.data().size());
    core_.memory().put(t.name(), std::move(a));
  }
  for (const ParamDecl& p : params_) {
    if (!core_.memory().has(p.name) || core_.memory().at(p.name).shape() != p.shape) {
      throw CheckpointError(fmt::format("checkpoint {}: no parameter '{}' {}", path, p.name, runtime::shape_string(p.shape)));
    }
  }
  start_epoch_ = state.epoch();
  step_ = state.step();
  spdlog::info("resumed from {} at epoch {}, step {}", path, start_epoch_, step_);
  return true;
}

void BatchTrainer::save(int64_t epoch, int64_t step) const {
  proto::CheckpointState state;
  state.set_job(to_text(job_));
  state.set_epoch(epoch);
  state.set_step(step);
  state.set_seed(job_.seed());
  state.set_best_epoch(-1);
  // Parameters and optimizer state: the persistent values of the programs
  // (every bucket's program has the same ones, by name).
  std::set<std::string> names;
  for (const auto& [bucket, p] : programs_) {
    for (const auto& v : p->program.values) {
      if (v.role == runtime::Role::kParameter || v.role == runtime::Role::kState) names.insert(v.name);
    }
  }
  names.erase(kMetrics);
  for (const std::string& name : names) {
    if (!core_.memory().has(name)) continue;
    const Tensor& t = core_.memory().at(name);
    auto* pt = state.add_tensors();
    pt->set_name(name);
    pt->set_dtype(std::string(gnnrt::to_string(t.dtype())));
    for (int64_t d : t.shape()) pt->add_shape(d);
    pt->set_data(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size());
  }
  save_to_checkpoint_dir(job_.checkpoint().dir(), state, job_.checkpoint().keep());
}

TrainResult BatchTrainer::run() {
  if (options_.threads > 0) omp_set_num_threads(options_.threads);
  if (options_.communicator && options_.communicator->size() > 1) {
    throw std::invalid_argument("data-parallel training on a batch dataset is not built yet: run it on one rank");
  }
  TrainResult result;
  const Schema& schema = source_.schema();
  // The model is checked (and its parameters declared) on the smallest
  // bucket before anything runs.
  params_ = build_module_train_step(job_.model(), schema, source_.buckets().front()).params;
  build_module_inference(job_.model(), schema, source_.buckets().front());
  if (!resume()) {
    if (options_.params_in.empty()) {
      initialize_parameters(core_, params_, job_.seed());
    } else {
      load_state_dict(core_, params_, options_.params_in, !options_.params_non_strict);
      // Non-strict: keys not in the files start fresh.
      std::vector<ParamDecl> fresh;
      for (const ParamDecl& p : params_) {
        if (!core_.memory().has(p.name)) fresh.push_back(p);
      }
      if (!fresh.empty()) initialize_parameters(core_, fresh, job_.seed());
    }
  }
  for (const auto* path : {&options_.metrics_path, &options_.trace_path}) {
    if (!path->empty() && path->has_parent_path()) std::filesystem::create_directories(path->parent_path());
  }
  std::ofstream metrics_out;
  if (!options_.metrics_path.empty()) {
    if (start_epoch_ > 0) keep_metrics_through(options_.metrics_path, start_epoch_);
    metrics_out.open(options_.metrics_path, start_epoch_ > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics_out) throw std::runtime_error("cannot write --metrics " + options_.metrics_path.string());
  }
  spdlog::info("batch dataset '{}': {} graphs, batches of {} ({} per epoch), {} buckets ({}), "
               "{} parameters", data_.name, data_.num_graphs, source_.batch_size(), source_.batches_per_epoch(),
               source_.buckets().size(),
               source_.growth() > 0 ? fmt::format("growth {:.3g}", source_.growth())
               : job_.batching().bucket_size() > 0 ? std::string("as the job lists them")
                                                   : std::string("derived from the batches' sizes"),
               params_.size());
  const int64_t epochs = job_.schedule().epochs();
  const int64_t slots = module_metric_slots(job_.model());
  PaddingStats padding;
  std::set<int> used;
  const auto batch = static_cast<size_t>(source_.batch_size());
  for (int64_t e = start_epoch_; e < epochs; ++e) {
    EpochMetrics m;
    m.epoch = e + 1;
    m.lr = learning_rate(job_, e);
    const runtime::Counters before = core_.counters();
    const auto start = std::chrono::steady_clock::now();
    core_.memory().put(kMetrics, Tensor(DType::kF64, {slots}));
    const std::vector<int64_t> order = source_.order(job_.seed(), e, job_.batching().shuffle());
    int64_t batches = 0;
    for (size_t at = 0; at < order.size(); at += batch) {
      const std::span<const int64_t> graphs = std::span<const int64_t>(order).subspan(at, std::min(batch, order.size() - at));
      const int bucket = source_.bucket_for(graphs);
      used.insert(bucket);
      const runtime::CompiledProgram& p = program(bucket);
      source_.bind(core_, graphs, bucket, &padding);
      core_.run(p, {.step = ++step_, .lr = m.lr, .seed = job_.seed()});
      ++batches;
    }
    const std::vector<double> v = core_.read(kMetrics).to_vector<double>();
    m.loss = batches > 0 ? v[0] / static_cast<double>(batches) : 0;
    m.ms = m.train_ms = ms_since(start);
    const runtime::Counters& after = core_.counters();
    m.simulated_ms = (after.simulated_seconds - before.simulated_seconds) * 1e3;
    if (!std::isfinite(m.loss)) {
      throw std::runtime_error(fmt::format("the loss became {} at epoch {}; rerun with --debug to find the op that made it",
                                           m.loss, m.epoch));
    }
    m.stop = options_.stop_requested && options_.stop_requested();
    result.epochs.push_back(m);
    result.last_loss = m.loss;
    if (options_.progress) {
      spdlog::info("epoch {:>4}/{} loss {:.5f} | {} steps, {:.1f} ms, {} compiles, padding {:.1f}% rows, {:.1f}% edges",
                   m.epoch, epochs, m.loss, step_, m.ms, after.compiles, padding.rows_percent(), padding.edges_percent());
    }
    if (metrics_out.is_open()) {
      nlohmann::json j{{"epoch", m.epoch}, {"step", step_}, {"loss", m.loss}, {"lr", m.lr}, {"ms", m.ms},
                       {"simulated_ms", m.simulated_ms}, {"compiles", after.compiles},
                       {"cache_hits", after.cache_hits}, {"buckets_used", used.size()},
                       {"padding_rows_percent", padding.rows_percent()},
                       {"padding_edges_percent", padding.edges_percent()}};
      for (int i = 0; i < job_.model().loss_term_size(); ++i) {
        j[fmt::format("loss_{}", job_.model().loss_term(i).input())] = batches > 0 ? v[1 + i] / static_cast<double>(batches) : 0;
      }
      metrics_out << j.dump() << '\n' << std::flush;
    }
    if (options_.on_epoch) options_.on_epoch(m);
    const int every = job_.checkpoint().every();
    const bool checkpoint = !job_.checkpoint().dir().empty() && every > 0 && m.epoch % every == 0;
    if (checkpoint) save(m.epoch, step_);
    if (m.stop && m.epoch < epochs) {
      if (!job_.checkpoint().dir().empty() && !checkpoint) save(m.epoch, step_);
      spdlog::info("stopped after epoch {} on request", m.epoch);
      result.stopped = true;
      break;
    }
  }
  if (!result.stopped && !job_.checkpoint().dir().empty()) save(std::max(epochs, start_epoch_), step_);
  if (!options_.params_out.empty()) {
    std::filesystem::create_directories(options_.params_out);
    for (const ParamDecl& p : params_) write_npy(options_.params_out / (p.name + ".npy"), core_.read(p.name));
  }
  if (!options_.trace_path.empty()) core_.write_trace(options_.trace_path);
  result.start_epoch = start_epoch_;
  result.counters = core_.counters();
  result.steps = step_;
  result.buckets_used = static_cast<int64_t>(used.size());
  result.buckets = static_cast<int64_t>(source_.buckets().size());
  result.padding_rows_percent = padding.rows_percent();
  result.padding_edges_percent = padding.edges_percent();
  spdlog::info("{} steps; {} compiles, {} cache hits; {} of {} buckets used; padding {:.1f}% of rows, {:.1f}% of edges",
               step_, result.counters.compiles, result.counters.cache_hits, used.size(), source_.buckets().size(),
               padding.rows_percent(), padding.edges_percent());
  return result;
}

}  // namespace

bool is_batch_job(const proto::Job& job) {
  return job.model().module_size() > 0 || is_batch_dataset(job.dataset().path());
}

TrainResult train_batches(const proto::Job& job, const TrainOptions& options) {
  return BatchTrainer(job, options).run();
}

}  // namespace gnnrt::model
