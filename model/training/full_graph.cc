#include "model/training/full_graph.h"

#include <fmt/format.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "collectives/communicator.h"
#include "model/data/shard.h"
#include "model/job.h"
#include "model/training/distributed.h"
#include "model/training/setup.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

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

void require_training_nodes(int64_t count, const std::string& name, const std::string& path) {
  if (count == 0) {
    throw std::invalid_argument(fmt::format(
        "dataset '{}' ({}) has no training nodes (train_mask is empty)", name, path));
  }
}

// What both forms share: the programs (built from the bound shapes), the
// step, the evaluation and what the metrics slots mean.
class FullGraph : public BatchSource {
 public:
  FullGraph(const proto::Job& job, const TrainOptions& options)
      : job_(job), options_(options), comm_(options.communicator), rank_(comm_ ? comm_->rank() : 0),
        ranks_(comm_ ? comm_->size() : 1) {}

  ModelParameters load(Core& core) final {
    // The same verdict on every rank, before anything collective.
    if (const int parts = job_.partition().parts(); parts > 0 && parts != ranks_) {
      throw std::invalid_argument(fmt::format(
          "the job is for {} ranks (partition.parts) but runs on {}; run mpirun -np {} or set "
          "partition.parts={}", parts, ranks_, parts, ranks_));
    }
    read(core);
    compile(core);
    if (val_count_ == 0 && rank_ == 0) {
      spdlog::warn("dataset '{}' has no validation nodes: the last epoch's model is kept", job_.dataset().path());
    }
    return {train_net_.params, train_net_.aliases, train_net_.buffers};
  }
  std::vector<std::string> resume_sections() const final { return {"model", "optimizer", "dataset"}; }
  int64_t steps_per_epoch() const final { return 1; }
  int64_t metric_slots() const final { return kMetricSlots; }
  const runtime::CompiledProgram& prepare(Core&, int64_t, int64_t) final { return *train_step_; }
  void evaluate(Core& core, const runtime::RunContext& context) final { core.run(*infer_, context); }
  bool keeps_best() const final { return true; }
  bool has_validation() const final { return val_count_ > 0; }

  nlohmann::json summarize(std::span<const double> v, int64_t, const runtime::Counters& c,
                           EpochMetrics& m) const final {
    const auto ratio = [&](MetricSlot s) { return v[s + 1] > 0 ? v[s] / v[s + 1] : 0.0; };
    m.loss = v[kLossSum];
    m.train_acc = ratio(kTrainCorrect);
    m.val_acc = ratio(kValCorrect);
    m.test_acc = ratio(kTestCorrect);
    return {{"train_acc", m.train_acc},       {"val_acc", m.val_acc},     {"test_acc", m.test_acc},
            {"train_ms", m.train_ms},         {"infer_ms", m.infer_ms},   {"ops_run", c.ops_run},
            {"bytes_moved", c.bytes_moved},   {"host_syncs", c.host_syncs},
            {"halo_ms", m.halo_ms},           {"halo_bytes", m.halo_bytes}};
  }
  std::string progress(const EpochMetrics& m, const runtime::Counters&) const final {
    return fmt::format("loss {:.4f} train {:.4f} val {:.4f} test {:.4f} | {:.2f} ms (simulated {:.3f} ms)", m.loss,
                       m.train_acc, m.val_acc, m.test_acc, m.ms, m.simulated_ms);
  }

  // The train step's values that outlive a run (parameters, optimizer
  // state), as the core holds them.
  std::set<std::string> persistent(const Core& core) const final {
    std::set<std::string> names;
    const runtime::Program& program = train_step_->program;
    for (const auto& [name, t] : core.memory().tensors()) {
      const runtime::ValueId v = program.find(name);
      if (v != runtime::kNoValue && program.value(v).role != runtime::Role::kInput) names.insert(name);
    }
    return names;
  }

  bool writes_logits() const final { return true; }
  void write_logits(Core& core, const std::filesystem::path& path, const runtime::RunContext& context) final {
    core.run(*infer_, context);
    write_rows(core.read(*infer_, kLogits), path);
  }

  void finish(TrainResult& result, const Core&) const override {
    result.train_plan = train_step_->plan;
    result.infer_plan = infer_->plan;
    result.train_passes = train_step_->passes;
  }

 protected:
  // Binds this rank's graph; sets shape_ and val_count_.
  virtual void read(Core& core) = 0;
  // Writes the logits of this rank's rows in global order (rank 0 writes).
  virtual void write_rows(const Tensor& local, const std::filesystem::path& path) = 0;

  const proto::Job& job_;
  const TrainOptions& options_;
  std::shared_ptr<collectives::Communicator> comm_;
  const int rank_, ranks_;
  NetworkShape shape_;
  int64_t val_count_ = 0;

 private:
  void compile(Core& core);

  Network train_net_, infer_net_;
  std::shared_ptr<const runtime::CompiledProgram> train_step_, infer_;
};

