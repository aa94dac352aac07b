#include "model/training/sampled_source.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "collectives/communicator.h"
#include "model/data/products.h"
#include "model/modules/module_graph.h"
#include "model/sampling/distributed_neighbors.h"
#include "model/sampling/neighbor_sampler.h"
#include "model/sampling/seed_batches.h"
#include "model/training/distributed.h"
#include "model/training/sampled_batches.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

using runtime::Core;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

NodeShard load_node_shard(const proto::Job& job, int rank, int ranks) {
  const std::string& path = job.dataset().path();
  // A folder of that name is a dataset; otherwise "products[:...]" is the generator.
  if (is_products_spec(path) && !std::filesystem::is_directory(path)) {
    return make_products_shard(parse_products_spec(path), rank, ranks);
  }
  Dataset d = load_dataset(path);
  if (job.dataset().normalize_features()) normalize_features(d);
  make_features_dense(d);
  return node_shard(d, rank, ranks, job.sampling().undirected());
}

// Samples a rank's share of global batches in order, with the features
// and labels: from the shard itself on one rank (the whole graph), from
// the nodes' owners on many (collective: every rank makes every batch).
class BatchMaker {
 public:
  BatchMaker(const proto::Job& job, const NodeShard& shard, collectives::Communicator* comm)
      : job_(job), shard_(shard), rank_(comm ? comm->rank() : 0), ranks_(comm ? comm->size() : 1),
        seeds_(shard.train, job.sampling().batch_size(), job.sampling().shuffle(), job.sampling().drop_last(),
               job.seed()),
        sampler_({{job.sampling().fanout().begin(), job.sampling().fanout().end()}, job.sampling().replace(),
                  job.sampling().disjoint()},
                 shard.num_nodes) {
    const int threads = std::max(1, job.sampling().threads());
    if (comm && ranks_ > 1) {
      remote_ = std::make_unique<DistributedNeighbors>(shard, *comm, threads);
    } else {
      local_ = std::make_unique<ShardNeighbors>(shard, threads);
    }
  }

  int64_t batches_per_epoch() const { return seeds_.batches_per_epoch(); }
  int64_t bytes_sent() const { return remote_ ? remote_->bytes_sent() : 0; }

  SampledBatch make(int64_t epoch, int64_t index) {
    const auto start = Clock::now();
    SampledBatch out;
    out.epoch = epoch;
    out.index = index;
    const auto global = seeds_.batch(epoch, index);
    out.global_seeds = static_cast<int64_t>(global.size());
    const auto mine = SeedBatches::share(global, rank_, ranks_);
    NeighborSource& source = remote_ ? static_cast<NeighborSource&>(*remote_) : *local_;
    out.blocks = sampler_.sample(mine, {job_.seed(), epoch, index}, source);
    const SampledBlocks& b = out.blocks;
    const auto nodes = std::span<const int32_t>(b.nodes).first(static_cast<size_t>(b.frontier.back()));
    const auto seeds = nodes.first(static_cast<size_t>(b.frontier[0]));
    if (remote_) {
      remote_->fetch(nodes, seeds, out.x, out.y);
    } else {
      gather_features(shard_, nodes, out.x);
      out.y.resize(seeds.size());
      for (size_t r = 0; r < seeds.size(); ++r) out.y[r] = shard_.y[static_cast<size_t>(seeds[r] - shard_.begin)];
    }
    out.sample_ms = ms_since(start);
    return out;
  }

 private:
  const proto::Job& job_;
  const NodeShard& shard_;
  const int rank_, ranks_;
  SeedBatches seeds_;
  NeighborSampler sampler_;
  std::unique_ptr<ShardNeighbors> local_;
  std::unique_ptr<DistributedNeighbors> remote_;
};

// The batches of a run, made on a background thread up to `depth` ahead of
// the step that takes them; a request out of order restarts it there.
// depth 0: made when asked. The queue's memory: depth + 1 batches.
class Prefetcher {
 public:
  Prefetcher(BatchMaker& maker, int depth, int64_t epochs) : maker_(maker), depth_(depth), epochs_(epochs) {}
  ~Prefetcher() { stop(); }

  // Batch (epoch, index); `wait_ms` gets the time spent waiting for it.
  SampledBatch take(int64_t epoch, int64_t index, double& wait_ms) {
    const auto start = Clock::now();
    if (depth_ == 0) {
      SampledBatch b = maker_.make(epoch, index);
      wait_ms += ms_since(start);
      return b;
    }
    std::unique_lock lock(mutex_);
    if (!worker_.joinable() || next_ != std::pair{epoch, index}) {
      lock.unlock();
      restart(epoch, index);
      lock.lock();
    }
    ready_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty() && error_) {
      // The worker has ended: the next take starts a new one.
      next_ = {-1, -1};
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    SampledBatch b = std::move(queue_.front());
    queue_.pop_front();
    next_ = following(epoch, index);
    space_.notify_one();
    wait_ms += ms_since(start);
    return b;
  }

