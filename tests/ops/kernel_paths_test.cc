// A kernel's alternative paths give the same bits: scatter's streaming and
// CSR walks, sparse_matmul's one and pair walks and its gradient's walks,
// spmm's head paths, int32 and int64 indices, pulls that stay in their span,
// padded narrow widths, matmul's padding, head dots and the attention
// gradient against plain loops.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/rng.h"
#include "ops/gather.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_reduce.h"
#include "ops/segment_softmax.h"
#include "ops/sparse_matmul.h"
#include "ops/spmm.h"
#include "tests/ops/op_harness.h"

namespace gnnrt::testing {
namespace {

// scatter's two loops for sum and mean (the CSR walk, and streaming src in
// edge order on the calling thread) must give the same bits up to a NaN's
// sign, with values holding ties, NaN, both infinities and both zeros, an
// empty row and a row of 300 edges. The graphs are large enough that the
// two-thread walk runs in parallel. (max and min have one loop, the walk:
// the goldens check it against torch.)
struct PathCase {
  std::string name;
  int64_t rows, features;
  int64_t long_row_edges;  // edges added to row 0 on top of ~8 per row
};

template <typename T, typename I>
void expect_paths_agree(const PathCase& pc, ops::Reduce reduce, int threads) {
  uint64_t draws = 0;
  const auto rng = [&] { return ops::philox(11, 1, {draws++, 0, 0, 0})[0]; };
  std::vector<I> index;
  for (int64_t e = 0; e < 8 * pc.rows; ++e) {
    index.push_back(static_cast<I>(1 + ops::below(rng(), pc.rows - 2)));  // the last row stays empty
  }
  for (int64_t e = 0; e < pc.long_row_edges; ++e) {
    index.insert(index.begin() + static_cast<int64_t>(rng() % (index.size() + 1)), I(0));
  }
  const int64_t E = static_cast<int64_t>(index.size()), F = pc.features;
  const auto seg = ops::Csr<I>::build(index, pc.rows);
  std::vector<T> src(E * F);
  const T specials[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(), T(0), -T(0)};
  for (T& v : src) v = rng() % 16 == 0 ? specials[rng() % 5] : T(static_cast<int>(rng() % 7) - 3);

  omp_set_num_threads(threads);
  const bool arg = ops::has_arg(reduce);
  std::vector<T> walked(pc.rows * F), streamed(pc.rows * F, T(-9));
  std::vector<I> walked_arg(arg ? pc.rows * F : 0), streamed_arg(walked_arg.size(), I(-9));
  ops::scatter_forward<T, I>(reduce, seg, F, src, walked, walked_arg, ops::ScatterPath::kCsrWalk);
  ops::scatter_forward<T, I>(reduce, seg, F, src, streamed, streamed_arg,
                             ops::ScatterPath::kStreaming);
  const std::string where = pc.name + " " + std::string(ops::to_string(reduce)) + ", " +
                            std::to_string(threads) + " thread(s), " + std::to_string(sizeof(T)) +
                            "-byte values, " + std::to_string(sizeof(I)) + "-byte indices";
  const int64_t at = first_difference<T>(walked, streamed);
  ASSERT_LT(at, 0) << where << ": element " << at << " is " << walked[at] << " walked, "
                   << streamed[at] << " streamed";
  ASSERT_EQ(walked_arg, streamed_arg) << where;
  ASSERT_EQ(seg.degree(pc.rows - 1), 0);
  EXPECT_EQ(streamed[(pc.rows - 1) * F], T(0)) << where;
  if (arg) {
    EXPECT_EQ(streamed_arg[(pc.rows - 1) * F], I(E)) << where;
  }
}

TEST(ScatterPaths, StreamingEqualsCsrWalk) {
  const PathCase cases[] = {
      {"F = 1", 5000, 1, 0},
      {"F = 16", 2000, 16, 0},
      {"F = 67", 1000, 67, 0},
      {"a row of 300 edges, F = 3", 2000, 3, 300},
  };
  for (const PathCase& pc : cases) {
    for (ops::Reduce reduce : {ops::Reduce::kSum, ops::Reduce::kMean}) {
      for (int threads : {1, 2}) {
        expect_paths_agree<float, int32_t>(pc, reduce, threads);
        expect_paths_agree<float, int64_t>(pc, reduce, threads);
        expect_paths_agree<double, int32_t>(pc, reduce, threads);
        expect_paths_agree<double, int64_t>(pc, reduce, threads);
      }
    }
  }
}

// sparse_matmul's product, alone and as a pair (sparse_matmul_forward_pair:
// one walk for both at 16 and 32 columns, two at 7 and 64): row r of X · op(b)
// adds its entries' products in ascending entry order from 0. Each result
// must equal that sum, written here as a plain serial loop, bit for bit, on
// 1 and 2 threads, with b stored plainly and transposed.
TEST(SparseMatmul, OneAndPairGiveTheEntryOrderedSums) {
  // K = 300: b stays in cache; 20000 at 16 columns (1.3 MB): its rows are
  // asked for ahead (the prefetching walk).
  for (const int64_t K : {300, 20000}) {
    SCOPED_TRACE(::testing::Message() << "K = " << K);
    const int64_t n = 1000;
    std::vector<int32_t> row, col;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t k = 0; k < K; ++k) {
        const uint64_t u = ops::philox(7, 2, {static_cast<uint64_t>(r), static_cast<uint64_t>(k), 0, 0})[0];
        if (r % 10 == 3 || ops::unit(u) >= 0.03) continue;
        row.push_back(static_cast<int32_t>(r)), col.push_back(static_cast<int32_t>(k));
        if (u % 17 == 0) row.push_back(static_cast<int32_t>(r)), col.push_back(static_cast<int32_t>(k));
      }
    }
    const auto x = ops::Adjacency<int32_t>::build(col, row, K, n);
    const int64_t E = x.num_edges();
    const auto uniform = [](uint64_t stream, int64_t count) {
      std::vector<float> v(count);
      for (int64_t i = 0; i < count; ++i) {
        v[i] = static_cast<float>(ops::unit(ops::philox(stream, 1, {static_cast<uint64_t>(i), 0, 0, 0})[0]) - 0.5);
      }
      return v;
    };
    const std::vector<float> values = uniform(8, E);
    // Transposed, b [m, K] is transposed into the workspace: 116 columns and
    // K = 20000 do that on two threads.
    for (const int64_t m : K == 300 ? std::vector<int64_t>{7, 12, 16, 32, 64, 116}
                                    : std::vector<int64_t>{16, 20}) {
      const std::vector<float> b = uniform(10, K * m), b2 = uniform(11, K * m);
      for (const bool trans_b : {false, true}) {
        // op(b)[k, f]: b [K, M], or b [M, K] transposed.
        const auto at = [&](const std::vector<float>& w, int64_t k, int64_t f) {
          return trans_b ? w[f * K + k] : w[k * m + f];
        };
        std::vector<float> want(n * m, 0.0f), want2(n * m, 0.0f);
        for (int64_t e = 0; e < E; ++e) {  // entries are stored row by row, in order
          for (int64_t f = 0; f < m; ++f) {
            want[row[e] * m + f] += values[e] * at(b, col[e], f);
            want2[row[e] * m + f] += values[e] * at(b2, col[e], f);
          }
        }
        for (const int threads : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << m << " columns" << (trans_b ? ", b transposed, " : ", ")
                                            << threads << " thread(s)");
          const int saved = omp_get_max_threads();
          omp_set_num_threads(threads);
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> ws(trans_b ? K * m : 0), ws2(ws.size()), one(n * m, nan), pair(n * m, nan),
              pair2(n * m, nan);
          ops::sparse_matmul_forward<float, int32_t>(x, values, b, m, trans_b, ws, one);
          ops::sparse_matmul_forward_pair<float, int32_t>(x, values, b, b2, m, trans_b, ws, ws2, pair, pair2);
          omp_set_num_threads(saved);
          EXPECT_EQ(std::memcmp(one.data(), want.data(), want.size() * sizeof(float)), 0) << "one product";
          EXPECT_EQ(std::memcmp(pair.data(), want.data(), want.size() * sizeof(float)), 0) << "the pair's first";
          EXPECT_EQ(std::memcmp(pair2.data(), want2.data(), want2.size() * sizeof(float)), 0) << "the pair's second";
        }
      }
    }
  }
}

