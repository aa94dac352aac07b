// Full-batch training and inference time of one (model, data set, threads)
// configuration on one simulated core: the counterpart of
// bench/compare_torch_train.py's PyTorch runs, with the same models (PyG's
// layers, raw features, dropout on or, --dropout off, every p = 0), optimizer
// (Adam, lr 0.01, weight decay 5e-4) and timing rules (3 warm-up calls, then
// at least --min-reps samples and --min-seconds; medians). On more than one
// thread the warm-up also covers Core::run's thread tuning (its
// Core::kTuningRuns calls), so no timed call is one of its measuring runs. The features'
// form is the trainer's (--features auto: sparse when mostly zero). One
// configuration per process, so the peak RSS is that configuration's alone.
//
// The floor, as issue 15 defines it: the bytes the step must move (the
// features once, each graph's indices once, parameters, gradients and Adam
// moments, labels, every forward value written and read once) over this
// machine's triad bandwidth at the configuration's thread count, plus the
// train step's flops (the cost model of runtime/device.h) over a measured
// single-core SGEMM rate, both measured here after the timed runs (triad
// a = b + s c over 3 x 64 MiB float arrays, best of 5; ops::matmul 1024^3
// on one thread, best of 5). floor_ms = must_move_bytes / triad +
// step_flops / sgemm. On more than one thread all_cores_floor_ms prices the
// flops at the SGEMM rate of all the configuration's threads instead
// (sgemm_all_gflops; the floor of the tables before 2026-12-01, stricter).
// cost_model_floor_ms uses the cost model's bytes instead of what must move
// (every op's operands and results, a gathered row per edge or stored
// value: what the program moves if nothing stays in cache).
//
// Prints one JSON object:
//   {system: "gnnrt", model, dataset, hidden, heads, threads, tune_threads,
//    flush_denormals, dropout,
//    features, train_ms, infer_ms, peak_rss_mb, planned_peak_mb, reps_train,
//    reps_infer, step_bytes, step_flops, must_move_bytes, triad_gbs,
//    sgemm_gflops (one thread), sgemm_all_gflops, blas_kernels (OpenBLAS's
//    kernel set, which the SGEMM rate depends on), core_round_trip_ns (null
//    on one thread), floor_ms, floor_multiple, all_cores_floor_ms,
//    all_cores_floor_multiple, cost_model_floor_ms}
// compare_torch_train.py --gnnrt build/bench/train_bench runs the sweep.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>

#include "model/data/dataset.h"
#include "model/job.h"
#include "model/modules/network.h"
#include "model/training/setup.h"
#include "model/training/state_dict.h"
#include "model/training/full_graph.h"
#include "ops/dense.h"
#include "runtime/device.h"

namespace {

using namespace gnnrt;

model::proto::Model model_for(const std::string& name, int64_t* hidden, int64_t* heads) {
  std::string text;
  *heads = 1;
  if (name == "gcn" || name == "gcn256") {
    *hidden = name == "gcn" ? 16 : 256;
    text = fmt::format(R"pb(layer {{ type: DROPOUT p: 0.5 }} layer {{ type: GCN out: {} }}
                           layer {{ type: RELU }} layer {{ type: DROPOUT p: 0.5 }}
                           layer {{ type: GCN }})pb", *hidden);
  } else if (name == "sage") {
    *hidden = 16;
    text = R"pb(layer { type: DROPOUT p: 0.5 } layer { type: SAGE out: 16 aggr: MEAN }
                layer { type: RELU } layer { type: DROPOUT p: 0.5 }
                layer { type: SAGE aggr: MEAN })pb";
  } else if (name == "gat") {
    *hidden = 8;
    *heads = 8;
    text = R"pb(layer { type: DROPOUT p: 0.6 }
                layer { type: GAT out: 8 heads: 8 attention_dropout: 0.6 }
                layer { type: ELU } layer { type: DROPOUT p: 0.6 }
                layer { type: GAT heads: 1 concat: false attention_dropout: 0.6 })pb";
  } else {
    throw std::invalid_argument("unknown model " + name + " (gcn, gcn256, sage, gat)");
  }
  return model::parse_job("model { " + text + " }", "train_bench").model();
}

template <typename F>
std::pair<double, int> median_ms(F&& fn, int min_reps, double min_seconds) {
  const int warm_up = omp_get_max_threads() > 1 ? std::max(3, runtime::Core::kTuningRuns + 1) : 3;
  for (int i = 0; i < warm_up; ++i) fn();
  std::vector<double> ms;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(ms.size()) < min_reps ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds) {
    const auto t = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], static_cast<int>(ms.size())};
}