 private:
  std::pair<int64_t, int64_t> following(int64_t epoch, int64_t index) const {
    return index + 1 < maker_.batches_per_epoch() ? std::pair{epoch, index + 1} : std::pair{epoch + 1, int64_t{0}};
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    space_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  void restart(int64_t epoch, int64_t index) {
    stop();
    queue_.clear();
    stopping_ = false;
    error_ = nullptr;
    next_ = {epoch, index};
    worker_ = std::thread([this, epoch, index] { produce(epoch, index); });
  }

  void produce(int64_t epoch, int64_t index) {
    try {
      for (auto at = std::pair{epoch, index}; at.first < epochs_; at = following(at.first, at.second)) {
        SampledBatch b = maker_.make(at.first, at.second);
        std::unique_lock lock(mutex_);
        space_.wait(lock, [&] { return stopping_ || static_cast<int>(queue_.size()) < depth_; });
        if (stopping_) return;
        queue_.push_back(std::move(b));
        ready_.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      ready_.notify_one();
    }
  }

  BatchMaker& maker_;
  const int depth_;
  const int64_t epochs_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<SampledBatch> queue_;
  std::pair<int64_t, int64_t> next_{-1, -1};
  bool stopping_ = false;
  std::exception_ptr error_;
};

// Layer-wise full-neighbourhood inference on one rank: the model's
// program with every hop holding all nodes and every block all in-edges
// (docs/sampling.md, "Evaluation"), bound before each run (the steps bind
// their batches under the same names).
class LayerWise {
 public:
  LayerWise(const NodeShard& shard, const proto::Model& model, const Schema& schema, int hops,
            std::vector<std::string> outputs)
      : shard_(shard), model_(model), schema_(schema), hops_(hops), outputs_(std::move(outputs)) {
    const int64_t n = shard.num_nodes, e = static_cast<int64_t>(shard.indices.size());
    shape_.node_rows.assign(static_cast<size_t>(hops) + 1, n);
    shape_.edge_rows.assign(static_cast<size_t>(hops), e);
    shape_.self_loop_edges.assign(static_cast<size_t>(hops), e + n);
    shape_.graph_rows = 1;
    shape_.padded = false;
    schema_.node_sets[0].target = false;  // no eval loss: the step's metrics stay the training's
  }

  // The program (its parameters), built on first use.
  Network build() const { return build_module_inference(model_, schema_, shape_, false, outputs_); }

  std::vector<Tensor> run(Core& core, const runtime::RunContext& context) {
    const int64_t n = shard_.num_nodes;
    if (!edges_) {
      std::vector<int32_t> src(shard_.indices.begin(), shard_.indices.end()), dst(src.size());
      for (int64_t v = 0; v < n; ++v) {
        std::fill(dst.begin() + shard_.indptr[v], dst.begin() + shard_.indptr[v + 1], static_cast<int32_t>(v));
      }
      edges_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, n, n));
      for (int64_t v = 0; v < n; ++v) {  // the shard holds no loops: one per node
        src.push_back(static_cast<int32_t>(v));
        dst.push_back(static_cast<int32_t>(v));
      }
      loops_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, n, n));
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int64_t v = 0; v < n; ++v) ids[v] = static_cast<int32_t>(v);
      identity_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(ids, ids, n, n));
      program_ = core.compile(build().program, {});
    }
    auto& mem = core.memory();
    for (int h = 0; h < hops_; ++h) {
      mem.put(features_name(hop_set_name(h)), Tensor(DType::kF32, {n, 0}));
      core.bind_graph(block_set_name(h), edges_);
      core.bind_graph(self_loop_graph_name(block_set_name(h)), loops_);
      core.bind_graph(prefix_graph_name(block_set_name(h)), identity_);
    }
    mem.put(features_name(hop_set_name(hops_)), Tensor::from<float>(shard_.x, {n, shard_.num_features}));
    core.run(*program_, context);
    std::vector<Tensor> out;
    for (const std::string& name : outputs_) out.push_back(core.read(*program_, name));
    return out;
  }

 private:
  const NodeShard& shard_;
  const proto::Model& model_;
  Schema schema_;
  const int hops_;
  const std::vector<std::string> outputs_;
  BucketShape shape_;
  std::shared_ptr<const runtime::CompiledProgram> program_;
  std::shared_ptr<const Core::Adjacency> edges_, loops_, identity_;
};

