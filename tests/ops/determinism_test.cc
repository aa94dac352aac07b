// Every kernel is bitwise deterministic: the same inputs give the same bits
// run after run and with 1 or 2 OpenMP threads. The inputs are large enough
// (E = 200k edges) that every kernel takes its parallel path.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "ops/csr.h"
#include "ops/scatter.h"
#include "tests/ops/op_harness.h"

namespace gnnrt::testing {
namespace {

constexpr int64_t kEdges = 200000;
constexpr int64_t kNodes = 20000;

// A synthetic case shaped like the first golden case of `op`.
class Builder {
 public:
  explicit Builder(const std::string& golden_case) : c_(Case::load(golden_case)) {
    c_.arrays.clear();
    c_.name = "synthetic/" + c_.op;
  }
  Builder& param(const std::string& k, nlohmann::json v) {
    c_.meta["params"][k] = std::move(v);
    return *this;
  }
  Builder& floats(const std::string& k, std::vector<int64_t> shape) {
    Tensor a(DType::kF32, std::move(shape));
    std::normal_distribution<float> normal;
    for (float& v : a.values<float>()) v = normal(rng_);
    c_.arrays[k] = std::move(a);
    return *this;
  }
  Builder& ints(const std::string& k, int64_t n, int64_t bound) {
    Tensor a(DType::kI32, {n});
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(bound - 1));
    for (int32_t& v : a.values<int32_t>()) v = pick(rng_);
    c_.arrays[k] = std::move(a);
    return *this;
  }
  Builder& mask(const std::string& k, int64_t n) {
    Tensor a(DType::kBool, {n});
    for (uint8_t& v : a.values<uint8_t>()) v = rng_() % 2;
    c_.arrays[k] = std::move(a);
    return *this;
  }
  Case build() { return std::move(c_); }

 private:
  Case c_;
  std::mt19937 rng_{7};
};

std::filesystem::path golden(const std::string& case_path) {
  return std::filesystem::path(GNNRT_GOLDEN_DIR) / case_path;
}

struct Recipe {
  std::string name;
  std::function<Case()> build;
};

// Cheap to list (test discovery); each case is built only when its test runs.
const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> list = [] {
    const int64_t E = kEdges, N = kNodes, F = 16;
    std::vector<Recipe> r;
    for (const std::string reduce : {"sum", "mean", "max", "min"}) {
      r.push_back({"scatter_" + reduce, [=] {
                     return Builder(golden("scatter/" + reduce + "_random"))
                         .param("num_rows", N).param("features", F).floats("src", {E, F})
                         .ints("index", E, N).floats("grad_out", {N, F}).build();
                   }});
      r.push_back({"spmm_" + reduce, [=] {
                     return Builder(golden("spmm/" + reduce + "_wide"))
                         .param("num_src", N).param("num_dst", N).param("features", F)
                         .floats("x", {N, F}).floats("weight", {E, 2}).ints("src", E, N)
                         .ints("dst", E, N).floats("grad_out", {N, F}).build();
                   }});
    }
    r.push_back({"scatter_max_wide_rows", [=] {
                   return Builder(golden("scatter/max_wide")).param("num_rows", N)
                       .param("features", 160).floats("src", {E / 4, 160})
                       .ints("index", E / 4, N).floats("grad_out", {N, 160}).build();
                 }});
    r.push_back({"scatter_mean_wide_rows", [=] {
                   return Builder(golden("scatter/mean_wide")).param("num_rows", N)
                       .param("features", 160).floats("src", {E / 4, 160})
                       .ints("index", E / 4, N).floats("grad_out", {N, 160}).build();
                 }});
    r.push_back({"gather", [=] {
                   return Builder(golden("gather/random")).param("num_rows", N)
                       .param("features", F).floats("x", {N, F}).ints("index", E, N)
                       .floats("grad_out", {E, F}).build();
                 }});
    r.push_back({"sddmm_dot", [=] {
                   return Builder(golden("sddmm_dot/random")).param("num_src", N)
                       .param("num_dst", N).param("features", F).param("heads", 2)
                       .floats("a", {N, F}).floats("b", {N, F}).ints("src", E, N)
                       .ints("dst", E, N).floats("grad_out", {E, 2}).build();
                 }});
    r.push_back({"sddmm_add", [=] {
                   return Builder(golden("sddmm_add/random")).param("num_src", N)
                       .param("num_dst", N).param("heads", 4).floats("a", {N, 4})
                       .floats("b", {N, 4}).ints("src", E, N).ints("dst", E, N)
                       .floats("grad_out", {E, 4}).build();
                 }});
    r.push_back({"segment_softmax", [=] {
                   return Builder(golden("segment_softmax/random")).param("num_rows", N)
                       .param("heads", 2).floats("score", {E, 2}).ints("index", E, N)
                       .floats("grad_alpha", {E, 2}).build();
                 }});
    r.push_back({"matmul", [] {
                   return Builder(golden("matmul/square")).param("m", 500).param("k", 300)
                       .param("n", 200).floats("a", {500, 300}).floats("b", {300, 200})
                       .floats("grad_c", {500, 200}).build();
                 }});
    r.push_back({"matmul_depth_split", [] {
                   return Builder(golden("matmul/trans_a")).param("m", 64).param("k", 10000)
                       .param("n", 16).floats("a", {10000, 64}).floats("b", {10000, 16})
                       .floats("grad_c", {64, 16}).build();
                 }});
    r.push_back({"bias_add", [=] {
                   return Builder(golden("bias_add/small")).param("rows", N).param("cols", F)
                       .floats("x", {N, F}).floats("bias", {F}).floats("grad_out", {N, F})
                       .build();
                 }});
    for (const std::string act : {"relu", "leaky_relu", "elu", "log_softmax"}) {
      r.push_back({act, [=] {
                     return Builder(golden(act + "/small")).param("rows", N).param("cols", F)
                         .floats("x", {N, F}).floats("grad_out", {N, F}).build();
                   }});
    }
    r.push_back({"nll_loss", [=] {
                   return Builder(golden("nll_loss/small")).param("rows", N)
                       .param("classes", F).floats("log_prob", {N, F}).ints("labels", N, F)
                       .mask("mask", N).build();
                 }});
    r.push_back({"dropout", [=] {
                   return Builder(golden("dropout/half")).param("cols", F).floats("x", {N, F})
                       .floats("grad_out", {N, F}).build();
                 }});
    return r;
  }();
  return list;
}