// Best of 5: GB/s of a[i] = b[i] + s * c[i] (12 bytes per element).
double triad_gbs() {
  const std::size_t n = std::size_t{16} << 20;  // 64 MiB per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = std::chrono::steady_clock::now();
    const float s = 3.0f + static_cast<float>(rep);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    best = std::max(best, 12.0 * static_cast<double>(n) / sec / 1e9);
  }
  if (a[n / 2] == 0) std::cerr << "";  // keep the stores
  return best;
}

// Best of 5: GFLOP/s of gnnrt's matmul (OpenBLAS) on 1024 x 1024 x 1024,
// on `threads` OpenMP threads (OpenBLAS's OpenMP build sizes its team from
// omp_get_max_threads() at each call).
double sgemm_gflops(int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t = std::chrono::steady_clock::now();
    ops::matmul<float>(a, b, c, n, n, n);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    best = std::max(best, 2.0 * static_cast<double>(n * n * n) / sec / 1e9);
  }
  omp_set_num_threads(saved);
  return best;
}

// Median of 5 batches: ns for one cache line to go from OpenMP thread 0 to
// thread 1 and back (each spins until the other's store arrives). On a VM
// two threads may or may not share a cache complex, and the host can move
// them between the two; on the slow side an op that reads or writes rows the
// other core touched last loses what the second thread gains, so the figure
// says which state a run had (docs/benchmarks.md). NaN on one thread.
double core_round_trip_ns() {
  if (omp_get_max_threads() < 2) return std::numeric_limits<double>::quiet_NaN();
  constexpr int kTrips = 20000;
  alignas(64) std::atomic<int> flag{0};
  std::vector<double> batches;
#pragma omp parallel num_threads(2)
  for (int batch = 0; batch < 5 && omp_get_num_threads() == 2; ++batch) {
#pragma omp barrier
    if (omp_get_thread_num() == 0) {
      const auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < kTrips; ++i) {
        flag.store(2 * i + 1, std::memory_order_release);
        while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
        }
      }
      batches.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count() / kTrips);
      flag.store(0, std::memory_order_relaxed);
    } else {
      for (int i = 0; i < kTrips; ++i) {
        while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        flag.store(2 * i + 2, std::memory_order_release);
      }
    }
  }
  if (batches.empty()) return std::numeric_limits<double>::quiet_NaN();  // OpenMP gave one thread
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

// Runs `steps` more train steps with op tracing on and prints the median
// step (its wall time and the sum of its ops' times: the difference is the
// executor's own), then each op's median time, slowest first, with its
// share of the summed medians.
void print_profile(runtime::Core& core, const runtime::CompiledProgram& step, int64_t epoch,
                   int steps) {
  core.set_trace(true);
  const std::size_t first = core.trace().size();
  std::vector<double> wall_us;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    core.run(step, {.step = ++epoch, .lr = 0.01, .seed = 0});
    wall_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  core.set_trace(false);
  const std::size_t ops = step.program.ops.size();
  std::vector<std::vector<double>> us(ops);
  std::vector<double> ops_us(static_cast<std::size_t>(steps), 0.0);  // per step
  for (std::size_t i = first; i < core.trace().size(); ++i) {
    us[(i - first) % ops].push_back(core.trace()[i].duration_us);
    ops_us[(i - first) / ops] += core.trace()[i].duration_us;
  }
  std::sort(wall_us.begin(), wall_us.end());
  std::sort(ops_us.begin(), ops_us.end());
  std::cerr << fmt::format("median step: wall {:.1f} us, its ops {:.1f} us\n",
                           wall_us[wall_us.size() / 2], ops_us[ops_us.size() / 2]);
  std::vector<std::pair<double, std::size_t>> rows;
  double total = 0;
  for (std::size_t i = 0; i < ops; ++i) {
    std::sort(us[i].begin(), us[i].end());
    rows.emplace_back(us[i][us[i].size() / 2], i);
    total += rows.back().first;
  }
  std::sort(rows.rbegin(), rows.rend());
  std::cerr << fmt::format("train step: {} ops, summed op medians {:.1f} us over {} steps\n", ops,
                           total, steps);
  const std::vector<int> op_threads = core.op_threads(step);
  for (const auto& [t, i] : rows) {
    const runtime::Op& op = step.program.ops[i];
    std::string shapes;
    for (const runtime::ValueId v : op.outputs) {
      shapes += runtime::shape_string(step.program.value(v).shape);
    }
    const int on = op_threads.empty() ? omp_get_max_threads() : op_threads[i];
    std::cerr << fmt::format("{:8.1f} us {:5.1f}%  {:3} {:24} {:28} {:3}t {}\n", t, 100 * t / total,
                             i, runtime::to_string(op.kind), op.scope, on, shapes);
  }
}