// Layer-wise full-neighbourhood inference over node shards (many ranks):
// each rank computes its own nodes' rows of each layer from all their
// in-neighbours, whose rows of the layer before come from their owners
// (the halo: one exchange a layer). A chain of modules splits into layers:
// each convolution with the modules after it up to the next (the modules
// before the first go with it); other module graphs are not evaluated on
// many ranks. Collective: every rank runs it alike.
class ShardedLayerWise {
 public:
  // Whether the model splits into layers.
  static bool splits(const proto::Model& model, int hops) {
    std::string input = features_name(hop_set_name(hops));
    for (const proto::Module& m : model.module()) {
      if (m.input_size() != 1 || m.input(0) != input) return false;
      input = m.name();
    }
    return true;
  }

  ShardedLayerWise(const NodeShard& shard, const proto::Model& model, int hops, collectives::Communicator& comm)
      : shard_(shard), hops_(hops) {
    // The segments: convolution k and what follows it.
    int segment = -1;
    for (const proto::Module& m : model.module()) {
      const bool conv = m.has_gcn() || m.has_sage() || m.has_gat() || m.has_gin();
      if (conv || segment < 0) {
        if (conv && segment >= 0 && !segments_[static_cast<size_t>(segment)].has_conv) {
          // The modules before the first convolution stay with it.
        } else {
          segments_.emplace_back();
          ++segment;
        }
      }
      Segment& g = segments_[static_cast<size_t>(segment)];
      proto::Module copy = m;
      if (g.model.module_size() == 0) {
        copy.clear_input();
        copy.add_input(features_name(hop_set_name(1)));
      }
      if (conv) {
        g.has_conv = true;
        gcn_ = gcn_ || m.has_gcn();
        const std::string block = block_set_name(0);
        if (copy.has_gcn()) copy.mutable_gcn()->set_edges(block);
        if (copy.has_sage()) copy.mutable_sage()->set_edges(block);
        if (copy.has_gat()) copy.mutable_gat()->set_edges(block);
        if (copy.has_gin()) copy.mutable_gin()->set_edges(block);
      }
      *g.model.add_module() = std::move(copy);
      g.out = m.name();
    }
    // This rank's nodes first, then the halo (in-neighbours owned elsewhere).
    const int64_t owned = shard.owned();
    for (const int32_t u : shard.indices) {
      if (!shard.owns(u)) halo_.push_back(u);
    }
    std::sort(halo_.begin(), halo_.end());
    halo_.erase(std::unique(halo_.begin(), halo_.end()), halo_.end());
    exchange_ = std::make_unique<OwnerExchange>(halo_, shard.num_nodes, comm);
    const auto rows = owned + static_cast<int64_t>(halo_.size());
    std::vector<int32_t> src(shard.indices.size()), dst(shard.indices.size());
    for (int64_t v = 0; v < owned; ++v) {
      for (int64_t k = shard.indptr[v]; k < shard.indptr[v + 1]; ++k) {
        const int32_t u = shard.indices[static_cast<size_t>(k)];
        src[k] = shard.owns(u) ? static_cast<int32_t>(u - shard.begin)
                               : static_cast<int32_t>(owned + (std::lower_bound(halo_.begin(), halo_.end(), u) -
                                                               halo_.begin()));
        dst[k] = static_cast<int32_t>(v);
      }
    }
    const auto e = static_cast<int64_t>(src.size());
    edges_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, rows, owned));
    // GCN's weights with the graph's degrees (in-edges and the loop); the
    // halo's degrees from their owners.
    std::vector<int32_t> degree(static_cast<size_t>(owned));
    for (int64_t v = 0; v < owned; ++v) degree[v] = static_cast<int32_t>(shard.indptr[v + 1] - shard.indptr[v] + 1);
    std::vector<int32_t> asked(exchange_->asked().size());
    for (size_t i = 0; i < asked.size(); ++i) asked[i] = degree[exchange_->asked()[i] - shard.begin];
    const std::vector<int32_t> halo_degree = exchange_->rows<int32_t>(asked, 1);
    const auto degree_of = [&](int32_t r) {
      return static_cast<double>(r < owned ? degree[r] : halo_degree[static_cast<size_t>(r - owned)]);
    };
    for (int64_t v = 0; v < owned; ++v) {
      src.push_back(static_cast<int32_t>(v));
      dst.push_back(static_cast<int32_t>(v));
    }
    loops_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, rows, owned));
    norm_.resize(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      norm_[i] = static_cast<float>(1.0 / std::sqrt(degree_of(src[i])) / std::sqrt(degree_of(dst[i])));
    }
    std::vector<int32_t> ids(static_cast<size_t>(owned));
    std::iota(ids.begin(), ids.end(), 0);
    prefix_ = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(ids, ids, rows, owned));
    shape_.node_rows = {owned, rows};
    shape_.edge_rows = {e};
    shape_.self_loop_edges = {e + owned};
    shape_.graph_rows = 1;
    shape_.padded = false;
  }

  // The model's last rows of this rank's nodes, [owned, width].
  Tensor run(Core& core, const runtime::RunContext& context) {
    const int64_t owned = shard_.owned(), rows = shape_.node_rows[1];
    std::vector<float> x = shard_.x;  // [owned, F]: layer 0's input of this rank's nodes
    int64_t width = shard_.num_features;
    Tensor out;
    for (Segment& g : segments_) {
      if (!g.program) {
        g.schema = sampled_schema(1, width, 1);
        g.schema.node_sets[0].target = false;
        g.program = core.compile(build_module_inference(g.model, g.schema, shape_, false, {g.out}).program, {});
      }
      // The halo's rows of this input from their owners.
      std::vector<float> answers(exchange_->asked().size() * static_cast<size_t>(width));
      for (size_t i = 0; i < exchange_->asked().size(); ++i) {
        const int64_t r = exchange_->asked()[i] - shard_.begin;
        std::copy_n(x.begin() + r * width, width, answers.begin() + static_cast<int64_t>(i) * width);
      }
      const std::vector<float> halo = exchange_->rows<float>(answers, width);
      Tensor in(DType::kF32, {rows, width});
      auto iv = in.values<float>();
      std::copy(x.begin(), x.end(), iv.begin());
      std::copy(halo.begin(), halo.end(), iv.begin() + owned * width);
      auto& mem = core.memory();
      mem.put(features_name(hop_set_name(1)), std::move(in));
      mem.put(features_name(hop_set_name(0)), Tensor(DType::kF32, {owned, 0}));
      const std::string block = block_set_name(0);
      core.bind_graph(block, edges_);
      core.bind_graph(self_loop_graph_name(block), loops_);
      core.bind_graph(prefix_graph_name(block), prefix_);
      if (gcn_) mem.put(gcn_norm_name(self_loop_graph_name(block)), Tensor::from<float>(norm_, {shape_.self_loop_edges[0]}));
      core.run(*g.program, context);
      out = core.read(*g.program, g.out);
      width = out.shape()[1];
      const auto ov = out.values<float>();
      x.assign(ov.begin(), ov.end());
    }
    return out;
  }

 private:
  struct Segment {
    proto::Model model;
    Schema schema;
    bool has_conv = false;
    std::string out;
    std::shared_ptr<const runtime::CompiledProgram> program;
  };
  const NodeShard& shard_;
  const int hops_;
  std::vector<Segment> segments_;
  bool gcn_ = false;
  std::vector<int32_t> halo_;
  std::unique_ptr<OwnerExchange> exchange_;
  std::shared_ptr<const Core::Adjacency> edges_, loops_, prefix_;
  std::vector<float> norm_;
  BucketShape shape_;
};