// sparse_matmul's weight gradient walks X by columns (G narrow or in cache)
// or by rows (G wide and large): both add column k's products in row order,
// starting from 0. Each must equal that sum, written here as a plain serial
// loop, bit for bit, on 1 and 2 threads, stored plainly and transposed; and
// so must both gradients of a pair (sparse_matmul_backward_b_pair, one walk
// for both at 16 and 32 columns, two walks otherwise).
TEST(SparseMatmulGradB, BothWalksGiveTheRowOrderedSums) {
  struct Case {
    int64_t n, m;
    bool by_rows;
  };
  const int64_t K = 300;
  for (const Case c : {Case{1000, 64, false}, Case{5000, 16, false}, Case{5000, 64, true},
                       Case{2000, 200, true}, Case{1000, 7, false}, Case{1000, 32, false},
                       Case{20000, 16, false}}) {  // G of 1.3 MB: rows asked for ahead
    // Row-major entries, about 3% dense, some rows empty, a duplicate now and then.
    std::vector<int32_t> row, col;
    for (int64_t r = 0; r < c.n; ++r) {
      for (int64_t k = 0; k < K; ++k) {
        const uint64_t u = ops::philox(7, 1, {static_cast<uint64_t>(r), static_cast<uint64_t>(k), 0, 0})[0];
        if (r % 10 == 3 || ops::unit(u) >= 0.03) continue;
        row.push_back(static_cast<int32_t>(r)), col.push_back(static_cast<int32_t>(k));
        if (u % 17 == 0) row.push_back(static_cast<int32_t>(r)), col.push_back(static_cast<int32_t>(k));
      }
    }
    const auto x = ops::Adjacency<int32_t>::build(col, row, K, c.n);
    const int64_t E = x.num_edges();
    std::vector<float> values(E), g(c.n * c.m);
    for (int64_t i = 0; i < E; ++i) values[i] = static_cast<float>(ops::unit(ops::philox(8, 1, {static_cast<uint64_t>(i), 0, 0, 0})[0]) - 0.5);
    for (int64_t i = 0; i < c.n * c.m; ++i) g[i] = static_cast<float>(ops::unit(ops::philox(9, 1, {static_cast<uint64_t>(i), 0, 0, 0})[0]) - 0.5);
    std::vector<float> g2(c.n * c.m);  // the pair's second gradient
    for (int64_t i = 0; i < c.n * c.m; ++i) g2[i] = g[(i * 7 + 3) % (c.n * c.m)] * 1.5f;
    std::vector<float> want(K * c.m, 0.0f), want2(K * c.m, 0.0f);  // [K, M]
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t f = 0; f < c.m; ++f) {
        want[col[e] * c.m + f] += values[e] * g[row[e] * c.m + f];
        want2[col[e] * c.m + f] += values[e] * g2[row[e] * c.m + f];
      }
    }
    for (const bool trans_b : {false, true}) {
      const int64_t ws = ops::sparse_matmul_backward_b_workspace(c.n, K, c.m, trans_b, sizeof(float));
      EXPECT_EQ(ws, trans_b && c.by_rows ? K * c.m : 0) << c.n << " x " << c.m;
      for (const int threads : {1, 2}) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> workspace(ws), grad(K * c.m, nan);
        std::vector<float> pair_workspace(ws), pair_workspace2(ws), pair(K * c.m, nan), pair2(K * c.m, nan);
        ops::sparse_matmul_backward_b<float, int32_t>(x, values, g, c.m, trans_b, workspace, grad);
        ops::sparse_matmul_backward_b_pair<float, int32_t>(x, values, g, g2, c.m, trans_b, pair_workspace,
                                                           pair_workspace2, pair, pair2);
        omp_set_num_threads(saved);
        const auto expect_sums = [&](const std::vector<float>& got_all, const std::vector<float>& sums,
                                     const char* what) {
          for (int64_t k = 0; k < K; ++k) {
            for (int64_t f = 0; f < c.m; ++f) {
              const float got = trans_b ? got_all[f * K + k] : got_all[k * c.m + f];
              ASSERT_EQ(std::memcmp(&got, &sums[k * c.m + f], sizeof(float)), 0)
                  << what << ", " << c.n << " x " << c.m << (trans_b ? " transposed" : "") << ", "
                  << threads << " thread(s): column " << k << ", feature " << f << ": " << got
                  << " against " << sums[k * c.m + f];
            }
          }
        };
        expect_sums(grad, want, "one gradient");
        expect_sums(pair, want, "the pair's first");
        expect_sums(pair2, want2, "the pair's second");
      }
    }
  }
}

