#include "model/training/sampled_source.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
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
#include "collectives/environment.h"
#include "model/data/node_shard_files.h"
#include "model/data/products.h"
#include "model/modules/module_graph.h"
#include "model/sampling/distributed_neighbors.h"
#include "model/sampling/neighbor_sampler.h"
#include "model/sampling/seed_batches.h"
#include "model/training/distributed.h"
#include "model/training/layer_wise.h"
#include "model/training/link_task.h"
#include "model/training/sampled_batches.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"
#include "runtime/npy.h"
#include "runtime/passes.h"  // CapacityError

namespace gnnrt::model {
namespace {

using runtime::Core;
using Clock = std::chrono::steady_clock;

// Logged when a model is not evaluated on many ranks (ShardedLayerWise::splits).
constexpr const char* kNotSharded = "a module graph that is no chain of row-wise modules is not evaluated on many ranks";

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Rank `rank`'s shard of the graph made in memory: generated (the
// products-like graph) or cut from the loaded dataset.
NodeShard make_node_shard(const proto::Job& job, int rank, int ranks) {
  const bool metis = metis_ownership(job, ranks);
  if (generates_products(job)) {
    if (metis) {
      throw std::invalid_argument("sampling.ownership = METIS needs a loaded dataset: the products-like graph is "
                                  "generated per rank, and no rank holds the whole graph to partition");
    }
    return make_products_shard(parse_products_spec(job.dataset().path()), rank, ranks);
  }
  const Dataset d = load_sampled_dataset(job);
  return node_shard(d, rank, ranks, job.sampling().undirected(),
                    metis ? metis_owners(d, ranks, job.seed()) : std::vector<int32_t>{});
}

// This rank's shard: read from the job's shards (partition.shards), or made.
NodeShard load_node_shard(const proto::Job& job, int rank, int ranks) {
  if (job.partition().shards().empty()) return make_node_shard(job, rank, ranks);
  const NodeShard s = read_node_shard(job.partition().shards(), rank, ranks, job, !generates_products(job));
  if (rank == 0) spdlog::info("read node shards of {} ranks from {}", ranks, job.partition().shards());
  return s;
}

// Samples a rank's share of global batches in order, with the features
// and labels (or, for link prediction, the pairs): from the shard itself on
// one rank (the whole graph), from the nodes' owners on many (collective:
// every rank makes every batch).
class BatchMaker {
 public:
  BatchMaker(const proto::Job& job, const NodeShard& shard, collectives::Communicator* comm,
             const LinkSplit* links = nullptr)
      : job_(job), shard_(shard), rank_(comm ? comm->rank() : 0), ranks_(comm ? comm->size() : 1),
        sampler_({{job.sampling().fanout().begin(), job.sampling().fanout().end()}, job.sampling().replace(),
                  job.sampling().disjoint()},
                 shard.num_nodes) {
    const int threads = std::max(1, job.sampling().threads());
    if (comm && ranks_ > 1) {
      remote_ = std::make_unique<DistributedNeighbors>(shard, *comm, threads);
    } else {
      local_ = std::make_unique<ShardNeighbors>(shard, threads);
    }
    if (links) {
      links_ = std::make_unique<LinkBatches>(*links, job);
    } else {
      seeds_.emplace(shard.train, job.sampling().batch_size(), job.sampling().shuffle(), job.sampling().drop_last(),
                     job.seed());
    }
  }

  int64_t batches_per_epoch() const { return links_ ? links_->batches_per_epoch() : seeds_->batches_per_epoch(); }