class SampledSource final : public BatchSource {
 public:
  SampledSource(const proto::Job& job, const TrainOptions& options)
      : job_(job), comm_(options.communicator), replicated_(comm_ && comm_->size() > 1),
        rank_(comm_ ? comm_->rank() : 0), ranks_(comm_ ? comm_->size() : 1) {}

  ModelParameters load(Core& core) override;
  std::vector<std::string> resume_sections() const override { return {"model", "optimizer", "dataset", "sampling"}; }
  int64_t steps_per_epoch() const override { return maker_->batches_per_epoch(); }
  int64_t metric_slots() const override { return module_metric_slots(model_); }
  const runtime::CompiledProgram& prepare(Core& core, int64_t epoch, int64_t index) override;
  nlohmann::json summarize(std::span<const double> sums, int64_t steps, const runtime::Counters& counters,
                           EpochMetrics& m) const override;
  std::string progress(const EpochMetrics& m, const runtime::Counters& counters) const override {
    return fmt::format("loss {:.5f} train {:.4f} val {:.4f} test {:.4f} | {} steps, {:.1f} ms, sampler wait "
                       "{:.1f} ms, {} compiles, padding {:.1f}% rows, {:.1f}% edges",
                       m.loss, m.train_acc, m.val_acc, m.test_acc, m.step, m.ms, epoch_wait_ms_, counters.compiles,
                       padding_.rows_percent(), padding_.edges_percent());
  }
  std::set<std::string> persistent(const Core& core) const override;
  void finish(TrainResult& result, const Core& core) const override;

