#include "launch/bench_halo.h"

#include <Random123/philox.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "collectives/halo_exchange.h"
#include "launch/bench_common.h"

namespace gnnrt::launch {
namespace {

using namespace gnnrt::collectives;

uint64_t draw(uint64_t counter, uint64_t seed) {
  r123::Philox2x64 rng;
  return rng({{counter, 0}}, {{seed}})[0];
}

}  // namespace

int run_halo_bench(Communicator& comm, const HaloBenchOptions& options) {
  const int p = comm.size(), me = comm.rank();
  if (p > 64) throw std::invalid_argument("bench halo supports at most 64 ranks");
  if (options.nodes < 1 || options.avg_degree <= 0 || options.features < 1 ||
      options.locality < 0 || options.locality > 1 || options.window < 0) {
    throw std::invalid_argument("bench halo: need --nodes >= 1, --avg-degree > 0, --features >= 1, "
                                "0 <= --locality <= 1, --window >= 0");
  }
  const bool by_destination = options.partition == "destination";
  if (!by_destination && options.partition != "random") {
    throw std::invalid_argument("bench halo: --partition is random or destination, not '" +
                                options.partition + "'");
  }
  const int64_t N = options.nodes, F = options.features;
  const int64_t E = static_cast<int64_t>(N * options.avg_degree);

  // Which ranks hold each vertex: the owners of the edges that touch it.
  std::vector<uint64_t> holders(N, 0);
  for (int64_t e = 0; e < E; ++e) {
    const uint64_t bits = draw(static_cast<uint64_t>(e), options.seed);
    const int64_t dst = static_cast<int64_t>((bits >> 32) % N);
    const uint64_t more = draw(static_cast<uint64_t>(e), options.seed + 2);
    const bool local = double(more >> 11) * 0x1.0p-53 < options.locality;
    const int64_t src = local ? ((dst + static_cast<int64_t>((bits & 0xffffffffu) %
                                                            (2 * options.window + 1)) -
                                  options.window) % N + N) % N
                              : static_cast<int64_t>((bits & 0xffffffffu) % N);
    const int owner = by_destination ? static_cast<int>(dst * p / N)
                                     : static_cast<int>(draw(e, options.seed + 1) % p);
    holders[src] |= uint64_t{1} << owner;
    holders[dst] |= uint64_t{1} << owner;
  }
  MirrorTable table;
  int64_t rows = 0, held = 0, replicas = 0;
  std::vector<int32_t> others;
  for (int64_t v = 0; v < N; ++v) {
    const uint64_t mask = holders[v];
    if (mask != 0) {
      ++held;
      replicas += std::popcount(mask);
    }
    if (!(mask >> me & 1)) continue;
    others.clear();
    for (int q = 0; q < p; ++q) {
      if (q != me && (mask >> q & 1)) others.push_back(q);
    }
    if (!others.empty()) table.add(rows, v, others);
    ++rows;
  }
  const double replication = held > 0 ? double(replicas) / held : 0.0;
  const Placement where = placement(comm);
  if (me == 0) {
    spdlog::info("bench halo: N = {}, E = {}, F = {}, locality {} (window {}), {} partition over "
                 "{} ranks, replication factor {:.2f}; {}", N, E, F, options.locality,
                 options.window, options.partition, p, replication, where.describe());
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

  std::vector<float> dense(static_cast<std::size_t>(N * F), 1.0f);
  const double dense_bytes = double(N) * F * sizeof(float) * 2.0 * (p - 1) / p;
  results.push_back({"dense allreduce",
                     time_loop(comm, [&] { comm.allreduce<float>(dense); }, options.seconds, 2, 3, 10000),
                     dense_bytes / 1e6});
  dense = {};

  std::vector<float> local(static_cast<std::size_t>(rows * F), 1.0f);
  for (auto transport : {HaloTransport::point_to_point, HaloTransport::neighbor}) {
    HaloExchange halo(comm, table, rows, transport);
    const double sent = double(halo.rows_sent()) * F * sizeof(float);
    results.push_back({transport == HaloTransport::neighbor ? "halo neighbor" : "halo p2p",
                       time_loop(comm, [&] { halo.run<float>(local, F, ReduceOp::sum); },
                                 options.seconds, 2, 3, 100000),
                       average_over_ranks(sent) / 1e6});
  }

  if (me == 0) {
    const double dense_us = results.front().time.avg_us;
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : results) {
      std::printf("%-16s %6d %11.1f %11.1f %11.1f %14.3f %8.2fx\n", r.method.c_str(), p,
                  r.time.avg_us, r.time.min_us, r.time.max_us, r.mb_sent, dense_us / r.time.avg_us);
      list.push_back({{"method", r.method}, {"ranks", p}, {"nodes", N}, {"edges", E},
                      {"features", F}, {"partition", options.partition},
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
