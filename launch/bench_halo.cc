#include "launch/bench_halo.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "collectives/halo_exchange.h"
#include "launch/bench_common.h"
#include "model/data/dataset.h"
#include "model/data/partition.h"
#include "ops/rng.h"

namespace gnnrt::launch {
namespace {

using namespace gnnrt::collectives;

uint64_t draw(uint64_t counter, uint64_t seed) { return ops::philox(seed, 0, {counter, 0, 0, 0})[0]; }

// The benchmark's own graph: every rank draws the same one.
void generate_graph(const HaloBenchOptions& options, std::vector<int64_t>& src,
                    std::vector<int64_t>& dst) {
  const int64_t N = options.nodes;
  const int64_t E = static_cast<int64_t>(N * options.avg_degree);
  src.resize(E);
  dst.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    const uint64_t bits = draw(static_cast<uint64_t>(e), options.seed);
    dst[e] = static_cast<int64_t>((bits >> 32) % N);
    const uint64_t more = draw(static_cast<uint64_t>(e), options.seed + 2);
    const bool local = double(more >> 11) * 0x1.0p-53 < options.locality;
    src[e] = local ? ((dst[e] + static_cast<int64_t>((bits & 0xffffffffu) %
                                                     (2 * options.window + 1)) -
                       options.window) % N + N) % N
                   : static_cast<int64_t>((bits & 0xffffffffu) % N);
  }
}

}  // namespace

int run_halo_bench(Communicator& comm, const HaloBenchOptions& options) {
  const int p = comm.size(), me = comm.rank();
  if (options.nodes < 1 || options.avg_degree <= 0 || options.features < 1 ||
      options.locality < 0 || options.locality > 1 || options.window < 0) {
    throw std::invalid_argument("bench halo: need --nodes >= 1, --avg-degree > 0, --features >= 1, "
                                "0 <= --locality <= 1, --window >= 0");
  }
  model::PartitionOptions partitioning;
  partitioning.method = model::parse_partition_method(options.partition);
  partitioning.parts = p;
  partitioning.seed = options.seed;

  // The graph: a data set's edges, or the generated graph.
  std::string graph_name = "generated";
  std::vector<int64_t> src, dst;
  int64_t N = options.nodes;
  if (!options.dataset.empty()) {
    model::Dataset data = model::load_dataset(options.dataset);
    graph_name = data.name;
    N = data.num_nodes;
    src = std::move(data.src);
    dst = std::move(data.dst);
  } else {
    generate_graph(options, src, dst);
  }
  const int64_t F = options.features;
  const int64_t E = static_cast<int64_t>(src.size());

  // Every rank partitions the same graph the same way; a rank's rows are
  // the vertices it holds, and those held elsewhere too are its mirrors.
  const model::EdgePartition parts = model::partition_edges(N, src, dst, partitioning);
  const model::PartitionStats stats = parts.stats();
  MirrorTable table;
  int64_t rows = 0;
  std::vector<int32_t> others;
  for (int64_t v = 0; v < N; ++v) {
    const auto holders = parts.replicas(v);
    if (std::find(holders.begin(), holders.end(), me) == holders.end()) continue;
    others.clear();
    for (int32_t q : holders) {
      if (q != me) others.push_back(q);
    }
    if (!others.empty()) table.add(rows, v, others);
    ++rows;
  }
  const double replication = stats.replication_factor;
  const Placement where = placement(comm);
  if (me == 0) {
    const std::string graph =
        options.dataset.empty()
            ? fmt::format("generated graph (locality {}, window {})", options.locality,
                          options.window)
            : graph_name;
    spdlog::info("bench halo: {}: N = {}, E = {}, F = {}; {} partition over {} ranks: "
                 "replication factor {:.3f}, {} shared vertices, edge balance {:.2f}; {}",
                 graph, N, E, F, model::name(partitioning.method), p, replication, stats.shared_vertices,
                 stats.edge_balance, where.describe());
    std::printf("%-16s %6s %11s %11s %11s %14s %9s\n", "method", "ranks", "avg_us", "min_us",
                "max_us", "MB_sent/rank", "speedup");
  }

  struct Result {
    std::string method;
    RankStats time;
    double mb_sent;  // average over ranks
  };
  std::vector<Result> results;
  auto average_over_ranks = [&](double v) {
    std::vector<double> x{v};
    comm.allreduce<double>(x, ReduceOp::sum, Algorithm::native);
    return x[0] / p;
  };

  // The dense allreduce and both transports, timed interleaved
  // (bench_common.h) so that a slow stretch of a shared machine does not
  // favour one of them.
  std::vector<float> dense(static_cast<std::size_t>(N * F), 1.0f);
  std::vector<float> local(static_cast<std::size_t>(rows * F), 1.0f);
  HaloExchange p2p(comm, table, rows, HaloTransport::point_to_point);
  HaloExchange neighbor(comm, table, rows, HaloTransport::neighbor);
  const std::vector<std::function<void()>> steps{
      [&] { comm.allreduce<float>(dense); },
      [&] { p2p.run<float>(local, F, ReduceOp::sum); },
      [&] { neighbor.run<float>(local, F, ReduceOp::sum); }};
  const auto times = time_interleaved(comm, steps, options.seconds, 2, 3, 100000, options.rounds);
  results.push_back(
      {"dense allreduce", times[0], double(N) * F * sizeof(float) * 2.0 * (p - 1) / p / 1e6});
  results.push_back({"halo p2p", times[1],
                     average_over_ranks(double(p2p.rows_sent()) * F * sizeof(float)) / 1e6});
  results.push_back({"halo neighbor", times[2],
                     average_over_ranks(double(neighbor.rows_sent()) * F * sizeof(float)) / 1e6});

  if (me == 0) {
    const double dense_us = results.front().time.avg_us;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : results) {
      std::printf("%-16s %6d %11.1f %11.1f %11.1f %14.3f %8.2fx\n", r.method.c_str(), p,
                  r.time.avg_us, r.time.min_us, r.time.max_us, r.mb_sent, dense_us / r.time.avg_us);
      list.push_back({{"method", r.method}, {"ranks", p}, {"graph", graph_name}, {"nodes", N},
                      {"edges", E}, {"features", F}, {"partition", model::name(partitioning.method)},
                      {"shared_vertices", stats.shared_vertices},
                      {"edge_balance", stats.edge_balance},
                      {"locality", options.locality}, {"window", options.window},
                      {"replication_factor", replication}, {"avg_us", r.time.avg_us},
                      {"min_us", r.time.min_us}, {"max_us", r.time.max_us},
                      {"mb_sent_per_rank", r.mb_sent}, {"speedup_vs_dense", dense_us / r.time.avg_us},
                      {"oversubscribed", where.oversubscribed}});
    }
    std::printf("speedup = dense allreduce time / method time; %s\n", where.describe().c_str());
    if (!options.json.empty()) {
      write_atomically(options.json, list.dump(1) + "\n");
      spdlog::info("bench halo: wrote {}", options.json);
    }
  }
  return 0;
}

}  // namespace gnnrt::launch