  // Layer-wise full-neighbourhood inference: every node's output of each
  // layer from all its in-neighbours, a layer at a time over the whole
  // graph (here, one rank: the whole graph's program), then the validation
  // and test accuracies.
  void evaluate(Core& core, const runtime::RunContext& context) override;
  bool keeps_best() const override { return true; }
  bool has_validation() const override {
    return (replicated_ ? sharded_eval_ : whole_eval_) && !shard_.val.empty();
  }
  bool writes_logits() const override { return !replicated_; }
  void write_logits(Core& core, const std::filesystem::path& path, const runtime::RunContext& context) override;

 private:
  void evaluate_sharded(Core& core, const runtime::RunContext& context);
  const runtime::CompiledProgram& program(Core& core, const BucketShape& shape);
  // Every node's logits (the model's last module) by layer-wise inference.
  Tensor infer_all(Core& core, const runtime::RunContext& context);

  const proto::Job& job_;
  std::shared_ptr<collectives::Communicator> comm_;
  const bool replicated_;
  const int rank_, ranks_;
  NodeShard shard_;
  proto::Model model_;
  Schema schema_;
  bool gcn_ = false;
  std::unique_ptr<BatchMaker> maker_;
  std::unique_ptr<Prefetcher> prefetch_;
  std::vector<ParamDecl> params_;
  std::map<std::vector<int64_t>, std::shared_ptr<const runtime::CompiledProgram>> programs_;
  PaddingStats padding_;
  double compile_ms_ = 0, cache_load_ms_ = 0, sampler_wait_ms_ = 0, sample_ms_ = 0;
  // The waits and sampling time at the last summary: the epoch's are the differences.
  mutable double wait_before_ = 0, sample_before_ = 0, epoch_wait_ms_ = 0;
  mutable int64_t bytes_before_ = 0;
  std::unique_ptr<LayerWise> layer_wise_;
  bool sharded_eval_ = false;  // many ranks: the model splits into layers
  bool whole_eval_ = false;    // one rank: the whole graph fits one program
  std::unique_ptr<ShardedLayerWise> sharded_;
  double val_acc_ = 0, test_acc_ = 0, infer_ms_ = 0;
};

// The smallest bucket of an L-hop model: a program to check the model on
// and declare its parameters with.
BucketShape smallest_bucket(int hops) {
  BucketShape s;
  for (int h = 0; h <= hops; ++h) s.node_rows.push_back(2 * (h + 1));
  s.edge_rows.assign(static_cast<size_t>(hops), 1);
  s.graph_rows = 1;
  return s;
}

