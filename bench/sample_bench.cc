// The neighbour sampler's throughput (docs/sampling.md) on the
// products-like graph, and this machine's random-access limit for it.
//
//   sample_bench --graph products --fanouts 15,10,5 --batch 1024 --threads 1,2
//       sampling alone, then sampling and gathering the features, at each
//       thread count: seeds/s and sampled edges/s over --batches batches
//       (after one warm-up batch);
//   sample_bench --graph products --random-access
//       also the machine's random-access limit over an array of the graph's
//       in-edges: a dependent chain of loads (each index read gives the next
//       position: latency bound) and independent random reads of the array
//       (as many in flight as the core allows: the sampler's case, whose
//       draws of one hop are independent), in reads per second;
//   sample_bench --graph products --dump DIR
//       one batch's blocks as .npy (frontier sizes, each block's src/dst),
//       for bench/sampled.py's torch reference to train on the same blocks.
//
// Prints one JSON object per measurement.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "model/data/products.h"
#include "model/sampling/neighbor_sampler.h"
#include "model/sampling/seed_batches.h"
#include "ops/rng.h"
#include "runtime/npy.h"

namespace gm = gnnrt::model;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sampling (and gathering) --batches batches; the first batch warms up.
nlohmann::json run_sampler(const gm::NodeShard& g, const std::vector<int>& fanouts, int64_t batch, int64_t batches,
                           int threads, bool gather) {
  gm::SeedBatches seeds(g.train, batch, true, false, 0);
  gm::NeighborSampler sampler({fanouts, false, false}, g.num_nodes);
  gm::ShardNeighbors source(g, threads);
  std::vector<float> x;
  int64_t edges = 0, nodes = 0, done = 0;
  double elapsed = 0;
  const int64_t per_epoch = seeds.batches_per_epoch();
  for (int64_t i = 0; i <= batches; ++i) {
    const auto start = Clock::now();
    const auto b = seeds.batch(i / per_epoch, i % per_epoch);
    const gm::SampledBlocks s = sampler.sample(b, {0, i / per_epoch, i % per_epoch}, source);
    if (gather) gm::gather_features(g, std::span<const int32_t>(s.nodes).first(static_cast<size_t>(s.frontier.back())), x);
    if (i == 0) continue;  // warm-up
    elapsed += seconds_since(start);
    edges += s.num_edges();
    nodes += s.frontier.back();
    done += static_cast<int64_t>(b.size());
  }
  return {{"measure", gather ? "sample_and_gather" : "sample"},
          {"threads", threads},
          {"batches", batches},
          {"seeds_per_s", static_cast<double>(done) / elapsed},
          {"edges_per_s", static_cast<double>(edges) / elapsed},
          {"edges_per_batch", static_cast<double>(edges) / static_cast<double>(batches)},
          {"nodes_per_batch", static_cast<double>(nodes) / static_cast<double>(batches)},
          {"ms_per_batch", 1e3 * elapsed / static_cast<double>(batches)}};
}

// Reads of a random position of an int32 array the size of the graph's
// in-edges: dependent (a chain through a random cycle) and independent.
nlohmann::json run_random_access(int64_t size) {
  std::vector<int32_t> next(static_cast<size_t>(size));
  std::iota(next.begin(), next.end(), 0);
  // A random cyclic permutation (Sattolo), so the chain visits every slot.
  for (int64_t i = size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gnnrt::ops::below(gnnrt::ops::philox(1, 2, {static_cast<uint64_t>(i), 0, 0, 0})[0],
                                                          static_cast<uint64_t>(i)));
    std::swap(next[i], next[j]);
  }
  const int64_t reads = 20'000'000;
  auto start = Clock::now();
  int32_t at = 0;
  for (int64_t k = 0; k < reads; ++k) at = next[at];
  const double dependent = static_cast<double>(reads) / seconds_since(start);
  // Independent: positions from a cheap generator, one read each.
  uint64_t state = 88172645463325252ull, sum = 0;
  start = Clock::now();
  for (int64_t k = 0; k < reads; ++k) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    sum += static_cast<uint64_t>(next[static_cast<size_t>((static_cast<unsigned __int128>(state) * size) >> 64)]);
  }
  const double independent = static_cast<double>(reads) / seconds_since(start);
  return {{"measure", "random_access"},
          {"array_bytes", size * 4},
          {"dependent_reads_per_s", dependent},
          {"independent_reads_per_s", independent},
          {"checksum", static_cast<uint64_t>(at) + sum}};
}

void dump(const gm::NodeShard& g, const std::vector<int>& fanouts, int64_t batch, const std::filesystem::path& dir) {
  gm::SeedBatches seeds(g.train, batch, true, false, 0);
  gm::NeighborSampler sampler({fanouts, false, false}, g.num_nodes);
  gm::ShardNeighbors source(g, 1);
  const gm::SampledBlocks s = sampler.sample(seeds.batch(0, 0), {0, 0, 0}, source);
  std::filesystem::create_directories(dir);
  gnnrt::write_npy(dir / "frontier.npy", gnnrt::Tensor::from<int64_t>(s.frontier, {static_cast<int64_t>(s.frontier.size())}));
  for (size_t h = 0; h < s.blocks.size(); ++h) {
    const auto e = static_cast<int64_t>(s.blocks[h].src.size());
    gnnrt::write_npy(dir / fmt::format("block{}_src.npy", h), gnnrt::Tensor::from<int32_t>(s.blocks[h].src, {e}));
    gnnrt::write_npy(dir / fmt::format("block{}_dst.npy", h), gnnrt::Tensor::from<int32_t>(s.blocks[h].dst, {e}));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gnnrt's neighbour sampler: throughput and the machine's random-access limit"};
  std::string graph = "products", fanout_text = "15,10,5", dump_dir;
  int64_t batch = 1024, batches = 20;
  std::vector<int> thread_counts{1};
  bool random_access = false, no_gather = false;
  app.add_option("--graph", graph, "products[:key=value,...] (model/data/products.h)");
  app.add_option("--fanouts", fanout_text, "per hop, comma-separated");
  app.add_option("--batch", batch, "seeds per batch");
  app.add_option("--batches", batches, "timed batches");
  app.add_option("--threads", thread_counts, "sampler thread counts")->delimiter(',');
  app.add_flag("--random-access", random_access, "also measure the random-access limit");
  app.add_flag("--no-gather", no_gather, "sampling alone only");
  app.add_option("--dump", dump_dir, "write one batch's blocks as .npy to this folder");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> fanouts;
  for (size_t at = 0; at <= fanout_text.size();) {
    const size_t comma = std::min(fanout_text.find(',', at), fanout_text.size());
    fanouts.push_back(std::stoi(fanout_text.substr(at, comma - at)));
    at = comma + 1;
  }
  try {
    const auto start = Clock::now();
    const gm::NodeShard g = gm::make_products_shard(gm::parse_products_spec(graph), 0, 1);
    std::cout << nlohmann::json{{"measure", "generate"}, {"graph", graph}, {"nodes", g.num_nodes},
                                {"directed_edges", g.indices.size()}, {"seconds", seconds_since(start)}}
              << std::endl;
    if (!dump_dir.empty()) {
      dump(g, fanouts, batch, dump_dir);
      return 0;
    }
    if (random_access) std::cout << run_random_access(static_cast<int64_t>(g.indices.size())) << std::endl;
    for (const int threads : thread_counts) {
      std::cout << run_sampler(g, fanouts, batch, batches, threads, false) << std::endl;
      if (!no_gather) std::cout << run_sampler(g, fanouts, batch, batches, threads, true) << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "sample_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
