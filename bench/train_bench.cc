// Full-batch training and inference time of one (model, data set, threads)
// configuration on one simulated core: the counterpart of
// bench/compare_torch_train.py's PyTorch runs, with the same models (PyG's
// layers, raw features, dropout on), optimizer (Adam, lr 0.01, weight decay
// 5e-4) and timing rules (3 warm-up calls, then at least --min-reps samples
// and --min-seconds; medians). One configuration per process, so the peak
// RSS is that configuration's alone. Prints one JSON object:
//   {system: "gnnrt", model, dataset, hidden, heads, threads, train_ms,
//    infer_ms, peak_rss_mb, planned_peak_mb, reps_train, reps_infer}
// compare_torch_train.py --gnnrt build/bench/train_bench runs the sweep.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "model/dataset.h"
#include "model/job.h"
#include "model/network.h"
#include "model/trainer.h"

namespace {

using namespace gnnrt;

model::proto::Model model_for(const std::string& name, int64_t* hidden, int64_t* heads) {
  std::string text;
  *heads = 1;
  if (name == "gcn" || name == "gcn256") {
    *hidden = name == "gcn" ? 16 : 256;
    text = fmt::format(R"pb(layer {{ type: "dropout" p: 0.5 }} layer {{ type: "gcn" out: {} }}
                           layer {{ type: "relu" }} layer {{ type: "dropout" p: 0.5 }}
                           layer {{ type: "gcn" }})pb", *hidden);
  } else if (name == "sage") {
    *hidden = 16;
    text = R"pb(layer { type: "dropout" p: 0.5 } layer { type: "sage" out: 16 aggr: "mean" }
                layer { type: "relu" } layer { type: "dropout" p: 0.5 }
                layer { type: "sage" aggr: "mean" })pb";
  } else if (name == "gat") {
    *hidden = 8;
    *heads = 8;
    text = R"pb(layer { type: "dropout" p: 0.6 }
                layer { type: "gat" out: 8 heads: 8 attention_dropout: 0.6 }
                layer { type: "elu" } layer { type: "dropout" p: 0.6 }
                layer { type: "gat" heads: 1 concat: false attention_dropout: 0.6 })pb";
  } else {
    throw std::invalid_argument("unknown model " + name + " (gcn, gcn256, sage, gat)");
  }
  return model::parse_job("model { " + text + " }", "train_bench").model();
}

template <typename F>
std::pair<double, int> median_ms(F&& fn, int min_reps, double min_seconds) {
  for (int i = 0; i < 3; ++i) fn();
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
  app.add_option("--min-reps", min_reps)->capture_default_str();
  app.add_option("--min-seconds", min_seconds)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    omp_set_num_threads(threads);
    int64_t hidden = 0, heads = 1;
    const model::proto::Model spec = model_for(model_name, &hidden, &heads);
    const model::Dataset data = model::load_npy_folder(dataset_dir);
    runtime::Core core(runtime::DeviceProfile::named("trn1"), {});
    const model::NetworkShape shape = model::bind_dataset(core, data, spec);
    const model::Network train_net = model::build_train_step(spec, shape);
    const model::Network infer_net = model::build_inference(spec, shape);
    model::proto::Optimizer adam;
    adam.set_kind("adam");
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
    const nlohmann::json row = {
        {"system", "gnnrt"},
        {"model", model_name},
        {"dataset", dataset_name.empty() ? std::filesystem::path(dataset_dir).filename().string() : dataset_name},
        {"hidden", hidden},
        {"heads", heads},
        {"threads", threads},
        {"train_ms", train_ms},
        {"infer_ms", infer_ms},
        {"peak_rss_mb", static_cast<double>(usage.ru_maxrss) / 1024},
        {"planned_peak_mb", static_cast<double>(std::max(step->plan.peak_bytes, infer->plan.peak_bytes)) / (1 << 20)},
        {"reps_train", train_reps},
        {"reps_infer", infer_reps}};
    std::cout << row.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "train_bench: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
