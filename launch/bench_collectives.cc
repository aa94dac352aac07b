#include "launch/bench_collectives.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "collectives/tuning.h"
#include "launch/bench_common.h"

namespace gnnrt::launch {
namespace {

using namespace gnnrt::collectives;

struct Row {
  Collective op;
  Algorithm algorithm;
  std::size_t bytes;
  int ranks;
  RankStats time;
  double algbw, busbw;  // GB/s
  int iterations;
};

double bus_factor(Collective op, int p) {
  switch (op) {
    case Collective::allreduce: return 2.0 * (p - 1) / p;
    case Collective::reduce_scatter:
    case Collective::allgather:
    case Collective::alltoallv: return double(p - 1) / p;
    case Collective::broadcast:
    case Collective::barrier: return 1.0;
  }
  return 1.0;
}

// One operation of `bytes` (nominal) with `algorithm`; returns the bytes it
// really moves (blocks round down to whole elements per rank), 0 to skip.
struct Case {
  std::size_t bytes = 0;
  std::function<void()> step;
};

Case make_case(Communicator& comm, Collective op, Algorithm algorithm, std::size_t nominal,
               std::vector<float>& a, std::vector<float>& b) {
  const std::size_t p = comm.size();
  const std::size_t count = nominal / sizeof(float);
  const std::size_t block = count / p;
  Case c;
  switch (op) {
    case Collective::allreduce:
      if (count == 0) return c;
      c.bytes = count * sizeof(float);
      c.step = [&comm, &a, &b, count, algorithm] {
        comm.allreduce<float>(std::span<const float>(a.data(), count), std::span(b.data(), count),
                              ReduceOp::sum, algorithm);
      };
      break;
    case Collective::broadcast:
      if (count == 0) return c;
      c.bytes = count * sizeof(float);
      c.step = [&comm, &a, count, algorithm] {
        comm.broadcast<float>(std::span(a.data(), count), 0, algorithm);
      };
      break;
    case Collective::reduce_scatter:
      if (block == 0) return c;
      c.bytes = block * p * sizeof(float);
      c.step = [&comm, &a, &b, block, p, algorithm] {
        comm.reduce_scatter<float>(std::span<const float>(a.data(), block * p),
                                   std::span(b.data(), block), ReduceOp::sum, algorithm);
      };
      break;
    case Collective::allgather:
      if (block == 0) return c;
      c.bytes = block * p * sizeof(float);
      c.step = [&comm, &a, &b, block, p, algorithm] {
        comm.allgather<float>(std::span<const float>(a.data(), block),
                              std::span(b.data(), block * p), algorithm);
      };
      break;
    case Collective::alltoallv: {
      if (block == 0) return c;
      c.bytes = block * p * sizeof(float);
      auto counts = std::make_shared<std::vector<std::size_t>>(p, block);
      c.step = [&comm, &a, &b, block, p, counts, algorithm] {
        comm.alltoallv<float>(std::span<const float>(a.data(), block * p), *counts,
                              std::span(b.data(), block * p), *counts, algorithm);
      };
      break;
    }
    case Collective::barrier: break;
  }
  return c;
}

// Fastest algorithm per measured size -> byte-range rules; a boundary sits
// halfway between two measured sizes. The choice only changes where another
// algorithm is more than 3% faster than the current one, so that timing
// noise does not flip it from size to size (a wider margin would let auto
// settle for an algorithm that much slower).
std::vector<TuningRule> rules_from(const std::vector<Row>& rows, Collective op, int ranks) {
  std::map<std::size_t, std::map<Algorithm, double>> times;  // bytes -> algorithm -> avg_us
  for (const auto& row : rows) {
    if (row.op == op && row.algorithm != Algorithm::automatic) {
      times[row.bytes][row.algorithm] = row.time.avg_us;
    }
  }
  if (op == Collective::alltoallv) {
    // Chosen by rank count alone (sizes differ per rank): the most frequent winner.
    std::map<Algorithm, int> wins;
    for (const auto& [bytes, by_algorithm] : times) {
      auto best = by_algorithm.begin();
      for (auto it = by_algorithm.begin(); it != by_algorithm.end(); ++it) {
        if (it->second < best->second) best = it;
      }
      ++wins[best->first];
    }
    if (wins.empty()) return {};
    auto most = wins.begin();
    for (auto it = wins.begin(); it != wins.end(); ++it) {
      if (it->second > most->second) most = it;
    }
    return {TuningRule{op, 0, 0, ranks, most->first}};
  }
  std::vector<std::pair<std::size_t, Algorithm>> winners;
  for (const auto& [bytes, by_algorithm] : times) {
    Algorithm best = by_algorithm.begin()->first;
    for (const auto& [algorithm, us] : by_algorithm) {
      if (us < by_algorithm.at(best)) best = algorithm;
    }
    if (!winners.empty()) {
      const auto current = by_algorithm.find(winners.back().second);
      if (current != by_algorithm.end() && current->second <= 1.03 * by_algorithm.at(best)) {
        best = current->first;
      }
    }
    winners.emplace_back(bytes, best);
  }
  std::vector<TuningRule> rules;
  for (std::size_t i = 0; i < winners.size();) {
    std::size_t j = i;
    while (j + 1 < winners.size() && winners[j + 1].second == winners[i].second) ++j;
    TuningRule rule;
    rule.op = op;
    rule.ranks = ranks;
    rule.algorithm = winners[i].second;
    rule.min_bytes = i == 0 ? 0 : winners[i - 1].first + (winners[i].first - winners[i - 1].first) / 2;
    rule.max_bytes =
        j + 1 == winners.size() ? 0 : winners[j].first + (winners[j + 1].first - winners[j].first) / 2 - 1;
    rules.push_back(rule);
    i = j + 1;
  }
  return rules;
}

}  // namespace

int run_collective_bench(Communicator& comm, const CollectiveBenchOptions& options) {
  const bool root = comm.rank() == 0;
  std::vector<Collective> ops;
  if (options.ops.empty()) {
    ops = {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
           Collective::broadcast, Collective::alltoallv};
  } else {
    for (const auto& text : options.ops) ops.push_back(parse_collective(text));
  }
  const bool all = options.algorithm.empty();
  const Algorithm only = all ? Algorithm::automatic : parse_algorithm(options.algorithm);
  if (options.min_bytes == 0 || options.max_bytes < options.min_bytes) {
    throw std::invalid_argument("need 0 < --min-bytes <= --max-bytes");
  }
  if (!options.tune.empty() && !all) {
    throw std::invalid_argument("--tune compares every algorithm; drop --algorithm");
  }
  const Placement where = placement(comm);
  if (root) {
    spdlog::info("bench collectives: {} ranks; {}", comm.size(), where.describe());
    std::printf("%-15s %-19s %12s %6s %11s %11s %11s %9s %9s\n", "op", "algorithm", "bytes",
                "ranks", "avg_us", "min_us", "max_us", "algbw", "busbw");
    std::fflush(stdout);
  }
  std::vector<float> a(options.max_bytes / sizeof(float) + comm.size(), 1.0f);
  std::vector<float> b(a.size(), 0.0f);
  std::vector<Row> rows;
  bool ran_any = false;
  for (Collective op : ops) {
    // Every algorithm, then `auto` (what the tuning table picks), unless
    // --algorithm names one (`auto` included).
    std::vector<Algorithm> algorithms;
    for (Algorithm algorithm : algorithms_for(op)) {
      if (all || only == algorithm) algorithms.push_back(algorithm);
    }
    if (all || only == Algorithm::automatic) algorithms.push_back(Algorithm::automatic);
    if (algorithms.empty()) continue;  // --algorithm names one this op lacks
    ran_any = true;
    // Per size, the algorithms are timed interleaved (time_interleaved), so
    // that the comparison between them holds even when the machine's speed
    // drifts during the sweep.
    for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
      std::vector<Row> group;
      std::vector<std::function<void()>> steps;
      for (Algorithm algorithm : algorithms) {
        Case c = make_case(comm, op, algorithm, bytes, a, b);
        if (c.bytes == 0) continue;
        group.push_back(Row{op, algorithm, c.bytes, comm.size(), {}, 0, 0, 0});
        steps.push_back(std::move(c.step));
      }
      if (steps.empty()) continue;
      const bool small = group.front().bytes < (1u << 20);
      std::vector<int> iterations;
      const auto times = time_interleaved(comm, steps, options.seconds_per_size, small ? 20 : 2,
                                          small ? 20 : 5, 100000, options.rounds, &iterations);
      for (std::size_t i = 0; i < group.size(); ++i) {
        Row& row = group[i];
        row.time = times[i];
        row.iterations = iterations[i];
        row.algbw = row.bytes / (row.time.avg_us * 1e3);
        row.busbw = row.algbw * bus_factor(op, comm.size());
        rows.push_back(row);
        if (root) {
          std::printf("%-15s %-19s %12zu %6d %11.2f %11.2f %11.2f %9.3f %9.3f\n",
                      std::string(name(op)).c_str(), std::string(name(row.algorithm)).c_str(),
                      row.bytes, row.ranks, row.time.avg_us, row.time.min_us, row.time.max_us,
                      row.algbw, row.busbw);
          std::fflush(stdout);
        }
      }
    }
  }
  if (!ran_any) {
    throw std::invalid_argument("no operation selected has algorithm '" + options.algorithm + "'");
  }
  if (root) std::printf("algbw, busbw in GB/s (10^9 bytes/s); %s\n", where.describe().c_str());