// What the step must move at least: the features once (stored values
// and indices when sparse), each graph's indices once, per parameter
// its value, gradient and Adam moments read and written (32 bytes),
// labels and the train mask, and each forward value (the eval-mode
// forward's) written once and read once by the backward.
double must_move_bytes(const model::NetworkShape& shape, bool sparse, const runtime::CompiledProgram& step,
                       const runtime::CompiledProgram& infer) {
  const int64_t n = shape.nodes;
  double must_bytes = sparse ? 8.0 * static_cast<double>(shape.feature_nnz) + 8.0 * static_cast<double>(n + 1)
                             : 4.0 * static_cast<double>(n * shape.features);
  for (const runtime::GraphInfo& g : step.program.graphs) {
    if (g.name != model::kFeatures) must_bytes += 8.0 * static_cast<double>(g.num_edges);
  }
  for (const runtime::ValueId p : step.params) {
    must_bytes += 32.0 * static_cast<double>(step.program.value(p).elements());
  }
  must_bytes += 9.0 * static_cast<double>(n);
  // Not counted: the classifier's log softmax when the train step's loss
  // computes the masked rows' only (cross_entropy); a graph constant is
  // read, not written.
  const bool fused_loss = std::any_of(step.program.ops.begin(), step.program.ops.end(),
                                      [](const runtime::Op& op) { return op.kind == runtime::OpKind::kCrossEntropy; });
  for (const runtime::Op& op : infer.program.ops) {
    if (fused_loss && op.kind == runtime::OpKind::kLogSoftmax) continue;
    for (const runtime::ValueId v : op.outputs) {
      const runtime::ValueInfo& info = infer.program.value(v);
      if (info.role == runtime::Role::kTemp && is_floating(info.dtype)) {
        must_bytes += (runtime::is_graph_constant(op) ? 1.0 : 2.0) * static_cast<double>(info.bytes());
      }
    }
  }
  return must_bytes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gnnrt full-batch train-step and inference benchmark (one configuration)"};
  std::string dataset_dir, model_name = "gcn", dataset_name;
  int threads = 1, min_reps = 10;
  double min_seconds = 3;
  app.add_option("--dataset-dir", dataset_dir, "NumPy dataset folder")->required();
  app.add_option("--dataset-name", dataset_name, "Name in the output (default: the folder's)");
  app.add_option("--model", model_name, "gcn | gcn256 | sage | gat")->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads")->capture_default_str();
  // An on/off switch, "on" by default.
  const auto on_off = [&app](const std::string& name, std::string& value, const std::string& help) {
    value = "on";
    app.add_option(name, value, help)->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  };
  std::string dropout, features = "auto";
  on_off("--dropout", dropout, "on: the models' dropout; off: every p = 0 (attention too)");
  app.add_option("--features", features, "The features' form (the job's dataset.features)")
      ->check(CLI::IsMember({"auto", "dense", "sparse"}))
      ->capture_default_str();
  std::string tune_threads, flush_denormals;
  on_off("--tune-threads", tune_threads,
         "on: each op runs on one thread or all, whichever its first runs measured "
         "faster; off: every op on all threads");
  on_off("--flush-denormals", flush_denormals,
         "on: subnormal floats flushed to zero while programs run (the job's "
         "device.flush_denormals, on by default); off: IEEE subnormals");
  int profile = 0;
  app.add_option("--profile", profile,
                 "After the timed runs, trace this many more train steps and print each op's "
                 "median time to stderr (the share of the step, slowest first)");
  app.add_option("--min-reps", min_reps)->capture_default_str();
  app.add_option("--min-seconds", min_seconds)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    spdlog::set_level(spdlog::level::warn);  // stdout carries the one JSON line
    omp_set_num_threads(threads);
    int64_t hidden = 0, heads = 1;
    model::proto::Job job;
    *job.mutable_model() = model_for(model_name, &hidden, &heads);
    if (dropout == "off") {
      for (auto& l : *job.mutable_model()->mutable_layer()) {
        if (l.type() == model::proto::Layer::DROPOUT) l.set_p(0);
        l.set_attention_dropout(0);
      }
    }
    model::apply_override(job, "dataset.features=" + features);
    const model::proto::Model& spec = job.model();
    model::Dataset data = model::load_npy_folder(dataset_dir);
    model::prepare_features(data, job);
    const bool sparse = data.x_sparse.has_value();
    runtime::CoreOptions core_options;
    core_options.tune_threads = tune_threads == "on";
    core_options.flush_denormals = flush_denormals == "on";
    runtime::Core core(runtime::DeviceProfile::named("trn1"), core_options);
    const model::NetworkShape shape = model::bind_dataset(core, data, spec);
    const model::Network train_net = model::build_train_step(spec, shape);
    const model::Network infer_net = model::build_inference(spec, shape);
    model::proto::Optimizer adam;
    adam.set_kind(model::proto::Optimizer::ADAM);
    runtime::CompileOptions options;
    options.train = runtime::TrainStep{train_net.loss, train_net.param_ids, model::optimizer_config(adam)};
    const auto step = core.compile(train_net.program, options);
    const auto infer = core.compile(infer_net.program, {});
    model::initialize_parameters(core, train_net.params, 0);
    int64_t epoch = 0;
    const auto [train_ms, train_reps] = median_ms(
        [&] { core.run(*step, {.step = ++epoch, .lr = 0.01, .seed = 0}); }, min_reps, min_seconds);
    const auto [infer_ms, infer_reps] =
        median_ms([&] { core.run(*infer, {.step = epoch, .lr = 0, .seed = 0}); }, min_reps, min_seconds);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    if (profile > 0) print_profile(core, *step, epoch, profile);
    double step_bytes = 0, step_flops = 0;
    for (const runtime::Op& op : step->program.ops) {
      const runtime::OpCost c = runtime::op_cost(step->program, op);
      step_bytes += c.bytes;
      step_flops += c.flops;
    }
    const double must_bytes = must_move_bytes(shape, sparse, *step, *infer);
    const std::vector<int> op_threads = core.op_threads(*step);
    const auto ops_on_all = op_threads.empty()
                                ? static_cast<int64_t>(step->program.ops.size())
                                : std::count(op_threads.begin(), op_threads.end(), threads);
    const double triad = triad_gbs(), round_trip = core_round_trip_ns();
    const double sgemm = sgemm_gflops(1), sgemm_all = threads > 1 ? sgemm_gflops(threads) : sgemm;
    const auto floor_of = [&](double bytes, double gflops) {
      return (bytes / (triad * 1e9) + step_flops / (gflops * 1e9)) * 1e3;
    };
    const double floor_ms = floor_of(must_bytes, sgemm);
    const double all_cores_floor_ms = floor_of(must_bytes, sgemm_all);
    const double cost_model_floor_ms = floor_of(step_bytes, sgemm);
    const nlohmann::json row = {
        {"system", "gnnrt"},
        {"model", model_name},
        {"dataset", dataset_name.empty() ? std::filesystem::path(dataset_dir).filename().string() : dataset_name},
        {"hidden", hidden},
        {"heads", heads},
        {"threads", threads},
        {"tune_threads", tune_threads},
        {"flush_denormals", flush_denormals},
        {"ops_on_all_threads", ops_on_all},
        {"dropout", dropout},
        {"features", sparse ? "sparse" : "dense"},
        {"train_ms", train_ms},
        {"infer_ms", infer_ms},
        {"peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024},
        {"planned_peak_mb", static_cast<double>(std::max(step->plan.peak_bytes, infer->plan.peak_bytes)) / (1 << 20)},
        {"reps_train", train_reps},
        {"reps_infer", infer_reps},
        {"step_bytes", step_bytes},
        {"step_flops", step_flops},
        {"triad_gbs", triad},
        {"sgemm_gflops", sgemm},
        {"sgemm_all_gflops", sgemm_all},
        {"blas_kernels", ops::blas_kernels()},
        {"core_round_trip_ns", std::isnan(round_trip) ? nlohmann::json(nullptr) : nlohmann::json(round_trip)},
        {"must_move_bytes", must_bytes},
        {"floor_ms", floor_ms},
        {"floor_multiple", train_ms / floor_ms},
        {"all_cores_floor_ms", all_cores_floor_ms},
        {"all_cores_floor_multiple", train_ms / all_cores_floor_ms},
        {"cost_model_floor_ms", cost_model_floor_ms}};
    std::cout << row.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "train_bench: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