  SampledBatch make(int64_t epoch, int64_t index) {
    const auto start = Clock::now();
    const int64_t bytes_before = remote_ ? remote_->bytes_sent() : 0;
    SampledBatch out;
    out.epoch = epoch;
    out.index = index;
    std::span<const int32_t> mine;
    std::vector<int32_t> endpoints;
    if (links_) {
      links_->make(epoch, index, rank_, ranks_, endpoints, out);
      mine = endpoints;
    } else {
      const auto global = seeds_->batch(epoch, index);
      out.global_seeds = static_cast<int64_t>(global.size());
      // The batch's seeds by owner, then cut evenly: a rank's share is as
      // much of its own seeds as the balance allows, so their first draws
      // and labels need no exchange. Each seed's tree is the same on any
      // rank (the draws are keyed by node), so only the gradient's summation
      // order depends on it.
      by_owner_.assign(global.begin(), global.end());
      if (ranks_ > 1) {
        std::stable_sort(by_owner_.begin(), by_owner_.end(), [&](int32_t a, int32_t b) {
          return shard_.owner_of(a, ranks_) < shard_.owner_of(b, ranks_);
        });
      }
      mine = SeedBatches::share(std::span<const int32_t>(by_owner_), rank_, ranks_);
    }
    NeighborSource& source = remote_ ? static_cast<NeighborSource&>(*remote_) : *local_;
    out.blocks = sampler_.sample(mine, {job_.seed(), epoch, index}, source);
    const SampledBlocks& b = out.blocks;
    const auto nodes = std::span<const int32_t>(b.nodes).first(static_cast<size_t>(b.frontier.back()));
    const auto seeds = nodes.first(static_cast<size_t>(b.frontier[0]));
    // The pairs' endpoints as the seeds' rows.
    for (auto* ends : {&out.pairs.src, &out.pairs.dst}) {
      for (int32_t& r : *ends) r = b.seed_rows[static_cast<size_t>(r)];
    }
    if (remote_) {
      // A link batch's seeds have no labels to fetch.
      remote_->fetch(nodes, links_ ? std::span<const int32_t>() : seeds, out.x, out.y);
    } else if (links_) {
      gather_features(shard_, nodes, out.x);
    } else {
      gather_features(shard_, nodes, out.x);
      out.y.resize(seeds.size());
      for (size_t r = 0; r < seeds.size(); ++r) out.y[r] = shard_.y[static_cast<size_t>(shard_.local(seeds[r]))];
    }
    out.sample_ms = ms_since(start);
    out.bytes_sent = remote_ ? remote_->bytes_sent() - bytes_before : 0;
    return out;
  }

 private:
  const proto::Job& job_;
  const NodeShard& shard_;
  const int rank_, ranks_;
  NeighborSampler sampler_;
  std::optional<SeedBatches> seeds_;
  std::vector<int32_t> by_owner_;  // the batch being made, its seeds by owner
  std::unique_ptr<LinkBatches> links_;
  std::unique_ptr<ShardNeighbors> local_;
  std::unique_ptr<DistributedNeighbors> remote_;
};

// The batches of a run, made on a background thread up to `depth` ahead of
// the step that takes them (depth + 1 made; on many ranks over a
// communicator of their own); a request out of order restarts it there.
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
        // Stopped, it fills the queue first: then every rank has made the same
        // batches (depth + 1 beyond those taken, which the ranks took alike),
        // so no rank's exchange waits for a rank that stopped sooner.
        if (stopping_ && static_cast<int>(queue_.size()) >= depth_) return;
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

class SampledSource final : public BatchSource {
 public:
  SampledSource(const proto::Job& job, const TrainOptions& options)
      : job_(link_job(job)), comm_(options.communicator), replicated_(comm_ && comm_->size() > 1),
        rank_(comm_ ? comm_->rank() : 0), ranks_(comm_ ? comm_->size() : 1), link_(is_link_job(job)) {}

  ModelParameters load(Core& core) override;
  std::vector<std::string> resume_sections() const override { return {"model", "optimizer", "dataset", "sampling"}; }
  int64_t steps_per_epoch() const override { return maker_->batches_per_epoch(); }
  int64_t metric_slots() const override { return module_metric_slots(model_); }
  const runtime::CompiledProgram& prepare(Core& core, int64_t epoch, int64_t index) override;
  nlohmann::json summarize(std::span<const double> sums, int64_t steps, const runtime::Counters& counters,
                           EpochMetrics& m) const override;
  std::string progress(const EpochMetrics& m, const runtime::Counters& counters) const override {
    const std::string scores =
        link_ ? fmt::format("val auc {:.4f} test auc {:.4f} hits@{} {:.4f} mrr {:.4f}", m.val_acc, m.test_acc,
                            job_.link().hits_k(), test_links_.hits, test_links_.mrr)
              : fmt::format("train {:.4f} val {:.4f} test {:.4f}", m.train_acc, m.val_acc, m.test_acc);
    return fmt::format("loss {:.5f} {} | {} steps, {:.1f} ms, sampler wait {:.1f} ms, {} compiles, padding {:.1f}% "
                       "rows, {:.1f}% edges",
                       m.loss, scores, m.step, m.ms, epoch_wait_ms_, counters.compiles, padding_.rows_percent(),
                       padding_.edges_percent());
  }
  std::set<std::string> persistent(const Core& core) const override;
  void finish(TrainResult& result, const Core& core) const override;