// spmm's attention-weight gradient with several heads: grad_w[e, h] =
// scale * (the dot of grad_out[dst, h, :] and x[src, h, :], channels added
// in ascending order from 0, each product fused into the sum as the
// compiler contracts a * b + acc), for heads of 4, 8 and 16 channels (the
// heads-as-lanes path) and 3 (dot by dot), sum and mean; equal to that
// plain serial loop bit for bit, on 1 and 2 threads. Duplicate edges and
// nodes without edges included.
TEST(SpmmGradWeight, HeadsGiveTheChannelOrderedDots) {
  const int64_t n = 700;
  std::vector<int32_t> src, dst;
  for (int64_t e = 0; e < 6000; ++e) {
    const auto w = ops::philox(11, 2, {static_cast<uint64_t>(e), 0, 0, 0});
    src.push_back(static_cast<int32_t>(w[0] % n));
    dst.push_back(static_cast<int32_t>(w[1] % (n - 50)));  // the last 50 get nothing
    if (e % 97 == 0) src.push_back(src.back()), dst.push_back(dst.back());
  }
  const auto adj = ops::Adjacency<int32_t>::build(src, dst, n, n);
  const int64_t E = adj.num_edges();
  struct Case {
    int64_t heads, channels;
  };
  for (const Case c : {Case{8, 8}, Case{2, 16}, Case{16, 4}, Case{4, 3}}) {
    const int64_t F = c.heads * c.channels;
    const auto uniform = [](uint64_t stream, int64_t i) {
      return static_cast<float>(ops::unit(ops::philox(12, stream, {static_cast<uint64_t>(i), 0, 0, 0})[0]) - 0.5);
    };
    std::vector<float> x(n * F), g(n * F), weight(E * c.heads);
    for (int64_t i = 0; i < n * F; ++i) x[i] = uniform(1, i), g[i] = uniform(2, i);
    for (int64_t i = 0; i < E * c.heads; ++i) weight[i] = uniform(3, i);
    for (const ops::Reduce reduce : {ops::Reduce::kSum, ops::Reduce::kMean}) {
      std::vector<int64_t> degree(n, 0);
      for (const int32_t v : dst) ++degree[v];
      std::vector<float> want(E * c.heads);
      for (int64_t e = 0; e < E; ++e) {
        const float scale = reduce == ops::Reduce::kMean ? 1.0f / static_cast<float>(degree[dst[e]]) : 1.0f;
        for (int64_t h = 0; h < c.heads; ++h) {
          float acc = 0.0f;
          for (int64_t d = 0; d < c.channels; ++d) {
            acc += x[src[e] * F + h * c.channels + d] * g[dst[e] * F + h * c.channels + d];
          }
          want[e * c.heads + h] = scale * acc;
        }
      }
      for (const int threads : {1, 2}) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<float> got(E * c.heads, std::numeric_limits<float>::quiet_NaN());
        ops::spmm_backward<float, int32_t>(reduce, adj, F, x, weight, g, {}, {}, got);
        omp_set_num_threads(saved);
        for (int64_t i = 0; i < E * c.heads; ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << c.heads << " heads of " << c.channels << ", " << ops::to_string(reduce) << ", "
              << threads << " thread(s): edge " << i / c.heads << ", head " << i % c.heads << ": "
              << got[i] << " against " << want[i];
        }
      }
    }
  }
}

