#include "launch/train.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include "collectives/communicator.h"
#include "launch/control.pb.h"
#include "launch/control_client.h"
#include "model/job.h"
#include "model/training/graph_batch_source.h"
#include "model/training/sampled_source.h"
#include "ops/dense.h"
#include "runtime/program_cache.h"

namespace gnnrt::launch {
namespace {

// Without a job file: PyG's two-layer GCN example on the synthetic dataset.
constexpr const char* kDefaultJob = R"pb(
  name: "synthetic_gcn"
  dataset { path: "synthetic" }
  model {
    layer { type: DROPOUT p: 0.5 }
    layer { type: GCN out: 16 }
    layer { type: RELU }
    layer { type: DROPOUT p: 0.5 }
    layer { type: GCN }
  }
  optimizer { kind: ADAM lr: 0.01 weight_decay: 5e-4 }
  schedule { epochs: 200 }
)pb";

// The core runs its programs on --threads (CoreSettings::threads); the
// process's own OpenMP work beside it (generating a synthetic dataset)
// follows the same count, so ranks sharing a node stay within their cores.
void use_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace

model::proto::Job load_job_with_overrides(const std::string& path, const std::string& dataset,
                                          const std::vector<std::string>& sets) {
  model::proto::Job job = path.empty() ? model::parse_job(kDefaultJob, "default job")
                                       : model::load_job(path);
  if (!dataset.empty()) model::apply_override(job, "dataset.path=" + dataset);
  for (const std::string& s : sets) model::apply_override(job, s);
  return job;
}

model::proto::Job resolve_job(const TrainCommand& c) {
  model::proto::Job job = load_job_with_overrides(c.job, c.dataset, c.sets);
  if (!c.partition.empty()) model::apply_override(job, "partition.method=" + c.partition);
  if (!c.shards.empty()) model::apply_override(job, "partition.shards=" + c.shards);
  if (!c.halo.empty()) model::apply_override(job, "partition.halo=" + c.halo);
  return job;
}

int run_train(TrainCommand& c) {
  const model::proto::Job job = resolve_job(c);
  if (c.control != nullptr) {
    ControlClient* control = c.control;
    const int64_t epochs = job.schedule().epochs();
    c.options.on_epoch = [control, epochs](const model::EpochMetrics& m) {
      proto::Progress p;
      p.set_epoch(m.epoch);
      p.set_epochs(epochs);
      p.set_loss(m.loss);
      p.set_train_acc(m.train_acc);
      p.set_val_acc(m.val_acc);
      p.set_test_acc(m.test_acc);
      p.set_ms(m.ms);
      control->progress(p);
      control->inject_fault(m.epoch);
    };
    c.options.on_step = [control, epochs](int64_t epochs_done, int64_t step) {
      proto::Progress p;
      p.set_epoch(epochs_done);
      p.set_epochs(epochs);
      p.set_step(step);
      p.set_within_epoch(true);
      control->progress(p);
    };
    c.options.stop_requested = [control] { return control->stop_requested(); };
    c.options.on_notice = [control](const std::string& level, const std::string& text) { control->notice(level, text); };
  }
  if (const char* f = std::getenv("GNNRT_FAULT"); f != nullptr && *f != '\0') {
    // A bit flip (tests of the parameter checksums) is the trainer's to do.
    const Fault fault = Fault::parse(f);
    const int rank = c.options.communicator ? c.options.communicator->rank() : 0;
    if (fault.kind == Fault::Kind::kFlip && fault.rank == rank) c.options.corrupt_after_epoch = fault.epoch;
  }
  c.options.cache_dir = c.cache_dir;
  c.options.metrics_path = c.metrics;
  c.options.logits_out = c.logits_out;
  c.options.params_in = c.params_in;
  c.options.params_out = c.params_out;
  c.options.trace_path = c.trace;
  const int ranks = c.options.communicator ? c.options.communicator->size() : 1;
  const bool lead = !c.options.communicator || c.options.communicator->rank() == 0;
  if (lead) {
    spdlog::info("job '{}': dataset {}, {}, {} epochs, optimizer {} lr {}, {} rank(s){}",
                 job.name(), job.dataset().path(),
                 job.model().module_size() > 0 ? fmt::format("{} modules", job.model().module_size())
                                               : fmt::format("{} layers", job.model().layer_size()),
                 job.schedule().epochs(),
                 model::lower_name(job.optimizer().kind()), job.optimizer().lr(), ranks,
                 model::is_sampled_job(job) ? (ranks > 1 ? std::string(", sampled, data-parallel")
                                                         : std::string(", sampled"))
                 : model::is_batch_job(job) ? (ranks > 1 ? std::string(", data-parallel") : std::string())
                 : ranks > 1 || !job.partition().shards().empty()
                     ? fmt::format(", partition {} ({} halo)",
                                   job.partition().shards().empty() ? model::name(job.partition().method())
                                                                    : "shards " + job.partition().shards(),
                                   model::lower_name(job.partition().halo()))
                     : "");
  }
  if (lead) {
    if (const auto slow_blas = ops::blas_kernels_warning()) spdlog::warn("{}", *slow_blas);
  }
  if (lead && c.options.debug) {
    spdlog::info("debug mode: every program runs op by op, unfused, with a NaN/Inf check after each op; "
                 "collective call checks on");
  }
  use_threads(c.options.threads);
  const model::TrainResult r = model::train(job, c.options);
  c.stopped = r.stopped;
  c.resumed_after = r.start_epoch;
  if (!lead) return 0;
  const auto& k = r.counters;
  const auto& plan = r.train_plan;
  const auto best = [&] {
    // Link jobs judge epochs by AUC.
    const char* what = job.has_link() ? "AUC" : "accuracy";
    if (r.best_epoch > 0) {
      spdlog::info("best validation {} {:.4f} at epoch {}; test {} {:.4f}", what, r.best_val_acc, r.best_epoch, what,
                   r.test_acc);
    }
  };
  // A batch job's programs are one per bucket; its trainer logged them.
  if (model::is_batch_job(job)) {
    best();
    return 0;
  }
  // So are a sampled job's, whose source logged its buckets.
  if (!model::is_sampled_job(job)) {
    spdlog::info("program train_step: {} fused, {} attention softmaxes fused, {} losses fused with their "
               "log softmax, {} reordered, {} backward ops, "
               "{} gradient sums folded, {} sparse products paired; planned peak {:.1f} MiB ({:.1f} MiB resident + {:.1f} MiB graphs + {:.1f} MiB arena)",
               r.train_passes.fused, r.train_passes.attention, r.train_passes.cross_entropy,
               r.train_passes.reordered, r.train_passes.backward_ops,
               r.train_passes.folded, r.train_passes.paired,
               static_cast<double>(plan.peak_bytes) / (1 << 20),
               static_cast<double>(plan.persistent_bytes) / (1 << 20),
               static_cast<double>(plan.graph_bytes) / (1 << 20),
               static_cast<double>(plan.arena_bytes) / (1 << 20));
  }
  spdlog::info("counters: {} compiles, {} cache hits, {} ops run, {:.1f} MB moved, {} host syncs, "
               "{} collectives ({} halo exchanges, {:.2f} MB sent by rank 0), simulated {:.3f} s",
               k.compiles, k.cache_hits, k.ops_run, k.bytes_moved / 1e6, k.host_syncs,
               k.collective_calls, k.halo_calls, k.collective_bytes / 1e6, k.simulated_seconds);
  best();
  return 0;
}

int run_infer(InferCommand& c) {
  if (c.job.empty()) throw std::invalid_argument("gnnrt infer needs a job file (a module-graph model)");
  const model::proto::Job job = load_job_with_overrides(c.job, c.dataset, c.sets);
  c.options.params_in = c.params_in;
  c.options.out = c.out;
  c.options.cache_dir = c.cache_dir;
  use_threads(c.options.threads);
  const model::InferResult r =
      model::is_sampled_job(job) ? model::infer_sampled(job, c.options) : model::infer_batches(job, c.options);
  const auto& comm = c.options.communicator;
  if (comm && comm->rank() != 0) return 0;  // rank 0 wrote the outputs and reports
  for (const auto& [name, shape] : r.shapes) {
    spdlog::info("wrote {}/{}.npy [{}]", c.out, name, fmt::join(shape, ", "));
  }
  for (size_t i = 0; i < r.term_losses.size(); ++i) {
    spdlog::info("loss term {} ({} against {}): {:.6f} (mean over {} batches)", i, job.model().loss_term(i).input(),
                 job.model().loss_term(i).target(), r.term_losses[i], r.batches);
  }
  spdlog::info("{} graphs in {} batches on {} rank(s); {} compiles, {} cache hits", r.graphs, r.batches,
               comm ? comm->size() : 1, r.counters.compiles, r.counters.cache_hits);
  spdlog::info("batch latency median {:.3f} ms, p90 {:.3f} ms (rank 0's batches; compiles excluded); {:.0f} graphs/s; "
               "simulated {:.3f} ms a batch", r.latency_median_ms, r.latency_p90_ms, r.graphs_per_second, r.simulated_ms);
  return 0;
}

}  // namespace gnnrt::launch