ModelParameters SampledSource::load(Core&) {
  ModelParameters model;
  agreed_step(comm_, "loading the graph", [&] {
    const auto& fanouts = job_.sampling().fanout();
    check_fanouts(std::vector<int>(fanouts.begin(), fanouts.end()), "sampling.fanout");
    if (!(job_.sampling().growth() > 1)) {
      throw std::invalid_argument(fmt::format("sampling.growth = {}: the ladder's ratio is > 1",
                                              job_.sampling().growth()));
    }
    if (job_.sampling().prefetch() < 0) {
      throw std::invalid_argument(fmt::format("sampling.prefetch = {} is below 0", job_.sampling().prefetch()));
    }
    shard_ = load_node_shard(job_, rank_, ranks_);
    // Dropout keys an edge by its destination's id times 2^32 (sampled_batches.cc).
    if (shard_.num_nodes >= (int64_t{1} << 30)) {
      throw std::invalid_argument(fmt::format("the graph has {} nodes; sampled training takes fewer than 2^30",
                                              shard_.num_nodes));
    }
    const int hops = fanouts.size();
    model_ = sampled_model(job_.model(), hops, shard_.num_classes);
    schema_ = sampled_schema(hops, shard_.num_features, shard_.num_classes);
    for (const auto& m : model_.module()) gcn_ = gcn_ || m.has_gcn();
    maker_ = std::make_unique<BatchMaker>(job_, shard_, comm_.get());
    Network first = build_module_train_step(model_, schema_, smallest_bucket(hops), replicated_);
    model = {first.params, std::move(first.aliases), std::move(first.buffers)};
    params_ = std::move(first.params);
  });
  if (replicated_) check_same(*comm_, shard_.num_nodes, "graphs (the same dataset.path gave other node counts)");
  sharded_eval_ = replicated_ && ShardedLayerWise::splits(model_, job_.sampling().fanout_size());
  // One rank evaluates with the whole graph's edges and loops in one 32-bit
  // indexed graph; beyond, the evaluation is left to many ranks.
  whole_eval_ = !replicated_ && static_cast<int64_t>(shard_.indices.size()) + shard_.num_nodes < (int64_t{1} << 31);
  if (!replicated_ && !whole_eval_ && rank_ == 0) {
    spdlog::warn("the graph's {} edges are too many to evaluate on one rank (2^31 with the loops): no validation; "
                 "run on more ranks to evaluate", shard_.indices.size());
  }
  // On many ranks the sampler's exchanges are collectives, made on the
  // thread that runs the steps (MPI is initialised for one thread's calls).
  prefetch_ = std::make_unique<Prefetcher>(*maker_, replicated_ ? 0 : job_.sampling().prefetch(),
                                           job_.schedule().epochs());
  if (rank_ == 0) {
    spdlog::info("sampled graph '{}': {} nodes, {} in-edges here, {} features, {} classes; {} training seeds, "
                 "batches of {} ({} per epoch{}), fanouts [{}]{}{}, {} parameters",
                 shard_.name, shard_.num_nodes, shard_.indices.size(), shard_.num_features, shard_.num_classes,
                 shard_.train.size(), job_.sampling().batch_size(), maker_->batches_per_epoch(),
                 replicated_ ? fmt::format(", each split over {} ranks; sampled in the step{}", ranks_,
                                           ShardedLayerWise::splits(model_, job_.sampling().fanout_size())
                                               ? std::string()
                                               : "; a module graph that is no chain is not evaluated on many ranks")
                             : std::string(),
                 fmt::join(job_.sampling().fanout(), ", "), job_.sampling().replace() ? ", with replacement" : "",
                 job_.sampling().disjoint() ? ", disjoint trees" : "", params_.size());
  }
  return model;
}

const runtime::CompiledProgram& SampledSource::program(Core& core, const BucketShape& shape) {
  std::vector<int64_t> key = shape.node_rows;
  key.insert(key.end(), shape.edge_rows.begin(), shape.edge_rows.end());
  auto& p = programs_[key];
  if (!p) {
    const auto start = Clock::now();
    const int64_t compiles = core.counters().compiles;
    Network net = build_module_train_step(model_, schema_, shape, replicated_);
    runtime::CompileOptions o;
    o.train = runtime::TrainStep{net.loss, net.param_ids, optimizer_config(job_.optimizer())};
    o.bucket_bytes = static_cast<int64_t>(job_.partition().bucket_mb() * (1 << 20));
    p = core.compile(std::move(net.program), o);
    (core.counters().compiles > compiles ? compile_ms_ : cache_load_ms_) += ms_since(start);
  }
  return *p;
}

const runtime::CompiledProgram& SampledSource::prepare(Core& core, int64_t epoch, int64_t index) {
  const runtime::CompiledProgram* p = nullptr;
  // Sampling first: on many ranks it exchanges with the others, so it is
  // no part of the agreed (local) step.
  const SampledBatch batch = prefetch_->take(epoch, index, sampler_wait_ms_);
  sample_ms_ += batch.sample_ms;
  agreed_step(comm_, "preparing the sampled batch", [&] {
    const BucketShape shape = sampled_bucket(batch.blocks, job_.sampling().growth());
    p = &program(core, shape);
    bind_sampled(core, batch, shape, shard_.num_nodes, shard_.num_features, gcn_, &padding_);
  });
  return *p;
}

nlohmann::json SampledSource::summarize(std::span<const double> v, int64_t steps, const runtime::Counters&,
                                        EpochMetrics& m) const {
  const auto mean = [&](double sum) { return steps > 0 ? sum / static_cast<double>(steps) : 0.0; };
  m.loss = mean(v[0]);
  const auto slot = static_cast<size_t>(correct_slot(model_, 0));
  if (v[slot + 1] > 0) m.train_acc = v[slot] / v[slot + 1];
  m.val_acc = val_acc_;
  m.test_acc = test_acc_;
  m.infer_ms = infer_ms_;
  epoch_wait_ms_ = sampler_wait_ms_ - wait_before_;
  const double sampled = sample_ms_ - sample_before_;
  wait_before_ = sampler_wait_ms_;
  sample_before_ = sample_ms_;
  const int64_t bytes = maker_->bytes_sent() - bytes_before_;
  bytes_before_ = maker_->bytes_sent();
  return {{"step", m.step},
          {"train_acc", m.train_acc},
          {"val_acc", m.val_acc},
          {"test_acc", m.test_acc},
          {"infer_ms", m.infer_ms},  // the evaluation's
          {"buckets_used", programs_.size()},
          {"padding_rows_percent", padding_.rows_percent()},
          {"padding_edges_percent", padding_.edges_percent()},
          {"sampler_wait_ms", epoch_wait_ms_},
          {"sampler_bytes_sent", bytes},  // this rank's, to the others, in the epoch
          {"sample_ms", sampled},
          {"compile_ms", compile_ms_},
          {"cache_load_ms", cache_load_ms_}};
}