// Entries not stored row by row: the walk by rows still sums each column
// in row order, so it no longer matches the walk by columns bit for bit,
// but it gives the float64 sums to float rounding and the same bits on 1
// and 2 threads.
TEST(SparseMatmulGradB, ShuffledEntriesWalkedByRows) {
  const int64_t n = 5000, m = 64, K = 300, E = 40000;
  ASSERT_TRUE(ops::sparse_matmul_backward_b_by_rows(n, m, sizeof(float)));
  std::vector<int32_t> row(E), col(E);
  std::vector<float> values(E), g(n * m);
  const auto draw = [](uint64_t stream, uint64_t i) { return ops::philox(10, stream, {i, 0, 0, 0})[0]; };
  for (int64_t e = 0; e < E; ++e) {
    row[e] = static_cast<int32_t>(ops::below(draw(1, e), n));
    col[e] = static_cast<int32_t>(ops::below(draw(2, e), K));
    values[e] = static_cast<float>(ops::unit(draw(3, e)) - 0.5);
  }
  for (int64_t i = 0; i < n * m; ++i) g[i] = static_cast<float>(ops::unit(draw(4, i)) - 0.5);
  std::vector<double> want(K * m, 0.0);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t f = 0; f < m; ++f) want[col[e] * m + f] += double{values[e]} * g[row[e] * m + f];
  }
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  const auto x = ops::Adjacency<int32_t>::build(col, row, K, n);
  std::vector<float> first;
  for (const int threads : {1, 2}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> workspace(K * m), grad(K * m);
    ops::sparse_matmul_backward_b<float, int32_t>(x, values, g, m, true, workspace, grad);
    omp_set_num_threads(saved);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t f = 0; f < m; ++f) {
        ASSERT_NEAR(grad[f * K + k], want[k * m + f], 1e-5 * scale) << "column " << k << ", feature " << f;
      }
    }
    if (first.empty()) first = grad;
    EXPECT_EQ(std::memcmp(first.data(), grad.data(), grad.size() * sizeof(float)), 0) << threads << " threads";
  }
}

}  // namespace
}  // namespace gnnrt::testing