  // Layer-wise full-neighbourhood inference: every node's output of each
  // layer from all its in-neighbours, a layer at a time over the whole
  // graph (one rank: the whole graph's program when it fits the core, else
  // ShardedLayerWise over the one rank), then the validation and test
  // accuracies.
  void evaluate(Core& core, const runtime::RunContext& context) override;
  bool keeps_best() const override { return true; }
  bool has_validation() const override {
    if (link_) return (whole_eval_ || sharded_eval_) && links_->val_pairs.size() > 0;
    return (whole_eval_ || sharded_eval_) && !shard_.val.empty();
  }
  bool writes_logits() const override { return !replicated_ && !link_; }
  void write_logits(Core& core, const std::filesystem::path& path, const runtime::RunContext& context) override;

 private:
  void evaluate_sharded(Core& core, const runtime::RunContext& context);
  // Link prediction: the validation and test pairs' scores by layer-wise
  // inference over their message-passing graphs (one rank: the whole
  // graph's program; many: over the shards, each rank its share of pairs).
  void evaluate_links(Core& core, const runtime::RunContext& context);
  const runtime::CompiledProgram& program(Core& core, const BucketShape& shape);
  // This rank's nodes' logits (the model's last module) by layer-wise
  // inference: the whole graph's program (one rank, whole_eval_), else a
  // layer at a time over the shards (ShardedLayerWise).
  Tensor infer_all(Core& core, const runtime::RunContext& context);
  // The whole graph's program (LayerWise), made on first use.
  LayerWise& whole_graph();