std::set<std::string> SampledSource::persistent(const Core&) const { return persistent_names(programs_, params_); }

void SampledSource::finish(TrainResult& result, const Core&) const {
  result.buckets_used = static_cast<int64_t>(programs_.size());
  result.buckets = result.buckets_used;
  result.padding_rows_percent = padding_.rows_percent();
  result.padding_edges_percent = padding_.edges_percent();
  result.compile_ms = compile_ms_;
  result.cache_load_ms = cache_load_ms_;
  spdlog::info("{} steps; {} compiles ({:.1f} ms) for {} buckets; padding {:.1f}% of rows, {:.1f}% of edges; "
               "sampling {:.1f} ms, of which the steps waited {:.1f} ms",
               result.steps, result.counters.compiles, compile_ms_, programs_.size(), padding_.rows_percent(),
               padding_.edges_percent(), sample_ms_, sampler_wait_ms_);
}

Tensor SampledSource::infer_all(Core& core, const runtime::RunContext& context) {
  if (!layer_wise_) {
    layer_wise_ = std::make_unique<LayerWise>(shard_, model_, schema_, job_.sampling().fanout_size(),
                                              std::vector<std::string>{model_.loss_term(0).input()});
  }
  return std::move(layer_wise_->run(core, context).front());
}

void SampledSource::evaluate(Core& core, const runtime::RunContext& context) {
  if (replicated_ || !whole_eval_) {
    if (sharded_eval_) evaluate_sharded(core, context);
    return;
  }
  const auto start = Clock::now();
  const Tensor logits = infer_all(core, context);
  const auto v = logits.values<float>();
  const int64_t c = logits.shape()[1];
  const auto accuracy = [&](const std::vector<int32_t>& nodes) {
    if (nodes.empty()) return 0.0;
    int64_t correct = 0;
    for (const int32_t node : nodes) {
      const float* row = v.data() + static_cast<int64_t>(node) * c;
      correct += std::max_element(row, row + c) - row == shard_.y[node - shard_.begin];
    }
    return static_cast<double>(correct) / static_cast<double>(nodes.size());
  };
  val_acc_ = accuracy(shard_.val);
  test_acc_ = accuracy(shard_.test);
  infer_ms_ = ms_since(start);
}

// Each rank its own nodes' logits; the correct counts summed over the ranks.
void SampledSource::evaluate_sharded(Core& core, const runtime::RunContext& context) {
  const auto start = Clock::now();
  if (!sharded_) sharded_ = std::make_unique<ShardedLayerWise>(shard_, model_, job_.sampling().fanout_size(), *comm_);
  const Tensor logits = sharded_->run(core, context);
  const auto v = logits.values<float>();
  const int64_t c = logits.shape()[1];
  std::vector<double> counts(4, 0.0);  // val correct, val nodes, test correct, test nodes
  const auto count = [&](const std::vector<int32_t>& nodes, size_t at) {
    for (const int32_t node : nodes) {
      if (!shard_.owns(node)) continue;
      const float* row = v.data() + (node - shard_.begin) * c;
      counts[at] += std::max_element(row, row + c) - row == shard_.y[node - shard_.begin];
      counts[at + 1] += 1;
    }
  };
  count(shard_.val, 0);
  count(shard_.test, 2);
  comm_->allreduce<double>(counts);
  val_acc_ = counts[1] > 0 ? counts[0] / counts[1] : 0;
  test_acc_ = counts[3] > 0 ? counts[2] / counts[3] : 0;
  infer_ms_ = ms_since(start);
}

