#include "model/training/batch_infer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "collectives/communicator.h"
#include "model/data/batch_dataset.h"
#include "model/job.h"
#include "model/modules/module_graph.h"
#include "model/training/graph_batches.h"
#include "model/training/distributed.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"
#include "runtime/npy.h"
#include "runtime/program_cache.h"

namespace gnnrt::model {

namespace {

// Each name once: --output, else the job's model.output, else every loss
// term's input.
std::vector<std::string> output_names(const proto::Job& job, const InferOptions& options) {
  std::vector<std::string> outputs;
  const auto add = [&](const std::string& name) {
    if (std::find(outputs.begin(), outputs.end(), name) == outputs.end()) outputs.push_back(name);
  };
  for (const std::string& name : options.outputs) add(name);
  if (outputs.empty()) {
    for (const std::string& name : job.model().output()) add(name);
  }
  if (outputs.empty()) {
    for (const auto& t : job.model().loss_term()) add(t.input());
  }
  if (outputs.empty()) throw std::invalid_argument("gnnrt infer: the model has no loss term; name outputs with --output");
  return outputs;
}

// Every rank's rows on rank 0, in rank order (empty on the other ranks).
std::vector<float> gather_rows(collectives::Communicator& comm, std::vector<float>& mine_rows) {
  const int rank = comm.rank(), ranks = comm.size();
  std::vector<int64_t> mine{static_cast<int64_t>(mine_rows.size())}, counts(static_cast<size_t>(ranks));
  comm.allgather<int64_t>(mine, counts);
  std::vector<std::size_t> send(static_cast<size_t>(ranks)), recv(static_cast<size_t>(ranks));
  send[0] = static_cast<std::size_t>(mine[0]);
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    if (rank == 0) recv[static_cast<size_t>(r)] = static_cast<std::size_t>(counts[static_cast<size_t>(r)]);
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<float> all(rank == 0 ? static_cast<size_t>(total) : 0);
  comm.alltoallv<float>(mine_rows, send, all, recv);
  return all;
}

}  // namespace

InferResult infer_batches(const proto::Job& job, const InferOptions& options) {
  validate(job);
  if (job.model().module_size() == 0) {
    throw std::invalid_argument("gnnrt infer runs module-graph models on batch datasets; this job has layers "
                                "(gnnrt train --logits-out writes a full-batch model's outputs)");
  }
  if (options.params_in.empty()) throw std::invalid_argument("gnnrt infer needs --params-in (the trained parameters)");
  if (options.out.empty()) throw std::invalid_argument("gnnrt infer needs --out (a folder for the outputs)");
  const auto& comm = options.communicator;
  // Ranks started with other jobs stop here, naming the fields; a rank that
  // cannot read the data or the parameters stops every rank (distributed.h).
  if (comm && comm->size() > 1) check_same_job(*comm, job);
  BatchDataset data;
  agreed_step(comm, "reading the dataset", [&] { data = load_batch_dataset(job.dataset().path()); });
  const GraphBatches source(data, job.batching(), job.seed());
  const Schema& schema = source.schema();
  // The trainer's core for the same job: its profile, cache and float modes.
  runtime::Core core(device_profile(job, options), core_options(job, options));

  // Checked on the smallest bucket before anything runs.
  const std::vector<std::string> outputs = output_names(job, options);
  const Network probe = build_module_inference(job.model(), schema, source.buckets().front(), false, outputs);
  agreed_step(comm, "reading --params-in", [&] {
    load_state_dict(core, probe.params, probe.aliases, probe.buffers, options.params_in, !options.params_non_strict,
                    options.params_scope);
  });
  initialize_missing_parameters(core, probe.params, job.seed());

  // What each output's rows are: graphs (-1), or a node set's rows.
  std::map<std::string, int> output_set;
  const auto ports = module_ports(job.model(), schema, source.buckets().front());
  for (const std::string& name : outputs) {
    const Port& p = ports.at(name);
    if (p.domain == Port::Domain::kEdges) {
      throw std::invalid_argument(fmt::format("gnnrt infer: output '{}' has one row per edge; name a per-node or "
                                              "per-graph module", name));
    }
    output_set[name] = p.domain == Port::Domain::kGraphs ? -1 : p.set;
  }

  InferResult result;
  result.graphs = data.num_graphs;
  std::map<std::string, std::vector<float>> values;
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs;
  const int64_t slots = module_metric_slots(job.model());
  core.memory().put(kMetrics, Tensor(DType::kF64, {slots}));
  const std::vector<int64_t> order = source.order(job.seed(), 0, /*shuffle=*/false);
  const auto batch = static_cast<size_t>(source.batch_size());
  // This rank's batches: a contiguous share, so rank order is dataset order.
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  const int64_t batches = (static_cast<int64_t>(order.size()) + static_cast<int64_t>(batch) - 1) /
                          static_cast<int64_t>(batch);
  const int64_t first = batches * rank / ranks, last = batches * (rank + 1) / ranks;
  std::vector<double> latencies;
  const auto started = std::chrono::steady_clock::now();
  for (int64_t b = first; b < last; ++b) {
    const size_t at = static_cast<size_t>(b) * batch;
    const auto graphs = std::span<const int64_t>(order).subspan(at, std::min(batch, order.size() - at));
    const int bucket = source.bucket_for(graphs);
    auto& p = programs[bucket];
    if (!p) p = core.compile(build_module_inference(job.model(), schema, source.buckets()[bucket], false, outputs).program, {});
    const auto t0 = std::chrono::steady_clock::now();
    source.bind(core, graphs, graphs, bucket, nullptr);
    core.run(*p, {.step = 1, .lr = 0, .seed = job.seed()});
    ++result.batches;
    for (const std::string& name : outputs) {
      const Tensor t = core.read(*p, name);
      const int64_t width = ports.at(name).width;
      int64_t rows = static_cast<int64_t>(graphs.size());
      if (const int s = output_set[name]; s >= 0) {
        rows = 0;
        for (const int64_t g : graphs) rows += data.node_sets[s].rows_of(g);
      }
      const auto v = t.values<float>();
      values[name].insert(values[name].end(), v.begin(), v.begin() + rows * width);
    }
    latencies.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (result.batches > 0) {
    result.simulated_ms = core.counters().simulated_seconds * 1e3 / static_cast<double>(result.batches);
  }
  // The eval losses, when the dataset has the targets (every rank's program alike).
  const bool has_metrics = probe.program.find(kMetrics) != runtime::kNoValue;
  std::vector<double> sums = programs.empty() || !has_metrics ? std::vector<double>(static_cast<size_t>(slots))
                                                              : core.read(kMetrics).to_vector<double>();
  if (ranks > 1) {
    // Rank 0 gathers each output's rows in rank order (dataset order).
    for (const std::string& name : outputs) values[name] = gather_rows(*comm, values[name]);
    comm->allreduce<double>(sums);
    std::vector<double> slowest{seconds}, count{static_cast<double>(result.batches)};
    comm->allreduce<double>(slowest, collectives::ReduceOp::max);
    comm->allreduce<double>(count);
    seconds = slowest[0];
    result.batches = static_cast<int64_t>(count[0]);
  }
  if (rank == 0) {
    std::filesystem::create_directories(options.out);
    for (const std::string& name : outputs) {
      const int64_t width = ports.at(name).width;
      const std::vector<int64_t> shape{static_cast<int64_t>(values[name].size()) / std::max<int64_t>(width, 1), width};
      write_npy<float>(options.out / (name + ".npy"), values[name], shape);
      result.shapes[name] = shape;
    }
  }
  if (has_metrics && result.batches > 0) {
    for (int i = 0; i < job.model().loss_term_size(); ++i) {
      result.term_losses.push_back(sums[1 + static_cast<size_t>(i)] / static_cast<double>(result.batches));
    }
  }
  if (!latencies.empty()) {
    std::sort(latencies.begin(), latencies.end());
    const auto at = [&](double q) { return latencies[static_cast<size_t>(q * static_cast<double>(latencies.size() - 1) + 0.5)]; };
    result.latency_median_ms = at(0.5);
    result.latency_p90_ms = at(0.9);
  }
  result.graphs_per_second = seconds > 0 ? static_cast<double>(data.num_graphs) / seconds : 0;
  result.counters = core.counters();
  if (!options.trace_path.empty()) core.write_trace(rank_path(options.trace_path, rank));
  return result;
}

}  // namespace gnnrt::model