void FullGraph::compile(Core& core) {
  train_net_ = build_train_step(job_.model(), shape_);
  infer_net_ = build_inference(job_.model(), shape_);
  runtime::CompileOptions train_options;
  train_options.train =
      runtime::TrainStep{train_net_.loss, train_net_.param_ids, optimizer_config(job_.optimizer())};
  train_options.bucket_bytes = static_cast<int64_t>(job_.partition().bucket_mb() * (1 << 20));
  if (comm_ && comm_->size() > 1) {
    // The ranks must run the same programs: compare them built with sizes
    // that do not depend on the rank's share.
    NetworkShape canonical = shape_;
    canonical.nodes = canonical.edges = canonical.edges_self_loops = 1;
    if (canonical.feature_nnz >= 0) canonical.feature_nnz = 1;  // sparse, any share
    const auto text = build_train_step(job_.model(), canonical).program.to_text() +
                      build_inference(job_.model(), canonical).program.to_text() +
                      core.profile().to_text() + optimizer_config(job_.optimizer()).to_text() +
                      fmt::format("debug={} bucket_bytes={}", options_.debug, train_options.bucket_bytes);
    check_same(*comm_, XXH64(text.data(), text.size(), 0), "programs (other shard shapes on some ranks)");
  }
  agreed_step(comm_, "compiling", [&] {
    train_step_ = core.compile(train_net_.program, train_options);
    infer_ = core.compile(infer_net_.program, {});
  });
  // What was bound for programs that do not read it leaves the core (edge
  // ids, say, are read only by max aggregation's tie rule and attention
  // dropout). Parameters are not bound yet.
  std::vector<std::string> unread;
  for (const auto& [name, t] : core.memory().tensors()) {
    if (train_step_->program.find(name) == runtime::kNoValue &&
        infer_->program.find(name) == runtime::kNoValue) {
      unread.push_back(name);
    }
  }
  for (const auto& name : unread) core.memory().erase(name);
  // The whole dataset (or the shard as read) and the unread inputs are
  // freed: give their pages back before the arena is used. (A lower
  // M_MMAP_THRESHOLD would do it on every free, but then MPI's large
  // per-call buffers would be paged in afresh on every collective.)
  malloc_trim(0);
}

class WholeGraph final : public FullGraph {
 public:
  using FullGraph::FullGraph;

 private:
  void read(Core& core) override {
    Dataset data = load_dataset(job_.dataset().path());
    prepare_features(data, job_);
    require_training_nodes(std::count(data.train_mask.begin(), data.train_mask.end(), uint8_t{1}), data.name,
                           job_.dataset().path());
    shape_ = bind_dataset(core, data, job_.model());
    // The core holds its copy now: only the count stays on the host.
    val_count_ = std::count(data.val_mask.begin(), data.val_mask.end(), uint8_t{1});
  }
  void write_rows(const Tensor& local, const std::filesystem::path& path) override { write_npy(path, local); }
};

class GraphShard final : public FullGraph {
 public:
  using FullGraph::FullGraph;

  void finish(TrainResult& result, const Core& core) const override {
    FullGraph::finish(result, core);
    result.partitioned = true;
    result.partition = partition_;
    result.local_nodes = local_nodes_;
    result.local_edges = local_edges_;
  }

 private:
  void read(Core& core) override;
  void write_rows(const Tensor& local, const std::filesystem::path& path) override;

  Shard shard_;
  PartitionStats partition_;  // rank 0 knows it when it partitioned in memory
  int64_t local_nodes_ = 0, local_edges_ = 0;
};

// This rank's share: read from the job's shards, or cut in memory from the
// whole dataset (every rank partitions alike) and the rest dropped.
void GraphShard::read(Core& core) {
  if (!comm_) {
    throw std::invalid_argument("a job with shards needs a communicator (run gnnrt train, under mpirun)");
  }
  const auto& part = job_.partition();
  uint64_t data_identity = 0;
  agreed_step(comm_, part.shards().empty() ? "partitioning the dataset" : "reading the shards", [&] {
    if (!part.shards().empty()) {
      shard_ = read_shard(part.shards(), rank_, ranks_, job_);
      if (rank_ == 0) spdlog::info("read shards of {} ranks from {}", ranks_, part.shards());
    } else {
      Dataset data = load_dataset(job_.dataset().path());
      data_identity = dataset_fingerprint(data);
      prepare_features(data, job_);
      const EdgePartition partition =
          partition_edges(data.num_nodes, data.src, data.dst, partition_options(job_, ranks_));
      partition_ = partition.stats();
      shard_ = make_shard(data, partition, rank_);
      if (rank_ == 0) {
        const PartitionStats& s = partition_;
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
  local_nodes_ = shard_.num_local();
  local_edges_ = static_cast<int64_t>(shard_.graph.src.size());
  spdlog::info("shard: {} local vertices ({} masters, {} shared), {} edges", shard_.num_local(),
               std::count(shard_.is_master.begin(), shard_.is_master.end(), uint8_t{1}),
               shard_.mirrors.size(), shard_.graph.src.size());
  agreed_step(comm_, "binding the shard", [&] { shape_ = bind_shard(core, shard_, job_.model()); });
  // Collective, and agreed inside: a mirror table the ranks disagree on
  // throws on every rank.
  bind_halo(core, shard_, *comm_, job_.partition().halo() == proto::Partition::DENSE ? runtime::HaloMode::dense : runtime::HaloMode::sparse);
  val_count_ = shard_.val_count;
}

// Each rank's master rows, gathered.
void GraphShard::write_rows(const Tensor& local, const std::filesystem::path& path) {
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
  if (rank_ != 0) return;
  Tensor out(DType::kF32, {shard_.num_nodes, classes});
  auto o = out.values<float>();
  for (size_t k = 0; k < all_ids.size(); ++k) {
    std::copy_n(all_rows.begin() + static_cast<std::ptrdiff_t>(k * classes), classes,
                o.begin() + all_ids[k] * classes);
  }
  write_npy(path, out);
}

}  // namespace

bool is_partitioned_job(const proto::Job& job, const TrainOptions& options) {
  return (options.communicator && options.communicator->size() > 1) || !job.partition().shards().empty();
}

std::unique_ptr<BatchSource> make_full_graph_source(const proto::Job& job, const TrainOptions& options) {
  if (is_partitioned_job(job, options)) return std::make_unique<GraphShard>(job, options);
  return std::make_unique<WholeGraph>(job, options);
}

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

}  // namespace gnnrt::model