namespace gnnrt::testing {
namespace {

// The runtime indexes graphs with int32; the kernels are also instantiated
// for int64 (C++ users, graphs past 2^31 edges). Both widths must give the
// same bits on the same graph, forward and backward.
template <typename I>
struct GraphOps {
  std::vector<float> outputs;

  GraphOps(const std::vector<int64_t>& src64, const std::vector<int64_t>& dst64, int64_t n,
           int64_t f, const std::vector<float>& x, const std::vector<float>& w,
           const std::vector<float>& g) {
    const std::vector<I> src(src64.begin(), src64.end()), dst(dst64.begin(), dst64.end());
    const auto adj = ops::Adjacency<I>::build(src, dst, n, n);
    const int64_t e = adj.num_edges();
    const auto keep = [&](const auto& v) { outputs.insert(outputs.end(), v.begin(), v.end()); };
    for (ops::Reduce r : {ops::Reduce::kSum, ops::Reduce::kMean, ops::Reduce::kMax, ops::Reduce::kMin}) {
      std::vector<float> out(n * f), gx(n * f), gw(e);
      std::vector<I> arg(ops::has_arg(r) ? n * f : 0);
      ops::spmm_forward<float, I>(r, adj, f, x, w, out, arg);
      ops::spmm_backward<float, I>(r, adj, f, x, w, g, arg, gx, gw);
      keep(out), keep(gx), keep(gw), keep(std::vector<float>(arg.begin(), arg.end()));
    }
    std::vector<float> gathered(e * f), back(n * f), scores(e), alpha(e), ga(n * f), gb(n * f);
    ops::gather_forward<float, I>(adj.by_src, f, x, gathered);
    ops::gather_backward<float, I>(adj.by_src, f, gathered, back);
    ops::sddmm_dot_forward<float, I>(adj, f, 1, x, x, scores);
    ops::sddmm_dot_backward<float, I>(adj, f, 1, x, x, scores, ga, gb);
    ops::segment_softmax_forward<float, I>(adj.by_dst, 1, scores, alpha);
    keep(gathered), keep(back), keep(scores), keep(ga), keep(gb), keep(alpha);
  }
};

TEST(IndexWidths, Int32AndInt64GiveTheSameBits) {
  const int64_t n = 3000, e = 40000, f = 8;
  std::vector<int64_t> src(e), dst(e);
  std::vector<float> x(n * f), w(e), g(n * f);
  for (int64_t i = 0; i < e; ++i) {
    const auto r = ops::philox(5, 1, {static_cast<uint64_t>(i), 0, 0, 0});
    src[i] = static_cast<int64_t>(ops::below(r[0], n));
    dst[i] = static_cast<int64_t>(ops::below(r[1], n));
    w[i] = static_cast<float>(ops::unit(r[2]));
  }
  for (int64_t i = 0; i < n * f; ++i) {
    const auto r = ops::philox(5, 2, {static_cast<uint64_t>(i), 0, 0, 0});
    x[i] = static_cast<float>(ops::unit(r[0]) - 0.5);
    g[i] = static_cast<float>(ops::unit(r[1]) - 0.5);
  }
  const GraphOps<int32_t> narrow(src, dst, n, f, x, w, g);
  const GraphOps<int64_t> wide(src, dst, n, f, x, w, g);
  ASSERT_EQ(narrow.outputs.size(), wide.outputs.size());
  EXPECT_EQ(first_difference<float>(narrow.outputs, wide.outputs), -1);
}

// A row loop on several threads first reads its gathered operands in order
// (ops/segment_reduce.h, Pull): that read must stay inside the span, which
// is any kernel's operand, of any length and alignment. Spans here end where
// an unreadable page begins, or begin where one ends, so a byte read outside
// them crashes the test (in the Release build too; the sanitizer build also
// checks the bytes before a span within its first cache line). A span above
// kPullBytes is not read at all.
TEST(Pull, ReadsNothingOutsideItsSpan) {
  const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  const int64_t data_pages = 2;
  // [unreadable][data_pages readable][unreadable]
  auto* base = static_cast<char*>(mmap(nullptr, static_cast<size_t>((data_pages + 2) * page),
                                       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(base, MAP_FAILED);
  ASSERT_EQ(mprotect(base, static_cast<size_t>(page), PROT_NONE), 0);
  ASSERT_EQ(mprotect(base + (data_pages + 1) * page, static_cast<size_t>(page), PROT_NONE), 0);
  char* begin = base + page;
  char* end = begin + data_pages * page;
  for (int64_t bytes : {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{127},
                        int64_t{128}, int64_t{129}, page - 1, page, page + 1, data_pages * page}) {
    ops::detail::pull({end - bytes, bytes});  // every alignment of the start, as bytes varies
    ops::detail::pull({begin, bytes});
    for (int64_t skew = 1; skew < 64 && skew + bytes <= data_pages * page; ++skew) {
      ops::detail::pull({end - bytes - skew, bytes});
      ops::detail::pull({begin + skew, bytes});
    }
  }
  ops::detail::pull({nullptr, 0});
  ops::detail::pull({begin, 0});
  ASSERT_EQ(munmap(base, static_cast<size_t>((data_pages + 2) * page)), 0);

  // Too large to stay in cache: not read (the whole span is unreadable).
  const int64_t large = ops::detail::kPullBytes + page;
  void* none = mmap(nullptr, static_cast<size_t>(large), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  ops::detail::pull({none, large});
  ASSERT_EQ(munmap(none, static_cast<size_t>(large)), 0);
}

}  // namespace
namespace {

// Aggregations whose row (or a head's share of it) is 3..15 columns and not
// a power of two read each message as one vector of the next power of two
// where that vector is one register (ops/segment_reduce.h, sum_block: every
// float width with AVX-512, 3-7 with AVX2; the others are summed as
// scalars, which this test checks the same way): the lanes past the row are never
// stored, and the last row of x is read column by column. x ends where an
// unreadable page begins, so a read past it crashes the test; every source
// row is read (the last one too), and each output must equal the
// edge-ordered sum, written here as a plain serial loop, bit for bit, on 1
// and 2 threads: sum, mean, weighted and not, and 23 = 16 + 7 and 71 = 64 +
// 7 columns, whose last block starts inside the row.
TEST(SpmmNarrowWidths, PaddedReadsGiveTheEdgeOrderedSums) {
  const int64_t n = 2000, page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  std::vector<int32_t> src, dst;
  for (int64_t e = 0; e < 9 * n; ++e) {
    const auto w = ops::philox(13, 1, {static_cast<uint64_t>(e), 0, 0, 0});
    src.push_back(static_cast<int32_t>(e < n ? e : static_cast<int64_t>(w[0] % n)));
    dst.push_back(static_cast<int32_t>(w[1] % (n - 7)));  // the last 7 get nothing
  }
  const auto adj = ops::Adjacency<int32_t>::build(src, dst, n, n);
  const int64_t E = adj.num_edges();
  std::vector<int64_t> degree(n, 0);
  for (const int32_t v : dst) ++degree[v];
  for (const int64_t F : {3, 5, 6, 7, 9, 12, 13, 15, 23, 71}) {
    // x [n, F] at the end of its mapping, an unreadable page after it.
    const int64_t bytes = n * F * static_cast<int64_t>(sizeof(float));
    const int64_t pages = (bytes + page - 1) / page;
    auto* base = static_cast<char*>(mmap(nullptr, static_cast<size_t>((pages + 1) * page),
                                         PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(base, MAP_FAILED);
    ASSERT_EQ(mprotect(base + pages * page, static_cast<size_t>(page), PROT_NONE), 0);
    const std::span<float> x(reinterpret_cast<float*>(base + pages * page - bytes), static_cast<size_t>(n * F));
    for (int64_t i = 0; i < n * F; ++i) {
      x[i] = static_cast<float>(ops::unit(ops::philox(13, 2, {static_cast<uint64_t>(i), 0, 0, 0})[0]) - 0.5);
    }
    std::vector<float> weight(E);
    for (int64_t i = 0; i < E; ++i) {
      weight[i] = static_cast<float>(ops::unit(ops::philox(13, 3, {static_cast<uint64_t>(i), 0, 0, 0})[0]));
    }
    for (const ops::Reduce reduce : {ops::Reduce::kSum, ops::Reduce::kMean}) {
      for (const bool weighted : {false, true}) {
        std::vector<float> want(n * F, 0.0f);
        for (int64_t e = 0; e < E; ++e) {  // by_dst keeps ascending edge ids within a row
          for (int64_t f = 0; f < F; ++f) {
            want[dst[e] * F + f] += weighted ? weight[e] * x[src[e] * F + f] : x[src[e] * F + f];
          }
        }
        if (reduce == ops::Reduce::kMean) {
          for (int64_t v = 0; v < n; ++v) {
            for (int64_t f = 0; f < F && degree[v] > 0; ++f) want[v * F + f] /= static_cast<float>(degree[v]);
          }
        }
        for (const int threads : {1, 2}) {
          const int saved = omp_get_max_threads();
          omp_set_num_threads(threads);
          std::vector<float> got(n * F, std::numeric_limits<float>::quiet_NaN());
          ops::spmm_forward<float, int32_t>(reduce, adj, F, x, weighted ? std::span<const float>(weight)
                                                                        : std::span<const float>(),
                                            got, {});
          omp_set_num_threads(saved);
          const int64_t at = first_difference<float>(got, want);
          EXPECT_LT(at, 0) << F << " columns, " << ops::to_string(reduce) << (weighted ? ", weighted, " : ", ")
                           << threads << " thread(s): element " << at << " is " << (at < 0 ? 0 : got[at])
                           << " against " << (at < 0 ? 0 : want[at]);
        }
      }
    }
    ASSERT_EQ(munmap(base, static_cast<size_t>((pages + 1) * page)), 0);
  }
}

}  // namespace

// Padded products (ops/dense.cc) against a plain double-precision product,
// at sizes the golden cases cannot hold: C's columns padded in two row
// blocks (33,000 rows of 7 or 5, 20,000 of 13), with op(b) stored either
// way, with a transposed (one block, cut into row blocks inside), both
// transposed; C's rows padded with op(a) and op(b) stored either way; and
// each side padded in front of the depth split (blocks of 2048 and quarters
// of k). Each element must be within 1e-5 of
// sum |a||b| of the exact dot product (float32 rounding over k terms).
TEST(MatmulPadding, GivesThePlainProduct) {
  struct Shape {
    int64_t m, k, n;
    bool trans_a, trans_b;
  };
  for (const Shape s : {Shape{33000, 32, 7, false, false}, Shape{33000, 40, 5, false, true},
                        Shape{20000, 40, 13, false, false}, Shape{600, 64, 7, true, false},
                        Shape{40, 36, 6, true, true}, Shape{7, 500, 48, true, false},
                        Shape{15, 300, 33, false, true}, Shape{15, 300, 33, true, true},
                        // with the depth split (k >= 4096): GAT's classifier
                        // weight gradient on a graph of 10,000 nodes
                        Shape{7, 10000, 64, true, false}, Shape{64, 10000, 7, true, false},
                        // with quarters of k as the depth blocks (a tiny C
                        // and k < 4096): the same gradient on Cora
                        Shape{7, 2708, 64, true, false}, Shape{64, 2708, 7, true, false}}) {
    SCOPED_TRACE(::testing::Message() << s.m << " x " << s.k << " x " << s.n << " trans_a "
                                      << s.trans_a << " trans_b " << s.trans_b);
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n), std::nanf(""));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(ops::unit(ops::philox(9, 1, {i, 0, 0, 0})[0]) - 0.5);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(ops::unit(ops::philox(9, 2, {i, 0, 0, 0})[0]) - 0.5);
    ops::matmul<float>(a, b, c, s.m, s.k, s.n, s.trans_a, s.trans_b);
    const auto at = [&](int64_t i, int64_t p) { return s.trans_a ? a[p * s.m + i] : a[i * s.k + p]; };
    const auto bt = [&](int64_t p, int64_t j) { return s.trans_b ? b[j * s.k + p] : b[p * s.n + j]; };
    int64_t bad = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double exact = 0, scale = 0;
        for (int64_t p = 0; p < s.k; ++p) {
          exact += double(at(i, p)) * bt(p, j);
          scale += std::abs(double(at(i, p)) * bt(p, j));
        }
        const double got = c[static_cast<size_t>(i * s.n + j)];
        if (!(std::abs(got - exact) <= 1e-5 * scale) && bad++ < 3) {
          ADD_FAILURE() << "c[" << i << ", " << j << "] = " << got << ", exact " << exact;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// head_dot over heads of 8 float channels takes 8 heads at a time as vectors
// (ops/elementwise.cc). Each sum must have the bits of the plain loop that
// adds the channel products in order from 0, on one thread and two, with
// heads left over (12, 20) and signed zeros, infinities and NaN among the
// inputs.
TEST(HeadDot, EightChannelVectorsAddLikeTheLoop) {
  for (const int64_t heads : {8, 12, 16, 20}) {
    SCOPED_TRACE(::testing::Message() << heads << " heads");
    const int64_t rows = 701, C = 8;
    std::vector<float> x(static_cast<size_t>(rows * heads * C)), att(static_cast<size_t>(heads * C));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(ops::unit(ops::philox(11, 1, {i, 0, 0, 0})[0]) - 0.5);
    for (size_t i = 0; i < att.size(); ++i) att[i] = static_cast<float>(ops::unit(ops::philox(11, 2, {i, 0, 0, 0})[0]) - 0.5);
    // Row 0, head 0: every product -0 (a zero of the sign opposite to att's),
    // so the sum is +0 only if it starts from +0 as the loop's does.
    for (int64_t c = 0; c < C; ++c) x[static_cast<size_t>(c)] = att[static_cast<size_t>(c)] > 0 ? -0.0f : 0.0f;
    x[static_cast<size_t>(C + 3)] = std::numeric_limits<float>::infinity();
    x[static_cast<size_t>(2 * C + 5)] = std::nanf("");
    std::vector<float> want(static_cast<size_t>(rows * heads));
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t h = 0; h < heads; ++h) {
        float sum = 0;
        for (int64_t c = 0; c < C; ++c) sum += x[static_cast<size_t>((n * heads + h) * C + c)] * att[static_cast<size_t>(h * C + c)];
        want[static_cast<size_t>(n * heads + h)] = sum;
      }
    }
    for (const int threads : {1, 2}) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      std::vector<float> got(want.size(), 7.0f);
      ops::head_dot_forward<float>(x, att, rows, heads, C, got);
      omp_set_num_threads(before);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << threads << " thread(s)";
    }
  }
}

// head_dot's attention gradient sums each (head, channel) over the rows in
// ascending order, a head's channels as vectors of at most one register
// (several per head where the channels are wider: 16 floats or 8 doubles
// on AVX2). Each sum must have the bits of the plain loop, for float and
// double, heads of 4, 8 and 16 channels (a group of heads left over at 3
// and 5 heads), on one thread and two (8209 rows: every case is above the
// kernel's threshold for running on the team, and the cases with several
// groups of heads, at 8 and 16 channels, split them over the threads).
namespace {

template <typename T>
void expect_attention_gradient_like_the_loop() {
  for (const int64_t C : {4, 8, 16}) {
    for (const int64_t heads : {1, 3, 5, 8}) {
      SCOPED_TRACE(::testing::Message() << heads << " heads of " << C << " channels");
      const int64_t rows = 8209;
      std::vector<T> x(static_cast<size_t>(rows * heads * C)), g(static_cast<size_t>(rows * heads));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(ops::unit(ops::philox(12, 1, {i, 0, 0, 0})[0]) - 0.5);
      for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<T>(ops::unit(ops::philox(12, 2, {i, 0, 0, 0})[0]) - 0.5);
      std::vector<T> want(static_cast<size_t>(heads * C), T(0));
      for (int64_t n = 0; n < rows; ++n) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t c = 0; c < C; ++c) {
            want[static_cast<size_t>(h * C + c)] +=
                g[static_cast<size_t>(n * heads + h)] * x[static_cast<size_t>((n * heads + h) * C + c)];
          }
        }
      }
      for (const int threads : {1, 2}) {
        const int before = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<T> got(want.size(), T(7));
        ops::head_dot_backward_att<T>(x, g, rows, heads, C, got);
        omp_set_num_threads(before);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)), 0) << threads << " thread(s)";
      }
    }
  }
}

}  // namespace

TEST(HeadDot, AttentionGradientAddsLikeTheLoop) {
  expect_attention_gradient_like_the_loop<float>();
  expect_attention_gradient_like_the_loop<double>();
}

}  // namespace gnnrt::testing