Values<float> run_with_threads(const Case& c, int threads) {
  omp_set_num_threads(threads);
  const auto inputs = float_inputs<float>(c);
  const auto upstream = upstream_gradients<float>(c);
  return run_op<float>(c, inputs, &upstream);
}

void expect_bitwise_equal(const Values<float>& a, const Values<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, va] : a) {
    const auto& vb = b.at(key);
    ASSERT_EQ(va.size(), vb.size()) << what << " " << key;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0)
        << what << ": " << key << " differs";
  }
}

class DeterminismTest : public ::testing::TestWithParam<int> {};

TEST_P(DeterminismTest, SameBitsForOneAndTwoThreadsAndAcrossRuns) {
  const Case c = recipes()[GetParam()].build();
  SCOPED_TRACE(c.name);
  const auto one = run_with_threads(c, 1);
  const auto two = run_with_threads(c, 2);
  const auto again = run_with_threads(c, 2);
  expect_bitwise_equal(one, two, "1 vs 2 threads");
  expect_bitwise_equal(two, again, "run to run");
}

INSTANTIATE_TEST_SUITE_P(Ops, DeterminismTest,
                         ::testing::Range(0, static_cast<int>(recipes().size())),
                         [](const auto& info) { return recipes()[info.param].name; });

}  // namespace
}  // namespace gnnrt::testing

namespace gnnrt::testing {
namespace {

// scatter's two loops (the CSR walk and, for sum and mean, streaming src in
// edge order on the calling thread) must give the same bits up to a NaN's
// sign, values and arg, with values holding ties, NaN, both infinities and
// both zeros, an empty row and a row of 300 edges. The graphs are large enough
// that the two-thread walk runs in parallel. For max/min a forced stream is
// the walk itself: those cases only check that forcing it is harmless.
struct PathCase {
  std::string name;
  int64_t rows, features;
  int64_t long_row_edges;  // edges added to row 0 on top of ~8 per row
};

template <typename T, typename I>
void expect_paths_agree(const PathCase& pc, ops::Reduce reduce, int threads) {
  std::mt19937 rng(11);
  std::vector<I> index;
  std::uniform_int_distribution<int64_t> pick(1, pc.rows - 2);  // the last row stays empty
  for (int64_t e = 0; e < 8 * pc.rows; ++e) index.push_back(static_cast<I>(pick(rng)));
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
    for (ops::Reduce reduce :
         {ops::Reduce::kSum, ops::Reduce::kMean, ops::Reduce::kMax, ops::Reduce::kMin}) {
      for (int threads : {1, 2}) {
        expect_paths_agree<float, int32_t>(pc, reduce, threads);
        expect_paths_agree<float, int64_t>(pc, reduce, threads);
        expect_paths_agree<double, int32_t>(pc, reduce, threads);
        expect_paths_agree<double, int64_t>(pc, reduce, threads);
      }
    }
  }
}

}  // namespace
}  // namespace gnnrt::testing
