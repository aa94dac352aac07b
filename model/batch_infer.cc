#include "model/batch_infer.h"

#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "model/batch_dataset.h"
#include "model/batch_source.h"
#include "model/batch_trainer.h"
#include "model/job.h"
#include "model/module_graph.h"
#include "runtime/npy.h"
#include "runtime/program_cache.h"

namespace gnnrt::model {

InferResult infer_batches(const proto::Job& job, const InferOptions& options) {
  validate(job);
  if (job.model().module_size() == 0) {
    throw std::invalid_argument("gnnrt infer runs module-graph models on batch datasets; this job has layers "
                                "(gnnrt train --logits-out writes a full-batch model's outputs)");
  }
  if (options.params_in.empty()) throw std::invalid_argument("gnnrt infer needs --params-in (the trained parameters)");
  if (options.out.empty()) throw std::invalid_argument("gnnrt infer needs --out (a folder for the outputs)");
  if (options.threads > 0) omp_set_num_threads(options.threads);
  const BatchDataset data = load_batch_dataset(job.dataset().path());
  const BatchSource source(data, job.batching(), job.seed());
  const Schema& schema = source.schema();
  runtime::CoreOptions co;
  if (!options.no_cache) co.cache_dir = options.cache_dir.empty() ? runtime::default_cache_dir() : options.cache_dir;
  co.flush_denormals = job.device().flush_denormals();
  runtime::Core core(runtime::DeviceProfile::named(job.device().profile()), co);

  // Checked on the smallest bucket before anything runs.
  std::vector<std::string> requested;  // each name once
  for (const std::string& name : options.outputs) {
    if (std::find(requested.begin(), requested.end(), name) == requested.end()) requested.push_back(name);
  }
  const Network probe = build_module_inference(job.model(), schema, source.buckets().front(), false, requested);
  std::vector<std::string> outputs;
  for (const std::string& name : options.outputs) {
    if (std::find(outputs.begin(), outputs.end(), name) == outputs.end()) outputs.push_back(name);
  }
  if (outputs.empty()) {
    for (const auto& t : job.model().loss_term()) {
      if (std::find(outputs.begin(), outputs.end(), t.input()) == outputs.end()) outputs.push_back(t.input());
    }
  }
  if (outputs.empty()) throw std::invalid_argument("gnnrt infer: the model has no loss term; name outputs with --output");
  load_state_dict(core, probe.params, options.params_in, !options.params_non_strict);
  for (const ParamDecl& p : probe.params) {
    if (!core.memory().has(p.name)) initialize_parameters(core, {p}, job.seed());
  }

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
  std::map<std::string, int64_t> widths;
  std::map<int, std::shared_ptr<const runtime::CompiledProgram>> programs;
  const int64_t slots = module_metric_slots(job.model());
  core.memory().put(kMetrics, Tensor(DType::kF64, {slots}));
  const std::vector<int64_t> order = source.order(job.seed(), 0, /*shuffle=*/false);
  const auto batch = static_cast<size_t>(source.batch_size());
  for (size_t at = 0; at < order.size(); at += batch) {
    const auto graphs = std::span<const int64_t>(order).subspan(at, std::min(batch, order.size() - at));
    const int bucket = source.bucket_for(graphs);
    auto& p = programs[bucket];
    if (!p) p = core.compile(build_module_inference(job.model(), schema, source.buckets()[bucket], false, requested).program, {});
    source.bind(core, graphs, graphs, bucket, nullptr);
    core.run(*p, {.step = 1, .lr = 0, .seed = job.seed()});
    ++result.batches;
    for (const std::string& name : outputs) {
      const Tensor t = core.read(*p, name);
      const int64_t width = t.shape().size() > 1 ? t.shape()[1] : 1;
      widths[name] = width;
      int64_t rows = static_cast<int64_t>(graphs.size());
      if (const int s = output_set[name]; s >= 0) {
        rows = 0;
        for (const int64_t g : graphs) rows += data.node_sets[s].rows_of(g);
      }
      const auto v = t.values<float>();
      values[name].insert(values[name].end(), v.begin(), v.begin() + rows * width);
    }
  }
  std::filesystem::create_directories(options.out);
  for (const std::string& name : outputs) {
    const int64_t width = widths[name];
    const std::vector<int64_t> shape{static_cast<int64_t>(values[name].size()) / std::max<int64_t>(width, 1), width};
    write_npy<float>(options.out / (name + ".npy"), values[name], shape);
    result.shapes[name] = shape;
  }
  if (programs.begin()->second->program.find(kMetrics) != runtime::kNoValue) {
    const std::vector<double> v = core.read(kMetrics).to_vector<double>();
    for (int i = 0; i < job.model().loss_term_size(); ++i) {
      result.term_losses.push_back(v[1 + i] / static_cast<double>(result.batches));
    }
  }
  result.counters = core.counters();
  return result;
}

}  // namespace gnnrt::model