  const proto::Job job_;
  std::shared_ptr<collectives::Communicator> comm_;
  // The sampler's own communicator (many ranks, sampling ahead of the step).
  std::shared_ptr<collectives::Communicator> sampler_comm_;
  bool ahead_ = true;
  const bool replicated_;
  const int rank_, ranks_;
  const bool link_;
  std::unique_ptr<LinkGraphs> links_;
  std::unique_ptr<LayerWise> val_links_eval_, test_links_eval_;
  // Many ranks: a layer chain's link model in two, scored over the shards.
  std::optional<LinkModelParts> link_parts_;
  std::unique_ptr<ShardedLinkScores> val_links_sharded_, test_links_sharded_;
  LinkScores val_links_, test_links_;
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
  // This rank's sampled counts, for the message volume's prediction
  // (docs/sampling.md): the drawing frontiers' rows (hops 0 .. L-1 summed),
  // drawn edges, nodes (hop L), seeds, and the bytes sent making them (on
  // the prefetch thread; counted here when taken); and at the last summary.
  struct Counts {
    int64_t frontier_rows = 0, edges = 0, nodes = 0, seeds = 0, bytes_sent = 0;
    void add(const SampledBatch& batch) {
      const SampledBlocks& b = batch.blocks;
      for (size_t h = 0; h + 1 < b.frontier.size(); ++h) frontier_rows += b.frontier[h];
      for (const Block& k : b.blocks) edges += static_cast<int64_t>(k.src.size());
      nodes += b.frontier.back();
      seeds += b.frontier.front();
      bytes_sent += batch.bytes_sent;
    }
    Counts since(const Counts& o) const {
      return {frontier_rows - o.frontier_rows, edges - o.edges, nodes - o.nodes, seeds - o.seeds,
              bytes_sent - o.bytes_sent};
    }
  };
  Counts counts_;
  mutable Counts counts_before_;
  std::unique_ptr<LayerWise> layer_wise_;
  // Many ranks, or one whose core cannot hold the whole program: a layer at
  // a time (the model splits into layers).
  bool sharded_eval_ = false;
  bool whole_eval_ = false;  // one rank: the whole graph in one program
  std::unique_ptr<ShardedLayerWise> sharded_;
  double val_acc_ = 0, test_acc_ = 0, infer_ms_ = 0;
};

// This host's cores over the ranks on it (Open MPI's local size; 1 rank
// without it). GNNRT_SAMPLE_AHEAD=1 counts them as plenty (tests).
int64_t cores_per_rank() {
  if (const char* ahead = std::getenv("GNNRT_SAMPLE_AHEAD"); ahead != nullptr && std::string(ahead) == "1") {
    return std::numeric_limits<int64_t>::max();
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t ranks = local != nullptr ? std::max(1L, std::strtol(local, nullptr, 10)) : 1;
  return std::max<int64_t>(1, std::thread::hardware_concurrency()) / ranks;
}

// The smallest bucket of an L-hop model: a program to check the model on
// and declare its parameters with.
BucketShape smallest_bucket(int hops, bool link) {
  BucketShape s;
  for (int h = 0; h <= hops; ++h) s.node_rows.push_back(2 * (h + 1));
  s.edge_rows.assign(static_cast<size_t>(hops) + (link ? 1 : 0), 1);
  s.graph_rows = 1;
  return s;
}

ModelParameters SampledSource::load(Core& core) {
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
    if (link_) {
      links_ = std::make_unique<LinkGraphs>(load_link_graphs(job_, rank_, ranks_));
      shard_ = std::move(links_->train);
    } else {
      shard_ = load_node_shard(job_, rank_, ranks_);
    }
    // Dropout keys an edge by its destination's id times 2^32 (sampled_batches.cc).
    if (shard_.num_nodes >= (int64_t{1} << 30)) {
      throw std::invalid_argument(fmt::format("the graph has {} nodes; sampled training takes fewer than 2^30",
                                              shard_.num_nodes));
    }
    const int hops = fanouts.size();
    model_ = link_ ? link_model(job_.model(), hops, job_.link()) : sampled_model(job_.model(), hops, shard_.num_classes);
    schema_ = sampled_schema(hops, shard_.num_features, shard_.num_classes, link_);
    for (const auto& m : model_.module()) gcn_ = gcn_ || m.has_gcn();
    Network first = build_module_train_step(model_, schema_, smallest_bucket(hops, link_), replicated_);
    model = {first.params, std::move(first.aliases), std::move(first.buffers)};
    params_ = std::move(first.params);
  });
  if (replicated_) check_same(*comm_, shard_.num_nodes, "graphs (the same dataset.path gave other node counts)");
  // On many ranks the sampler's exchanges run on the prefetch thread over a
  // communicator of their own when MPI takes calls from several threads and
  // a rank has a core to spare for it (with one core a rank, the thread only
  // takes the step's core: bench/README.md); otherwise in the step, on the
  // training's. Collective: after the agreed load, every rank alike.
  ahead_ = !replicated_ ||
           (job_.sampling().prefetch() > 0 && collectives::mpi_thread_multiple() && cores_per_rank() >= 2);
  if (replicated_ && ahead_) sampler_comm_ = std::make_shared<collectives::Communicator>(*comm_->split(0, rank_));
  maker_ = std::make_unique<BatchMaker>(job_, shard_, sampler_comm_ ? sampler_comm_.get() : comm_.get(),
                                        link_ ? &links_->split : nullptr);
  if (link_ && replicated_) link_parts_ = split_link_model(job_.model(), model_, job_.sampling().fanout_size());
  sharded_eval_ = replicated_ && (link_ ? link_parts_ && ShardedLayerWise::splits(link_parts_->embeddings,
                                                                                  job_.sampling().fanout_size())
                                        : ShardedLayerWise::splits(model_, job_.sampling().fanout_size()));
  // One rank evaluates with the whole graph's edges and loops in one 32-bit
  // indexed graph; beyond, the evaluation is left to many ranks.
  whole_eval_ = !replicated_ && static_cast<int64_t>(shard_.indices.size()) + shard_.num_nodes < (int64_t{1} << 31);
  if (!replicated_ && !whole_eval_ && rank_ == 0) {
    spdlog::warn("the graph's {} edges are too many to evaluate on one rank (2^31 with the loops): no validation; "
                 "run on more ranks to evaluate", shard_.indices.size());
  }
  // One rank evaluates a node model with one program over the whole graph
  // when it fits the core; else a layer at a time as many ranks do
  // (ShardedLayerWise over this one rank), found out before any training.
  if (whole_eval_ && !link_) {
    try {
      whole_graph().compile(core);
    } catch (const runtime::CapacityError& e) {
      layer_wise_.reset();
      whole_eval_ = false;
      sharded_eval_ = comm_ && ShardedLayerWise::splits(model_, job_.sampling().fanout_size());
      if (sharded_eval_) {
        spdlog::info("the whole graph's evaluation program does not fit one core ({}): evaluating a layer at a time",
                     e.what());
      } else {
        spdlog::warn("no validation: {}; {}", e.what(),
                     comm_ ? kNotSharded : "no communicator to evaluate a layer at a time on");
      }
    }
  }
  prefetch_ = std::make_unique<Prefetcher>(*maker_, ahead_ ? job_.sampling().prefetch() : 0,
                                           job_.schedule().epochs());
  if (rank_ == 0) {
    spdlog::info("sampled graph '{}': {} nodes, {} in-edges here, {} features, {} classes; {}, "
                 "{} batches per epoch{}, fanouts [{}]{}{}, {} parameters",
                 shard_.name, shard_.num_nodes, shard_.indices.size(), shard_.num_features, shard_.num_classes,
                 link_ ? std::string("link prediction")
                       : fmt::format("{} training seeds in batches of {}", shard_.train.size(),
                                     job_.sampling().batch_size()),
                 maker_->batches_per_epoch(),
                 replicated_ ? fmt::format(", each split over {} ranks; sampled {}{}", ranks_,
                                           ahead_ ? "ahead of the step" : "in the step",
                                           sharded_eval_ ? std::string() : std::string("; ") + kNotSharded)
                             : std::string(),
                 fmt::join(job_.sampling().fanout(), ", "), job_.sampling().replace() ? ", with replacement" : "",
                 job_.sampling().disjoint() ? ", disjoint trees" : "", params_.size());
    if (link_) {
      const LinkSplit& s = links_->split;
      spdlog::info("link prediction: {} training edges ({} supervising, batches of {} with {} negatives per "
                   "positive), {} validation and {} test edges with {} and {} negatives; {} decoder{}",
                   s.train.size(), s.train_supervision.size(), std::min<int64_t>(job_.sampling().batch_size(),
                   s.train_supervision.size()), job_.link().negative_ratio(), s.val.size(), s.test.size(),
                   s.val_negatives.size(), s.test_negatives.size(), proto::Link::Decoder_Name(job_.link().decoder()),
                   replicated_ && !sharded_eval_ ? std::string("; ") + kNotSharded : std::string());
    }
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
  counts_.add(batch);
  agreed_step(comm_, "preparing the sampled batch", [&] {
    const BucketShape shape = sampled_bucket(batch.blocks, job_.sampling().growth(), link_ ? batch.pairs.size() : -1);
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
  const Counts c = counts_.since(counts_before_);
  counts_before_ = counts_;
  nlohmann::json j{{"step", m.step},
          {"train_acc", m.train_acc},
          {"val_acc", m.val_acc},
          {"test_acc", m.test_acc},
          {"infer_ms", m.infer_ms},  // the evaluation's
          {"buckets_used", programs_.size()},
          {"padding_rows_percent", padding_.rows_percent()},
          {"padding_edges_percent", padding_.edges_percent()},
          {"sampler_wait_ms", epoch_wait_ms_},
          {"sampler_bytes_sent", c.bytes_sent},  // this rank's, to the others, in the epoch
          {"sampled_frontier_rows", c.frontier_rows},  // this rank's batches' in the epoch
          {"sampled_edges", c.edges},
          {"sampled_nodes", c.nodes},
          {"sampled_seeds", c.seeds},
          {"sample_ms", sampled},
          {"compile_ms", compile_ms_},
          {"cache_load_ms", cache_load_ms_}};
  if (link_) {
    // Link prediction: val_acc and test_acc are the AUCs (the best epoch is chosen by validation AUC).
    const std::string hits = fmt::format("hits@{}", job_.link().hits_k());
    j["val_auc"] = val_links_.auc;
    j["test_auc"] = test_links_.auc;
    j["val_" + hits] = val_links_.hits;
    j["test_" + hits] = test_links_.hits;
    j["val_mrr"] = val_links_.mrr;
    j["test_mrr"] = test_links_.mrr;
  }
  return j;
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
  if (!whole_eval_) {
    if (!sharded_) sharded_ = std::make_unique<ShardedLayerWise>(shard_, model_, job_.sampling().fanout_size(), *comm_);
    return sharded_->run(core, context);
  }
  return std::move(whole_graph().run(core, context).front());
}

LayerWise& SampledSource::whole_graph() {
  if (!layer_wise_) {
    layer_wise_ = std::make_unique<LayerWise>(shard_, model_, schema_, job_.sampling().fanout_size(),
                                              std::vector<std::string>{model_.loss_term(0).input()});
  }
  return *layer_wise_;
}

void SampledSource::evaluate(Core& core, const runtime::RunContext& context) {
  if (link_) {
    if (replicated_ ? sharded_eval_ : whole_eval_) evaluate_links(core, context);
    return;
  }
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
      correct += std::max_element(row, row + c) - row == shard_.y[shard_.local(node)];
    }
    return static_cast<double>(correct) / static_cast<double>(nodes.size());
  };
  val_acc_ = accuracy(shard_.val);
  test_acc_ = accuracy(shard_.test);
  infer_ms_ = ms_since(start);
}

void SampledSource::evaluate_links(Core& core, const runtime::RunContext& context) {
  const auto start = Clock::now();
  const int hops = job_.sampling().fanout_size();
  const std::string score = model_.loss_term(0).input();
  const auto scores = [&](std::unique_ptr<LayerWise>& eval, std::unique_ptr<ShardedLinkScores>& sharded,
                          const NodeShard& graph, const EdgeList& pairs, int64_t negatives) {
    if (pairs.size() == 0) return LinkScores{};
    if (replicated_) {  // each rank its share of the pairs, every score on every rank
      if (!sharded) {
        sharded = std::make_unique<ShardedLinkScores>(graph, link_parts_->embeddings, link_parts_->decoder, hops,
                                                      pairs, *comm_);
      }
      return link_scores(sharded->run(core, context), negatives, job_.link().hits_k());
    }
    if (!eval) eval = std::make_unique<LayerWise>(graph, model_, schema_, hops, std::vector<std::string>{score}, &pairs);
    const Tensor s = eval->run(core, context).front();
    return link_scores(s.values<float>(), negatives, job_.link().hits_k());
  };
  val_links_ = scores(val_links_eval_, val_links_sharded_, links_->val, links_->val_pairs,
                      links_->split.val_negatives.size());
  test_links_ = scores(test_links_eval_, test_links_sharded_, links_->test, links_->test_pairs,
                       links_->split.test_negatives.size());
  val_acc_ = val_links_.auc;
  test_acc_ = test_links_.auc;
  infer_ms_ = ms_since(start);
}

// Each rank its own nodes' logits; the correct counts summed over the ranks.
void SampledSource::evaluate_sharded(Core& core, const runtime::RunContext& context) {
  const auto start = Clock::now();
  const Tensor logits = infer_all(core, context);
  const auto v = logits.values<float>();
  const int64_t c = logits.shape()[1];
  std::vector<double> counts(4, 0.0);  // val correct, val nodes, test correct, test nodes
  const auto count = [&](const std::vector<int32_t>& nodes, size_t at) {
    for (const int32_t node : nodes) {
      if (!shard_.owns(node)) continue;
      const float* row = v.data() + shard_.local(node) * c;
      counts[at] += std::max_element(row, row + c) - row == shard_.y[shard_.local(node)];
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
  if (replicated_ || !(whole_eval_ || sharded_eval_)) {
    spdlog::warn("--logits-out: the graph is not evaluated on one rank (said above); nothing written to {}",
                 path.string());
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

bool generates_products(const proto::Job& job) {
  // A folder of that name is a dataset; otherwise "products[:...]" is the generator.
  const std::string& path = job.dataset().path();
  return is_products_spec(path) && !std::filesystem::is_directory(path);
}

Dataset load_sampled_dataset(const proto::Job& job) {
  Dataset d = load_dataset(job.dataset().path());
  if (job.dataset().normalize_features()) normalize_features(d);
  make_features_dense(d);
  return d;
}

proto::ShardManifest write_sampled_shards(const std::filesystem::path& dir, const proto::Job& job, int parts) {
  if (is_link_job(job)) {
    throw std::invalid_argument("gnnrt partition on a link job: a link job splits the whole edge list on every "
                                "rank and reads no shards (node classification jobs do)");
  }
  if (generates_products(job)) {
    if (metis_ownership(job, parts)) (void)make_node_shard(job, 0, parts);  // refuses METIS by name, at once
    const ProductsSpec spec = parse_products_spec(job.dataset().path());
    return write_node_shards(dir, job, parts, [&](int r) { return make_products_shard(spec, r, parts); });
  }
  const Dataset d = load_sampled_dataset(job);
  const std::vector<int32_t> owners = metis_ownership(job, parts) ? metis_owners(d, parts, job.seed()) : std::vector<int32_t>{};
  return write_node_shards(dir, job, parts,
                           [&](int r) { return node_shard(d, r, parts, job.sampling().undirected(), owners); });
}

bool is_sampled_job(const proto::Job& job) { return job.sampling().fanout_size() > 0 || is_link_job(job); }

proto::Model sampled_model(const proto::Model& model, int hops, int64_t classes) {
  if (model.module_size() > 0) return model;
  proto::Model out = chain_on_blocks(model, hops, classes);
  auto& t = *out.add_loss_term();
  t.set_kind(proto::LossTerm::CROSS_ENTROPY);
  t.set_input(out.module(out.module_size() - 1).name());
  t.set_target(target_name(hop_set_name(0)));
  return out;
}

proto::Model chain_on_blocks(const proto::Model& model, int hops, int64_t classes) {
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
  return out;
}

std::unique_ptr<BatchSource> make_sampled_source(const proto::Job& job, const TrainOptions& options) {
  return std::make_unique<SampledSource>(job, options);
}

InferResult infer_sampled(const proto::Job& given, const InferOptions& options) {
  validate(given);
  const proto::Job job = link_job(given);
  const bool link = is_link_job(job);
  if (options.communicator && options.communicator->size() > 1) {
    throw std::invalid_argument("gnnrt infer on a sampled job runs on one rank in this version");
  }
  if (options.params_in.empty()) throw std::invalid_argument("gnnrt infer needs --params-in (the trained parameters)");
  if (options.out.empty()) throw std::invalid_argument("gnnrt infer needs --out (a folder for the outputs)");
  // A link job: the test's message-passing graph (training and validation
  // edges), the test pairs on "pairs"; by default the embeddings.
  std::unique_ptr<LinkGraphs> links = link ? std::make_unique<LinkGraphs>(load_link_graphs(job, 0, 1)) : nullptr;
  if (link && links->test_pairs.size() == 0) {
    throw std::invalid_argument("gnnrt infer on a link job infers over the test graph and scores the test pairs: "
                                "link.test_fraction leaves none");
  }
  const NodeShard shard = link ? std::move(links->test) : load_node_shard(job, 0, 1);
  const int hops = job.sampling().fanout_size();
  const proto::Model model = link ? link_model(job.model(), hops, job.link())
                                  : sampled_model(job.model(), hops, shard.num_classes);
  const Schema schema = sampled_schema(hops, shard.num_features, shard.num_classes, link);
  std::vector<std::string> outputs = options.outputs;
  if (outputs.empty()) {
    outputs.push_back(link && job.model().module_size() == 0 ? chain_on_blocks(job.model(), hops, 0).module().rbegin()->name()
                                                             : model.loss_term(0).input());
  }
  for (const std::string& name : outputs) {
    if (std::none_of(model.module().begin(), model.module().end(),
                     [&](const proto::Module& m) { return m.name() == name; })) {
      throw std::invalid_argument(fmt::format("output '{}' is no module of the model", name));
    }
  }
  runtime::Core core(device_profile(job, options), core_options(job, options));
  LayerWise layer_wise(shard, model, schema, hops, outputs, link ? &links->test_pairs : nullptr);
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
