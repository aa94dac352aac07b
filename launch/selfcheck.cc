#include "launch/selfcheck.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/gather.h"
#include "ops/rng.h"
#include "ops/scatter.h"
#include "ops/segment_softmax.h"
#include "ops/spmm.h"
#include "runtime/host_memory.h"

namespace gnnrt::launch {
namespace {

using namespace gnnrt::ops;
using Index = int32_t;
using Floats = HostVector<float>;

// Test data from ops/rng.h: each array is its own stream of the seed, so
// every machine checks the same inputs.
struct Draws {
  uint64_t seed;
  uint64_t stream = 0;

  Floats floats(int64_t n) {
    Floats v(n);
    const uint64_t s = ++stream;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += 4) {
      const auto z = normals(philox(seed, s, {static_cast<uint64_t>(i / 4), 0, 0, 0}));
      for (int64_t j = 0; j < 4 && i + j < n; ++j) v[i + j] = static_cast<float>(z[j]);
    }
    return v;
  }
  std::vector<Index> indices(int64_t n, int64_t bound) {
    std::vector<Index> v(n);
    const uint64_t s = ++stream;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const auto w = philox(seed, s, {static_cast<uint64_t>(i), 0, 0, 0});
      v[i] = static_cast<Index>(below(w[0], static_cast<uint64_t>(bound)));
    }
    return v;
  }
};

template <typename T>
bool same_bits(const T& a, const T& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Report {
 public:
  void check(const std::string& name, bool ok, double seconds = 0, double bytes = 0) {
    failures_ += ok ? 0 : 1;
    if (seconds > 0 && bytes > 0) {
      spdlog::info("{:<48} {}  {:8.2f} ms  {:6.2f} GB/s", name, ok ? "ok  " : "FAIL", seconds * 1e3,
                   bytes / seconds / 1e9);
    } else {
      spdlog::info("{:<48} {}", name, ok ? "ok  " : "FAIL");
    }
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

}  // namespace

bool run_selfcheck(const SelfcheckOptions& o) {
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  omp_set_num_threads(threads);
  const int64_t E = o.edges, N = std::max<int64_t>(1, o.edges / 10), F = o.features;
  spdlog::info("selfcheck: random graph E = {}, N = {}, F = {}, {} thread(s)", E, N, F, threads);
  Draws rng{o.seed};
  const auto src = rng.indices(E, N), dst = rng.indices(E, N);
  const Floats x = rng.floats(N * F), w = rng.floats(E);
  const Floats grad_out = rng.floats(N * F);
  Adjacency<Index> adj;
  const double build_s = seconds_of([&] { adj = Adjacency<Index>::build(src, dst, N, N); });
  Report report;
  report.check("csr build (both directions)", true, build_s, 2.0 * E * 4 * 3);

  // Unfused reference: messages[e] = w_e * x[src[e]] materialised, then scattered.
  Floats messages(E * F);
  gather_forward<float, Index>(adj.by_src, F, x, messages);
  Floats weighted(messages);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t f = 0; f < F; ++f) weighted[e * F + f] = w[e] * messages[e * F + f];
  }
  const double row_bytes = static_cast<double>(E) * F * 4 + N * F * 4 + E * 4 + N * 8;
  for (Reduce reduce : {Reduce::kSum, Reduce::kMean, Reduce::kMax, Reduce::kMin}) {
    Floats fused(N * F), unfused(N * F);
    std::vector<Index> arg_fused(has_arg(reduce) ? N * F : 0), arg_unfused(arg_fused.size());
    const double s = seconds_of(
        [&] { spmm_forward<float, Index>(reduce, adj, F, x, {}, fused, arg_fused); });
    scatter_forward<float, Index>(reduce, adj.by_dst, F, messages, unfused, arg_unfused);
    report.check(fmt::format("spmm_{} == gather -> scatter_{}", to_string(reduce),
                             to_string(reduce)),
                 same_bits(fused, unfused) && same_bits(arg_fused, arg_unfused), s, row_bytes);
  }
  {
    Floats fused(N * F), unfused(N * F);
    const double s =
        seconds_of([&] { spmm_forward<float, Index>(Reduce::kSum, adj, F, x, w, fused, {}); });
    scatter_forward<float, Index>(Reduce::kSum, adj.by_dst, F, weighted, unfused, {});
    report.check("weighted spmm == gather -> scale -> scatter", same_bits(fused, unfused), s,
                 row_bytes + E * 4);
  }
  {
    // d x = scatter over sources of w_e * grad_out[dst(e)].
    Floats grad_x(N * F), grad_w(E), gathered(E * F), reference(N * F);
    const double s = seconds_of([&] {
      spmm_backward<float, Index>(Reduce::kSum, adj, F, x, w, grad_out, {}, grad_x, grad_w);
    });
    gather_forward<float, Index>(adj.by_dst, F, grad_out, gathered);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t f = 0; f < F; ++f) gathered[e * F + f] *= w[e];
    }
    scatter_forward<float, Index>(Reduce::kSum, adj.by_src, F, gathered, reference, {});
    report.check("spmm backward == gather -> scale -> scatter", same_bits(grad_x, reference), s,
                 3 * row_bytes);
  }
  {
    Floats one(N * F), many(N * F);
    omp_set_num_threads(1);
    const double s1 =
        seconds_of([&] { spmm_forward<float, Index>(Reduce::kSum, adj, F, x, w, one, {}); });
    omp_set_num_threads(std::max(2, threads));
    const double sn =
        seconds_of([&] { spmm_forward<float, Index>(Reduce::kSum, adj, F, x, w, many, {}); });
    omp_set_num_threads(threads);
    report.check(fmt::format("spmm bits: 1 thread == {} threads ({:.1f}x faster)",
                             std::max(2, threads), s1 / sn),
                 same_bits(one, many));
  }
  {
    const int64_t H = 4;
    const Floats scores = rng.floats(E * H);
    Floats alpha(E * H);
    const double s = seconds_of(
        [&] { segment_softmax_forward<float, Index>(adj.by_dst, H, scores, alpha); });
    std::vector<double> sums(N * H, 0.0);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t h = 0; h < H; ++h) sums[dst[e] * H + h] += alpha[e * H + h];
    }
    bool ok = true;
    for (int64_t v = 0; v < N; ++v) {
      for (int64_t h = 0; h < H && adj.by_dst.degree(v) > 0; ++h) {
        ok &= std::abs(sums[v * H + h] - 1.0) < 1e-5;
      }
    }
    report.check("segment_softmax sums to 1 per destination", ok, s, 2.0 * E * H * 4);
  }
  {
    const int64_t m = 300, k = 70, n = 50;
    const Floats a = rng.floats(m * k), b = rng.floats(k * n);
    Floats c(m * n);
    const double s = seconds_of([&] { matmul<float>(a, b, c, m, k, n); });
    bool ok = true;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t l = 0; l < k; ++l) want += static_cast<double>(a[i * k + l]) * b[l * n + j];
        ok &= std::abs(c[i * n + j] - want) <= 1e-4 * (1 + std::abs(want));
      }
    }
    report.check("matmul (OpenBLAS) == float64 triple loop", ok, s, 4.0 * (m * k + k * n + m * n));
  }
  if (report.failures() > 0) {
    spdlog::error("selfcheck: {} check(s) FAILED", report.failures());
    return false;
  }
  spdlog::info("selfcheck: all checks passed");
  return true;
}

}  // namespace gnnrt::launch
