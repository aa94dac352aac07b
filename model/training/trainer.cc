#include "model/training/trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <malloc.h>
#include <spdlog/spdlog.h>


#include <chrono>
#include <cstring>
#include <numeric>
#include <xxhash.h>
#include <tuple>
#include <cmath>
#include <fstream>
#include <limits>
#include <numbers>

#include "collectives/communicator.h"
#include "collectives/halo_exchange.h"
#include "model/data/dataset.h"
#include "model/data/shard.h"
#include "model/job.h"
#include "model/modules/network.h"
#include "model/training/batch_trainer.h"
#include "model/training/checkpoint.h"
#include "model/training/checkpointer.h"
#include "model/training/distributed.h"
#include "model/training/schedule.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"
#include "ops/rng.h"
#include "runtime/npy.h"
#include "runtime/program_cache.h"

namespace gnnrt::model {
namespace {

using runtime::Core;
using gnnrt::Tensor;

constexpr const char* kBestPrefix = "best/";

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}


// The dataset's edges without self loops and one self loop per node (PyG's
// remove_self_loops + add_self_loops, as GCNConv and GATConv do), numbered
// in destination order (self_loop_ids).
std::shared_ptr<const Core::Adjacency> with_self_loops(const Dataset& d) {
  const SelfLoopIds ids = self_loop_ids(d);
  std::vector<int32_t> src(static_cast<size_t>(ids.count)), dst(src.size());
  for (size_t e = 0; e < d.src.size(); ++e) {
    if (ids.edge[e] < 0) continue;
    src[static_cast<size_t>(ids.edge[e])] = static_cast<int32_t>(d.src[e]);
    dst[static_cast<size_t>(ids.edge[e])] = static_cast<int32_t>(d.dst[e]);
  }
  for (int64_t v = 0; v < d.num_nodes; ++v) {
    const auto at = static_cast<size_t>(ids.loop[static_cast<size_t>(v)]);
    src[at] = dst[at] = static_cast<int32_t>(v);
  }
  return std::make_shared<const Core::Adjacency>(
      Core::Adjacency::build(src, dst, d.num_nodes, d.num_nodes));
}

class Trainer {
 public:
  Trainer(const proto::Job& job, const TrainOptions& options)
      : job_(job), options_(options), comm_(options.communicator),
        distributed_((comm_ && comm_->size() > 1) || !job.partition().shards().empty()),
        rank_(comm_ ? comm_->rank() : 0), ranks_(comm_ ? comm_->size() : 1),
        core_(device_profile(job, options), core_options(job, options)) {}

  TrainResult run();

 private:
  // Runs fn; on many ranks, agrees on its outcome (distributed.h).
  template <typename Fn>
  void step(std::string_view what, Fn&& fn) {
    agreed_step(comm_, what, std::forward<Fn>(fn));
  }
  bool writer() const { return rank_ == 0; }

  void load_data();
  void load_shard();
  void compile();
  void init_parameters();
  bool resume();
  void save(int64_t epoch) const;  // an agreed step: rank 0 writes
  void keep_best();
  void restore_best();
  void write_outputs();
  void write_logits();
  void check_parameters(int64_t step);
  void corrupt_parameters();
  EpochMetrics epoch(int64_t index);