// Log-probabilities, as the full-graph jobs write them.
void SampledSource::write_logits(Core& core, const std::filesystem::path& path, const runtime::RunContext& context) {
  if (!whole_eval_) {
    spdlog::warn("--logits-out: the graph is too large to infer on one rank; nothing written to {}", path.string());
    return;
  }
  Tensor logits = infer_all(core, context);
  auto v = logits.values<float>();
  const int64_t c = logits.shape()[1];
  for (int64_t r = 0; r < logits.shape()[0]; ++r) {
    float* row = v.data() + r * c;
    const double top = *std::max_element(row, row + c);
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(row[k]) - top);
    const double log_sum = top + std::log(sum);
    for (int64_t k = 0; k < c; ++k) row[k] = static_cast<float>(row[k] - log_sum);
  }
  write_npy(path, logits);
}

}  // namespace

bool is_sampled_job(const proto::Job& job) { return job.sampling().fanout_size() > 0; }

proto::Model sampled_model(const proto::Model& model, int hops, int64_t classes) {
  if (model.module_size() > 0) return model;
  int total = 0;
  for (const proto::Layer& l : model.layer()) {
    const auto t = l.type();
    total += t == proto::Layer::GCN || t == proto::Layer::SAGE || t == proto::Layer::GAT || t == proto::Layer::GIN;
  }
  if (total != hops) {
    throw std::invalid_argument(fmt::format(
        "model.layer has {} convolutions, sampling.fanout lists {} hops: one hop per convolution", total, hops));
  }
  proto::Model out;
  LayerNames names;
  std::string input = features_name(hop_set_name(hops));
  int convs = 0;
  for (int i = 0; i < model.layer_size(); ++i) {
    const proto::Layer& l = model.layer(i);
    proto::Module m = as_module(l, l.out() > 0 ? l.out() : classes, i, names);
    const std::string block = block_set_name(hops - 1 - convs);
    switch (m.kind_case()) {
      case proto::Module::kGcn: m.mutable_gcn()->set_edges(block); ++convs; break;
      case proto::Module::kSage: m.mutable_sage()->set_edges(block); ++convs; break;
      case proto::Module::kGat: m.mutable_gat()->set_edges(block); ++convs; break;
      case proto::Module::kGin: m.mutable_gin()->set_edges(block); ++convs; break;
      default: break;
    }
    m.add_input(input);
    input = m.name();
    *out.add_module() = std::move(m);
  }
  auto& t = *out.add_loss_term();
  t.set_kind(proto::LossTerm::CROSS_ENTROPY);
  t.set_input(input);
  t.set_target(target_name(hop_set_name(0)));
  return out;
}

std::unique_ptr<BatchSource> make_sampled_source(const proto::Job& job, const TrainOptions& options) {
  return std::make_unique<SampledSource>(job, options);
}

InferResult infer_sampled(const proto::Job& job, const InferOptions& options) {
  validate(job);
  if (options.communicator && options.communicator->size() > 1) {
    throw std::invalid_argument("gnnrt infer on a sampled job runs on one rank in this version");
  }
  if (options.params_in.empty()) throw std::invalid_argument("gnnrt infer needs --params-in (the trained parameters)");
  if (options.out.empty()) throw std::invalid_argument("gnnrt infer needs --out (a folder for the outputs)");
  const NodeShard shard = load_node_shard(job, 0, 1);
  const int hops = job.sampling().fanout_size();
  const proto::Model model = sampled_model(job.model(), hops, shard.num_classes);
  const Schema schema = sampled_schema(hops, shard.num_features, shard.num_classes);
  std::vector<std::string> outputs = options.outputs;
  if (outputs.empty()) outputs.push_back(model.loss_term(0).input());
  for (const std::string& name : outputs) {
    if (std::none_of(model.module().begin(), model.module().end(),
                     [&](const proto::Module& m) { return m.name() == name; })) {
      throw std::invalid_argument(fmt::format("output '{}' is no module of the model", name));
    }
  }
  runtime::Core core(device_profile(job, options), core_options(job, options));
  LayerWise layer_wise(shard, model, schema, hops, outputs);
  const Network probe = layer_wise.build();
  load_state_dict(core, probe.params, probe.aliases, probe.buffers, options.params_in, !options.params_non_strict,
                  options.params_scope);
  initialize_missing_parameters(core, probe.params, job.seed());
  const auto start = Clock::now();
  const std::vector<Tensor> values = layer_wise.run(core, {.step = 0, .lr = 0, .seed = job.seed()});
  InferResult result;
  result.graphs = 1;
  result.batches = 1;
  result.latency_median_ms = result.latency_p90_ms = ms_since(start);
  std::filesystem::create_directories(options.out);
  for (size_t i = 0; i < outputs.size(); ++i) {
    write_npy(options.out / (outputs[i] + ".npy"), values[i]);
    result.shapes[outputs[i]] = values[i].shape();
  }
  result.counters = core.counters();
  return result;
}

}  // namespace gnnrt::model