  if (root && !options.json.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& row : rows) {
      list.push_back({{"op", name(row.op)},
                      {"algorithm", name(row.algorithm)},
                      {"bytes", row.bytes},
                      {"ranks", row.ranks},
                      {"avg_us", row.time.avg_us},
                      {"min_us", row.time.min_us},
                      {"max_us", row.time.max_us},
                      {"algbw", row.algbw},
                      {"busbw", row.busbw},
                      {"iterations", row.iterations},
                      {"oversubscribed", where.oversubscribed},
                      {"yield_when_idle", where.yield_when_idle}});
    }
    write_atomically(options.json, list.dump(1) + "\n");
    spdlog::info("bench collectives: wrote {} rows to {}", rows.size(), options.json);
  }
  if (root && !options.tune.empty()) {
    TuningTable table;
    if (std::filesystem::exists(options.tune)) table = TuningTable::load(options.tune);
    for (Collective op : ops) table.replace(op, comm.size(), rules_from(rows, op, comm.size()));
    table.set_measured_on(fmt::format("gnnrt bench collectives --tune; {}", where.describe()));
    table.save(options.tune);
    spdlog::info("bench collectives: wrote the tuning table for {} ranks to {}", comm.size(),
                 options.tune);
  }
  return 0;
}

}  // namespace gnnrt::launch
