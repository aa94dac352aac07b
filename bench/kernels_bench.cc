// Throughput of every kernel on uniform random graphs: E in {1e5, 1e6, 4e6}
// edges, N = E / 10 nodes, F in {16, 64, 128} features, 1 and 2 OpenMP
// threads; plus a STREAM-style triad, the memory-bandwidth yardstick that
// bench/compare_torch.py divides by.
//
// Effective bytes (the bytes/s column) count the data a kernel must touch
// once: E*F*4 of messages or gathered rows, the index bytes it reads (CSR
// rowptr, edge and column arrays) and N*F*4 (or E*F*4) written. The CSR is
// built once per graph, outside the timed loop, as in training.
//
// Prints Google Benchmark's table; writes JSON to bench/results/kernels.json
// under the build tree unless --benchmark_out is given.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/gather.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/spmm.h"
#include "runtime/host_memory.h"

namespace gnnrt::bench {
namespace {

using namespace gnnrt::ops;
using Index = int32_t;
constexpr int64_t kHeads = 4;

HostVector<float> random_floats(int64_t n, uint32_t seed) {
  HostVector<float> v(n);
#pragma omp parallel
  {
    std::mt19937 rng(seed + 7919 * omp_get_thread_num());
    std::normal_distribution<float> normal;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) v[i] = normal(rng);
  }
  return v;
}

HostVector<Index> random_indices(int64_t n, int64_t bound, uint32_t seed) {
  HostVector<Index> v(n);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Index> pick(0, static_cast<Index>(bound - 1));
  for (auto& i : v) i = pick(rng);
  return v;
}

// Inputs for one edge count, built on first use and kept while benchmarks of
// that E run (they are registered E-major); arrays per F are built lazily.
struct Graph {
  int64_t E, N;
  HostVector<Index> src, dst;
  Adjacency<Index> adj;
  HostVector<float> weight, scores;
  std::map<int64_t, HostVector<float>> edge_rows, node_rows, node_rows2;
};

Graph& graph(int64_t E) {
  static std::unique_ptr<Graph> g;
  if (!g || g->E != E) {
    g.reset();
    auto n = std::make_unique<Graph>();
    n->E = E;
    n->N = E / 10;
    n->src = random_indices(E, n->N, 1);
    n->dst = random_indices(E, n->N, 2);
    n->adj = Adjacency<Index>::build(n->src, n->dst, n->N, n->N);
    n->weight = random_floats(E, 3);
    n->scores = random_floats(E * kHeads, 4);
    g = std::move(n);
  }
  return *g;
}

const HostVector<float>& rows(std::map<int64_t, HostVector<float>>& cache, int64_t count,
                               int64_t F, uint32_t seed) {
  auto it = cache.find(F);
  if (it == cache.end()) it = cache.emplace(F, random_floats(count * F, seed)).first;
  return it->second;
}

struct Shape {
  int64_t E, N, F;
  int64_t csr_bytes(bool with_col, bool with_edge) const {
    return 8 * (N + 1) + (with_col ? 4 * E : 0) + (with_edge ? 4 * E : 0);
  }
};

using Kernel = std::function<void(benchmark::State&, Graph&, const Shape&)>;

struct NamedKernel {
  std::string name;
  Kernel kernel;
  std::vector<int64_t> features;
  std::vector<int64_t> threads;
};

std::vector<NamedKernel>& kernels() {
  static std::vector<NamedKernel> list;
  return list;
}

void register_kernel(const std::string& name, Kernel kernel,
                     std::vector<int64_t> features = {16, 64, 128},
                     std::vector<int64_t> threads = {1, 2}) {
  kernels().push_back({name, std::move(kernel), std::move(features), std::move(threads)});
}

// STREAM triad a = b + s * c over 3 x 128 MiB, far beyond the L3 cache:
// bytes per second of the median of `runs` passes.
constexpr int64_t kTriadElements = int64_t{1} << 25;

double triad_pass_seconds() {
  static std::vector<float> a(kTriadElements), b(kTriadElements, 1.0f),
      c(kTriadElements, 2.0f);  // plain pages, like torch
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < kTriadElements; ++i) a[i] = b[i] + 3.0f * c[i];
  benchmark::DoNotOptimize(a.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double triad_bytes_per_second(int runs) {
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) seconds.push_back(triad_pass_seconds());
  std::nth_element(seconds.begin(), seconds.begin() + runs / 2, seconds.end());
  return 3.0 * kTriadElements * 4 / seconds[runs / 2];
}

// Registers E-major, so the graph of one E is built once for all kernels.
// Each run also measures the triad right after its timing loop, at the same
// thread count (counter triad_bytes_per_second): a shared machine's memory
// speed drifts within minutes, and "% of triad" should compare the kernel
// with the machine of the same moment (docs/benchmarks.md).
void register_sweep() {
  for (int64_t E : {100000, 1000000, 4000000}) {
    for (const auto& [name, kernel, features, thread_counts] : kernels()) {
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [kernel](benchmark::State& state) {
        const int64_t E = state.range(0), F = state.range(1);
        omp_set_num_threads(static_cast<int>(state.range(2)));
        Graph& g = graph(E);
        kernel(state, g, Shape{E, g.N, F});
        state.counters["triad_bytes_per_second"] = triad_bytes_per_second(5);
        state.counters["E"] = static_cast<double>(E);
        state.counters["F"] = static_cast<double>(F);
        state.counters["threads"] = static_cast<double>(state.range(2));
      });
      b->ArgNames({"E", "F", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
      for (int64_t F : features) {
        for (int64_t t : thread_counts) b->Args({E, F, t});
      }
    }
  }
}

void set_bytes(benchmark::State& state, int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
}

void register_all() {
  // scatter_<reduce> takes scatter's own choice of loop; scatter_sum_walk (1
  // and 2 threads) and scatter_sum_stream (one thread: it streams on the
  // calling thread) force one, to check where the choice switches.
  const auto scatter_kernel = [](Reduce reduce, ScatterPath path) {
    return [reduce, path](benchmark::State& state, Graph& g, const Shape& s) {
      const auto& src = rows(g.edge_rows, s.E, s.F, 10);
      const Csr<Index>& seg = g.adj.by_dst;  // the csr of index = dst
      HostVector<float> out(s.N * s.F);
      HostVector<Index> arg(has_arg(reduce) ? s.N * s.F : 0);
      for (auto _ : state) {
        scatter_forward<float, Index>(reduce, seg, s.F, src, out, arg, path);
        benchmark::DoNotOptimize(out.data());
      }
      set_bytes(state, s.E * s.F * 4 + s.csr_bytes(false, true) +
                           s.N * s.F * (4 + (has_arg(reduce) ? 4 : 0)));
    };
  };
  register_kernel("scatter_sum_walk", scatter_kernel(Reduce::kSum, ScatterPath::kCsrWalk),
                  {4, 16, 32, 64, 128});
  register_kernel("scatter_sum_stream", scatter_kernel(Reduce::kSum, ScatterPath::kStreaming),
                  {4, 16, 32, 64, 128}, {1});
  for (Reduce reduce : {Reduce::kSum, Reduce::kMean, Reduce::kMax, Reduce::kMin}) {
    const std::string r(to_string(reduce));
    register_kernel("scatter_" + r, scatter_kernel(reduce, ScatterPath::kAuto));
    register_kernel("spmm_" + r, [reduce](benchmark::State& state, Graph& g, const Shape& s) {
      const auto& x = rows(g.node_rows, s.N, s.F, 11);
      HostVector<float> out(s.N * s.F);
      HostVector<Index> arg(has_arg(reduce) ? s.N * s.F : 0);
      for (auto _ : state) {
        spmm_forward<float, Index>(reduce, g.adj, s.F, x, {}, out, arg);
        benchmark::DoNotOptimize(out.data());
      }
      set_bytes(state, s.E * s.F * 4 + s.csr_bytes(true, false) +
                           s.N * s.F * (4 + (has_arg(reduce) ? 4 : 0)));
    });
  }
  register_kernel("scatter_sum_backward", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& grad_out = rows(g.node_rows, s.N, s.F, 11);
    HostVector<float> grad_src(s.E * s.F);
    for (auto _ : state) {
      scatter_backward<float, Index>(Reduce::kSum, g.adj.by_dst, s.F, grad_out, {}, grad_src);
      benchmark::DoNotOptimize(grad_src.data());
    }
    set_bytes(state, s.N * s.F * 4 + s.csr_bytes(false, true) + s.E * s.F * 4);
  });
  register_kernel("gather", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& x = rows(g.node_rows, s.N, s.F, 11);
    HostVector<float> out(s.E * s.F);
    for (auto _ : state) {
      gather_forward<float, Index>(g.adj.by_src, s.F, x, out);
      benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, s.E * s.F * 4 + s.csr_bytes(false, true) + s.E * s.F * 4);
  });
  register_kernel("spmm_weighted_sum", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& x = rows(g.node_rows, s.N, s.F, 11);
    HostVector<float> out(s.N * s.F);
    for (auto _ : state) {
      spmm_forward<float, Index>(Reduce::kSum, g.adj, s.F, x, g.weight, out, {});
      benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, s.E * s.F * 4 + s.csr_bytes(true, true) + s.E * 4 + s.N * s.F * 4);
  });
  register_kernel("spmm_sum_backward", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& x = rows(g.node_rows, s.N, s.F, 11);
    const auto& grad_out = rows(g.node_rows2, s.N, s.F, 12);
    HostVector<float> grad_x(s.N * s.F), grad_w(s.E);
    for (auto _ : state) {
      spmm_backward<float, Index>(Reduce::kSum, g.adj, s.F, x, g.weight, grad_out, {}, grad_x,
                                  grad_w);
      benchmark::DoNotOptimize(grad_x.data());
    }
    // grad_x: one gathered row per edge; grad_w: two rows per edge.
    set_bytes(state, 3 * s.E * s.F * 4 + 2 * s.csr_bytes(true, true) + s.N * s.F * 4 + s.E * 8);
  });
  register_kernel("sddmm_dot", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& a = rows(g.node_rows, s.N, s.F, 11);
    const auto& b = rows(g.node_rows2, s.N, s.F, 12);
    HostVector<float> out(s.E * kHeads);
    for (auto _ : state) {
      sddmm_dot_forward<float, Index>(g.adj, s.F, kHeads, a, b, out);
      benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, s.E * s.F * 4 + s.N * s.F * 4 + s.csr_bytes(true, true) + s.E * kHeads * 4);
  });
  register_kernel("segment_softmax", [](benchmark::State& state, Graph& g, const Shape& s) {
    HostVector<float> alpha(s.E * kHeads);
    for (auto _ : state) {
      segment_softmax_forward<float, Index>(g.adj.by_dst, kHeads, g.scores, alpha);
      benchmark::DoNotOptimize(alpha.data());
    }
    set_bytes(state, 2 * s.E * kHeads * 4 + s.csr_bytes(false, true));
  }, {16});  // no feature width: heads = 4 scores per edge
  register_kernel("matmul_NxF_FxF", [](benchmark::State& state, Graph& g, const Shape& s) {
    const auto& x = rows(g.node_rows, s.N, s.F, 11);
    const HostVector<float> w = random_floats(s.F * s.F, 5);
    HostVector<float> out(s.N * s.F);
    for (auto _ : state) {
      matmul<float>(x, w, out, s.N, s.F, s.F);
      benchmark::DoNotOptimize(out.data());
    }
    set_bytes(state, 2 * s.N * s.F * 4 + s.F * s.F * 4);
    state.counters["GFLOPS"] = benchmark::Counter(2.0 * s.N * s.F * s.F * state.iterations() / 1e9,
                                                  benchmark::Counter::kIsRate);
  });

  register_sweep();

  // The triad on its own (its bytes per second is the yardstick's).
  benchmark::RegisterBenchmark("triad", [](benchmark::State& state) {
    omp_set_num_threads(static_cast<int>(state.range(0)));
    for (auto _ : state) state.SetIterationTime(triad_pass_seconds());
    state.SetBytesProcessed(state.iterations() * 3 * kTriadElements * 4);
    state.counters["threads"] = static_cast<double>(state.range(0));
  })
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace gnnrt::bench

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  bool has_out = false, has_warmup = false;
  for (int i = 1; i < argc; ++i) {
    has_out |= std::string(argv[i]).rfind("--benchmark_out=", 0) == 0;
    has_warmup |= std::string(argv[i]).rfind("--benchmark_min_warmup_time=", 0) == 0;
  }
  // A warm-up absorbs first touches of fresh pages and huge-page faults.
  std::string warmup_flag = "--benchmark_min_warmup_time=0.2";
  if (!has_warmup) args.push_back(warmup_flag.data());
  std::string out_flag;
  if (!has_out) {
    const auto dir = std::filesystem::path(GNNRT_BENCH_RESULTS);
    std::filesystem::create_directories(dir);
    out_flag = "--benchmark_out=" + (dir / "kernels.json").string();
    args.push_back(out_flag.data());
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  gnnrt::bench::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