  const proto::Job& job_;
  const TrainOptions& options_;
  std::shared_ptr<collectives::Communicator> comm_;
  const bool distributed_;
  const int rank_, ranks_;
  Core core_;
  Dataset data_;
  int64_t val_count_ = 0;
  Shard shard_;  // distributed: this rank's share
  NetworkShape shape_;
  Network train_net_, infer_net_;
  std::shared_ptr<const runtime::CompiledProgram> train_step_, infer_;
  TrainResult result_;
  int64_t start_epoch_ = 0;
  double best_val_ = -1, best_test_ = 0;
  int64_t best_epoch_ = -1;
};

void require_training_nodes(int64_t count, const std::string& name, const std::string& path) {
  if (count == 0) {
    throw std::invalid_argument(fmt::format(
        "dataset '{}' ({}) has no training nodes (train_mask is empty)", name, path));
  }
}

void Trainer::load_data() {
  // The same verdict on every rank, before anything collective.
  if (const int parts = job_.partition().parts(); parts > 0 && parts != ranks_) {
    throw std::invalid_argument(fmt::format(
        "the job is for {} ranks (partition.parts) but runs on {}; run mpirun -np {} or set "
        "partition.parts={}", parts, ranks_, parts, ranks_));
  }
  if (distributed_) return load_shard();
  data_ = load_dataset(job_.dataset().path());
  prepare_features(data_, job_);
  require_training_nodes(std::count(data_.train_mask.begin(), data_.train_mask.end(), uint8_t{1}),
                         data_.name, job_.dataset().path());
  shape_ = bind_dataset(core_, data_, job_.model());
  // The core holds its copy now: keep only what the host still reads.
  val_count_ = std::count(data_.val_mask.begin(), data_.val_mask.end(), uint8_t{1});
  data_ = Dataset{};
}

// This rank's share: read from the job's shards, or cut in memory from the
// whole dataset (every rank partitions alike) and the rest dropped.
void Trainer::load_shard() {
  if (!comm_) {
    throw std::invalid_argument("a job with shards needs a communicator (run gnnrt train, under mpirun)");
  }
  const auto& part = job_.partition();
  uint64_t data_identity = 0;
  step(part.shards().empty() ? "partitioning the dataset" : "reading the shards", [&] {
    if (!part.shards().empty()) {
      shard_ = read_shard(part.shards(), rank_, ranks_, job_);
      if (rank_ == 0) spdlog::info("read shards of {} ranks from {}", ranks_, part.shards());
    } else {
      Dataset data = load_dataset(job_.dataset().path());
      data_identity = dataset_fingerprint(data);
      prepare_features(data, job_);
      const EdgePartition partition =
          partition_edges(data.num_nodes, data.src, data.dst, partition_options(job_, ranks_));
      result_.partition = partition.stats();
      shard_ = make_shard(data, partition, rank_);
      if (rank_ == 0) {
        const PartitionStats& s = result_.partition;
        spdlog::info("partitioned '{}' ({} nodes, {} edges) with {} over {} ranks: replication "
                     "factor {:.3f}, edge balance {:.3f}, vertex balance {:.3f}, {} halo rows",
                     data.name, data.num_nodes, data.num_edges(), name(part.method()), ranks_,
                     s.replication_factor, s.edge_balance, s.vertex_balance, s.halo_rows);
      }
    }
    require_training_nodes(shard_.train_count, "the shards' dataset", job_.dataset().path());
  });
  // Every rank partitioned its own copy: the same bytes, or an error naming
  // the ranks (a dataset.path that reads differently on another host).
  // Shards carry their partition run's id, checked by read_shard.
  if (part.shards().empty()) check_same(*comm_, data_identity, "datasets (the same dataset.path read other bytes)");
  result_.local_nodes = shard_.num_local();
  result_.local_edges = static_cast<int64_t>(shard_.graph.src.size());
  spdlog::info("shard: {} local vertices ({} masters, {} shared), {} edges", shard_.num_local(),
               std::count(shard_.is_master.begin(), shard_.is_master.end(), uint8_t{1}),
               shard_.mirrors.size(), shard_.graph.src.size());
  step("binding the shard", [&] { shape_ = bind_shard(core_, shard_, job_.model()); });
  // Collective, and agreed inside: a mirror table the ranks disagree on
  // throws on every rank.
  bind_halo(core_, shard_, *comm_, job_.partition().halo() == proto::Partition::DENSE ? runtime::HaloMode::dense : runtime::HaloMode::sparse);
}

void Trainer::compile() {
  train_net_ = build_train_step(job_.model(), shape_);
  infer_net_ = build_inference(job_.model(), shape_);
  runtime::CompileOptions train_options;
  train_options.train =
      runtime::TrainStep{train_net_.loss, train_net_.param_ids, optimizer_config(job_.optimizer())};
  train_options.bucket_bytes = static_cast<int64_t>(job_.partition().bucket_mb() * (1 << 20));
  if (distributed_ && comm_->size() > 1) {
    // The ranks must run the same programs: compare them built with sizes
    // that do not depend on the rank's share.
    NetworkShape canonical = shape_;
    canonical.nodes = canonical.edges = canonical.edges_self_loops = 1;
    if (canonical.feature_nnz >= 0) canonical.feature_nnz = 1;  // sparse, any share
    const auto text = build_train_step(job_.model(), canonical).program.to_text() +
                      build_inference(job_.model(), canonical).program.to_text() +
                      core_.profile().to_text() + optimizer_config(job_.optimizer()).to_text() +
                      fmt::format("debug={} bucket_bytes={}", options_.debug, train_options.bucket_bytes);
    check_same(*comm_, XXH64(text.data(), text.size(), 0), "programs (other shard shapes on some ranks)");
  }
  step("compiling", [&] {
    train_step_ = core_.compile(train_net_.program, train_options);
    infer_ = core_.compile(infer_net_.program, {});
  });
  // What was bound for programs that do not read it leaves the core (edge
  // ids, say, are read only by max aggregation's tie rule and attention
  // dropout). Parameters are not bound yet.
  std::vector<std::string> unread;
  for (const auto& [name, t] : core_.memory().tensors()) {
    if (train_step_->program.find(name) == runtime::kNoValue &&
        infer_->program.find(name) == runtime::kNoValue) {
      unread.push_back(name);
    }
  }
  for (const auto& name : unread) core_.memory().erase(name);
  // The whole dataset (or the shard as read) and the unread inputs are
  // freed: give their pages back before the arena is used. (A lower
  // M_MMAP_THRESHOLD would do it on every free, but then MPI's large
  // per-call buffers would be paged in afresh on every collective.)
  malloc_trim(0);
  result_.train_plan = train_step_->plan;
  result_.infer_plan = infer_->plan;
  result_.train_passes = train_step_->passes;
}

// Fresh parameters (initialize_parameters), or --params-in's, shapes
// checked (read by rank 0). Either way rank 0's go to every rank, as
// PyTorch DDP broadcasts rank 0's module state at construction: the ranks
// start from the same bits whatever they drew or read.
void Trainer::init_parameters() {
  if (options_.params_in.empty()) {
    initialize_parameters(core_, train_net_.params, job_.seed());
    if (options_.corrupt_after_epoch == 0) corrupt_parameters();
    if (comm_ && comm_->size() > 1) {
      for (const ParamDecl& p : train_net_.params) comm_->broadcast<float>(core_.memory().at(p.name).values<float>(), 0);
    }
    return;
  }
  step("reading --params-in", [&] {
    if (!writer()) return;
    load_state_dict(core_, train_net_.params, train_net_.aliases, train_net_.buffers, options_.params_in,
                    !options_.params_non_strict, options_.params_scope);
    // Non-strict or scoped: the keys not loaded start fresh.
    initialize_missing_parameters(core_, train_net_.params, job_.seed());
  });
  if (!writer()) {
    for (const ParamDecl& p : train_net_.params) core_.memory().put(p.name, Tensor(DType::kF32, p.shape));
  }
  if (options_.corrupt_after_epoch == 0) corrupt_parameters();
  if (!comm_ || comm_->size() == 1) return;
  for (const ParamDecl& p : train_net_.params) comm_->broadcast<float>(core_.memory().at(p.name).values<float>(), 0);
}

void Trainer::corrupt_parameters() { flip_first_parameter_bit(core_, train_net_.params, rank_); }

bool Trainer::resume() {
  const Checkpointer checkpointer(job_, comm_, /*by_step=*/false, options_.on_notice);
  // Only the schedule and the partition may change across a resume (more
  // epochs, another rank count).
  const auto loaded = checkpointer.resume(core_, {"model", "optimizer", "dataset"});
  if (!loaded) return false;
  const std::string path = loaded->path.string();
  step("resuming from the checkpoint", [&] {
    // Every parameter must come back with the shape this job builds.
    auto& mem = core_.memory();
    for (const ParamDecl& p : train_net_.params) {
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
  best_val_ = state.best_val_acc();
  best_epoch_ = state.best_epoch();
  best_test_ = state.best_test_acc();
  if (writer()) spdlog::info("resumed from {} at epoch {}", path, start_epoch_);
  return true;
}

void Trainer::save(int64_t epoch) const {
  // Parameters, optimizer state and best parameters; not the data or the metrics.
  std::set<std::string> names;
  const runtime::Program& program = train_step_->program;
  for (const auto& [name, t] : core_.memory().tensors()) {
    const runtime::ValueId v = program.find(name);
    const bool persistent = v != runtime::kNoValue && program.value(v).role != runtime::Role::kInput;
    if ((persistent || name.rfind(kBestPrefix, 0) == 0) && name != kMetrics) names.insert(name);
  }
  Checkpointer(job_, comm_, /*by_step=*/false, options_.on_notice).write(core_, names, epoch, epoch, [&](proto::CheckpointState& state) {
    state.set_best_val_acc(best_val_);
    state.set_best_epoch(best_epoch_);
    state.set_best_test_acc(best_test_);
  });
}

void Trainer::keep_best() {
  auto& mem = core_.memory();
  for (const ParamDecl& p : train_net_.params) mem.put(kBestPrefix + p.name, mem.at(p.name));
}

void Trainer::restore_best() {
  auto& mem = core_.memory();
  for (const ParamDecl& p : train_net_.params) {
    if (mem.has(kBestPrefix + p.name)) mem.put(p.name, mem.at(kBestPrefix + p.name));
  }
}

// Every rank's parameters must stay the same bits (the same all-reduced
// gradients, the same updates): compared every checksum_every steps, and
// at the first step of a run and the last, so that a job shorter than
// checksum_every is checked too.
void Trainer::check_parameters(int64_t step) {
  const int every = job_.partition().checksum_every();
  if (!comm_ || comm_->size() == 1 || every == 0) return;
  if (step % every != 0 && step != start_epoch_ + 1 && step != job_.schedule().epochs()) return;
  const uint64_t sum = parameter_checksum(core_, train_net_.params);
  try {
    check_same(*comm_, sum, "parameters");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("after step {}, the ranks' parameters diverged: {}", step,
                                         e.what()));
  }
}

EpochMetrics Trainer::epoch(int64_t index) {
  EpochMetrics m;
  m.epoch = index + 1;
  m.lr = learning_rate(job_, index);
  const runtime::Counters before = core_.counters();
  const auto epoch_start = std::chrono::steady_clock::now();
  core_.memory().put(kMetrics, Tensor(DType::kF64, {kMetricSlots}));
  const runtime::RunContext context{.step = index + 1, .lr = m.lr, .seed = job_.seed()};
  auto start = std::chrono::steady_clock::now();
  core_.run(*train_step_, context);
  m.train_ms = ms_since(start);
  if (options_.corrupt_after_epoch == m.epoch) corrupt_parameters();
  start = std::chrono::steady_clock::now();
  core_.run(*infer_, context);
  m.infer_ms = ms_since(start);
  // The one host synchronisation of the epoch (and, on many ranks, one
  // all-reduce of the sums, with the halo bytes sent).
  const runtime::Counters& after = core_.counters();
  const Tensor metrics = core_.read(kMetrics);
  std::vector<double> v = metrics.to_vector<double>();
  v.push_back(options_.stop_requested && options_.stop_requested() ? 1.0 : 0.0);
  v.push_back(after.halo_bytes - before.halo_bytes);
  if (comm_ && comm_->size() > 1) comm_->allreduce<double>(v);
  m.ms = ms_since(epoch_start);
  m.halo_bytes = v.back();
  m.stop = v[v.size() - 2] > 0;
  m.simulated_ms = (after.simulated_seconds - before.simulated_seconds) * 1e3;
  m.compute_ms = (after.compute_seconds - before.compute_seconds) * 1e3;
  m.halo_ms = (after.halo_seconds - before.halo_seconds) * 1e3;
  m.grad_ms = (after.gradient_seconds - before.gradient_seconds) * 1e3;
  m.wait_ms = std::max(0.0, m.ms - m.compute_ms - m.halo_ms - m.grad_ms);
  const auto ratio = [&](MetricSlot s) { return v[s + 1] > 0 ? v[s] / v[s + 1] : 0.0; };
  m.loss = v[kLossSum];
  m.train_acc = ratio(kTrainCorrect);
  m.val_acc = ratio(kValCorrect);
  m.test_acc = ratio(kTestCorrect);
  check_parameters(index + 1);
  return m;
}

// The logits of every vertex in global order: each rank's master rows,
// gathered (rank 0 writes them).
void Trainer::write_logits() {
  const Tensor local = core_.read(*infer_, kLogits);
  if (!distributed_) {
    write_npy(options_.logits_out, local);
    return;
  }
  const int64_t classes = local.shape()[1];
  const auto values = local.values<float>();
  std::vector<int64_t> ids;
  std::vector<float> rows;
  for (int64_t i = 0; i < shard_.num_local(); ++i) {
    if (!shard_.is_master[static_cast<size_t>(i)]) continue;
    ids.push_back(shard_.global_id[static_cast<size_t>(i)]);
    rows.insert(rows.end(), values.begin() + i * classes, values.begin() + (i + 1) * classes);
  }
  std::vector<int64_t> count(static_cast<size_t>(ranks_));
  const int64_t mine = static_cast<int64_t>(ids.size());
  comm_->allgather<int64_t>(std::span<const int64_t>(&mine, 1), count);
  std::vector<size_t> id_counts(count.begin(), count.end()), row_counts;
  for (int64_t c : count) row_counts.push_back(static_cast<size_t>(c * classes));
  const int64_t total = std::accumulate(count.begin(), count.end(), int64_t{0});
  std::vector<int64_t> all_ids(static_cast<size_t>(total));
  std::vector<float> all_rows(static_cast<size_t>(total * classes));
  comm_->allgather_v_async<int64_t>(ids, all_ids, id_counts).wait();
  comm_->allgather_v_async<float>(rows, all_rows, row_counts).wait();
  if (!writer()) return;
  Tensor out(DType::kF32, {shard_.num_nodes, classes});
  auto o = out.values<float>();
  for (size_t k = 0; k < all_ids.size(); ++k) {
    std::copy_n(all_rows.begin() + static_cast<std::ptrdiff_t>(k * classes), classes,
                o.begin() + all_ids[k] * classes);
  }
  write_npy(options_.logits_out, out);
}

void Trainer::write_outputs() {
  restore_best();
  if (!options_.logits_out.empty()) {
    core_.run(*infer_, {.step = start_epoch_ + 1, .lr = 0, .seed = job_.seed()});
    write_logits();
  }
  if (!options_.params_out.empty() && writer()) {
    write_state_dict(core_, train_net_.params, train_net_.aliases, train_net_.buffers, options_.params_out);
  }
}

TrainResult Trainer::run() {
  result_.ranks = ranks_;
  result_.partitioned = distributed_;
  // Output files may name folders that do not exist yet.
  for (const auto* path : {&options_.metrics_path, &options_.logits_out, &options_.trace_path}) {
    if (!path->empty() && path->has_parent_path()) std::filesystem::create_directories(path->parent_path());
  }
  // Ranks started with different jobs (another --set on some) stop here,
  // before anything is read, with the fields and ranks named.
  if (comm_ && comm_->size() > 1) check_same_job(*comm_, job_);
  load_data();
  compile();
  if (!resume()) init_parameters();
  // Rank 0 writes the files; its failures are agreed on, so every rank
  // stops with the error instead of waiting in the next collective.
  MetricsSink metrics_out;
  step("opening --metrics", [&] {
    if (!options_.metrics_path.empty() && writer()) metrics_out = MetricsSink(options_.metrics_path, start_epoch_);
  });
  const int64_t epochs = job_.schedule().epochs();
  const int64_t val_nodes =
      distributed_ ? shard_.val_count : val_count_;
  const bool has_val = val_nodes > 0;
  if (!has_val && writer()) {
    spdlog::warn("dataset '{}' has no validation nodes: the last epoch's model is kept",
                 job_.dataset().path());
  }
  for (int64_t e = start_epoch_; e < epochs; ++e) {
    EpochMetrics m = epoch(e);
    if (!std::isfinite(m.loss)) {
      throw std::runtime_error(fmt::format(
          "the loss became {} at epoch {}; rerun with --debug to find the op that made it",
          m.loss, m.epoch));
    }
    if (m.val_acc > best_val_ || !has_val) {
      best_val_ = m.val_acc;
      best_test_ = m.test_acc;
      best_epoch_ = m.epoch;
      keep_best();
    }
    result_.epochs.push_back(m);
    const auto& c = core_.counters();
    if (options_.progress && writer()) {
      spdlog::info("epoch {:>4}/{} loss {:.4f} train {:.4f} val {:.4f} test {:.4f} | {:.2f} ms "
                   "(simulated {:.3f} ms)",
                   m.epoch, epochs, m.loss, m.train_acc, m.val_acc, m.test_acc, m.ms, m.simulated_ms);
    }
    if (!options_.metrics_path.empty()) {
      const nlohmann::json extra{{"train_acc", m.train_acc}, {"val_acc", m.val_acc},     {"test_acc", m.test_acc},
                                 {"train_ms", m.train_ms},   {"infer_ms", m.infer_ms},   {"ops_run", c.ops_run},
                                 {"bytes_moved", c.bytes_moved}, {"host_syncs", c.host_syncs},
                                 {"halo_ms", m.halo_ms},     {"halo_bytes", m.halo_bytes}};
      step("writing --metrics", [&] { metrics_out.write(m, c, ranks_, extra); });
    }
    if (options_.on_epoch) options_.on_epoch(m);
    const int every = job_.checkpoint().every();
    if (!job_.checkpoint().dir().empty() && every > 0 && m.epoch % every == 0) {
      save(m.epoch);
    }
    if (m.stop && m.epoch < epochs) {
      if (!job_.checkpoint().dir().empty() && !(every > 0 && m.epoch % every == 0)) {
        save(m.epoch);
      }
      if (writer()) spdlog::info("stopped after epoch {} on request", m.epoch);
      result_.stopped = true;
      result_.start_epoch = start_epoch_;
      result_.counters = core_.counters();
      return result_;
    }
  }
  if (!job_.checkpoint().dir().empty()) {
    save(std::max(epochs, start_epoch_));
  }
  step("writing the outputs", [&] { write_outputs(); });
  if (!options_.trace_path.empty()) {
    step("writing --trace", [&] { core_.write_trace(rank_path(options_.trace_path, rank_)); });
  }
  result_.start_epoch = start_epoch_;
  result_.best_epoch = best_epoch_;
  result_.best_val_acc = std::max(best_val_, 0.0);
  result_.test_acc = best_test_;
  result_.counters = core_.counters();
  return result_;
}

}  // namespace

void prepare_features(Dataset& data, const proto::Job& job) {
  const auto& d = job.dataset();
  const double density = data.feature_density();
  const bool sparse = d.features() == proto::Dataset::SPARSE ||
                      (d.features() == proto::Dataset::AUTO && density <= d.sparse_density() &&
                       sparse_features_unsupported(job.model()).empty());
  if (sparse) {
    make_features_sparse(data);
  } else {
    make_features_dense(data);
  }
  if (d.normalize_features()) {
    normalize_features(data);  // may fill the zeros (a negative minimum): dense again
    if (d.features() == proto::Dataset::SPARSE) make_features_sparse(data);
  }
  spdlog::info("features: {} ({:.2f}% non-zero, dataset.features {})", data.x_sparse ? "sparse" : "dense",
               100 * density, lower_name(d.features()));
}

// The features' pattern as a graph (entry e: column src(e) -> row dst(e),
// entries in CSR order) and its values.
void bind_sparse_features(Core& core, const SparseFeatures& x, int64_t rows, int64_t cols) {
  std::vector<int32_t> row(static_cast<size_t>(x.nnz()));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(row.begin() + x.rowptr[static_cast<size_t>(r)],
              row.begin() + x.rowptr[static_cast<size_t>(r) + 1], static_cast<int32_t>(r));
  }
  core.bind_graph(kFeatures, std::make_shared<const Core::Adjacency>(
                                 Core::Adjacency::build(x.col, row, cols, rows)));
  core.memory().put(kFeatureValues, Tensor::from<float>(x.values, {x.nnz()}));
}

NetworkShape bind_dataset(Core& core, const Dataset& data, const proto::Model& model) {
  const int64_t n = data.num_nodes;
  core.bind_graph(kGraph, std::make_shared<const Core::Adjacency>(Core::Adjacency::build(
                              node_ids_32(data.src, n, "graph"), node_ids_32(data.dst, n, "graph"), n, n)));
  auto self_loops = with_self_loops(data);
  NetworkShape shape{n, data.num_features, data.num_classes, data.num_edges(), self_loops->num_edges()};
  core.bind_graph(kGraphSelfLoops, std::move(self_loops));
  auto& mem = core.memory();
  if (data.x_sparse) {
    bind_sparse_features(core, *data.x_sparse, n, data.num_features);
    shape.feature_nnz = data.x_sparse->nnz();
  } else {
    mem.put(kFeatures, Tensor::from<float>(data.x, {n, data.num_features}));
  }
  mem.put("y", Tensor::from<int64_t>(data.y, {n}));
  mem.put("train_mask", Tensor::from<uint8_t>(data.train_mask, {n}));
  mem.put("val_mask", Tensor::from<uint8_t>(data.val_mask, {n}));
  mem.put("test_mask", Tensor::from<uint8_t>(data.test_mask, {n}));
  if (model.loss() == proto::Model::MSE) {
    Tensor onehot(DType::kF32, {n, data.num_classes});
    auto v = onehot.values<float>();
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * data.num_classes + data.y[i])] = 1;
    mem.put("y_onehot", std::move(onehot));
  }
  return shape;
}

TrainResult train(const proto::Job& job, const TrainOptions& options) {
  validate(job);
  if (is_batch_job(job)) return train_batches(job, options);
  return Trainer(job, options).run();
}

}  // namespace gnnrt::model
