// Bad input to any kernel ends in an OpError that names the op, the argument
// and, for indices, the first bad position; never a crash or a silent result.
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/error.h"
#include "ops/gather.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/spmm.h"

namespace gnnrt::ops {
namespace {

struct BadInput {
  std::string name;
  std::function<void()> call;
  std::string message;  // the exception text must contain this
};

std::vector<int64_t> idx(std::initializer_list<int64_t> v) { return v; }

const std::vector<BadInput>& bad_inputs() {
  static const std::vector<BadInput> list = [] {
    static const auto index = idx({0, 1, 1, 3});
    static const auto adj = Adjacency<int64_t>::build(idx({0, 1, 2}), idx({1, 1, 0}), 3, 2);
    static const auto seg = Csr<int64_t>::build(index, 4);
    std::vector<BadInput> v;
    v.push_back({"index_above_range", [] { Csr<int64_t>::build(idx({0, 1, 7, 9}), 5); },
                 "csr: index[2] = 7 is outside [0, 5)"});
    v.push_back({"index_negative", [] { Csr<int64_t>::build(idx({0, -1}), 5); },
                 "index[1] = -1 is outside [0, 5)"});
    v.push_back({"negative_rows", [] { Csr<int64_t>::build(idx({}), -3); },
                 "number of rows is negative (-3)"});
    v.push_back({"adjacency_length_mismatch",
                 [] { Adjacency<int64_t>::build(idx({0, 1}), idx({0}), 2, 2); },
                 "adjacency: dst has 1 elements, expected len(src) = 2"});
    v.push_back({"adjacency_src_out_of_range",
                 [] { Adjacency<int64_t>::build(idx({0, 4}), idx({0, 1}), 2, 2); },
                 "adjacency: src[1] = 4 is outside [0, 2)"});
    v.push_back({"scatter_src_length", [] {
                   std::vector<float> src(10), out(8);
                   scatter_forward<float, int64_t>(Reduce::kSum, seg, 2, src, out, {});
                 }, "scatter: src has 10 elements, expected E*F = 8"});
    v.push_back({"scatter_max_without_arg", [] {
                   std::vector<float> src(8), out(8);
                   scatter_forward<float, int64_t>(Reduce::kMax, seg, 2, src, out, {});
                 }, "scatter: arg has 0 elements, expected N*F = 8"});
    v.push_back({"scatter_negative_features", [] {
                   std::vector<float> src, out;
                   scatter_forward<float, int64_t>(Reduce::kSum, seg, -1, src, out, {});
                 }, "scatter: features is negative (-1)"});
    v.push_back({"scatter_backward_grad_size", [] {
                   std::vector<float> g(3), gs(8);
                   scatter_backward<float, int64_t>(Reduce::kMean, seg, 2, g, {}, gs);
                 }, "scatter_backward: grad_out has 3 elements, expected N*F = 8"});
    v.push_back({"unknown_reduce", [] { parse_reduce("prod"); }, "unknown reduction 'prod'"});
    v.push_back({"gather_out_size", [] {
                   std::vector<float> x(8), out(7);
                   gather_forward<float, int64_t>(seg, 2, x, out);
                 }, "gather: out has 7 elements, expected E*F = 8"});
    v.push_back({"spmm_x_size", [] {
                   std::vector<float> x(5), out(4);
                   spmm_forward<float, int64_t>(Reduce::kSum, adj, 2, x, {}, out, {});
                 }, "spmm: x has 5 elements, expected N_src*F = 6"});
    v.push_back({"spmm_weight_size", [] {
                   std::vector<float> x(6), w(4), out(4);
                   spmm_forward<float, int64_t>(Reduce::kSum, adj, 2, x, w, out, {});
                 }, "spmm: weight has 4 elements; expected E = 3"});
    v.push_back({"spmm_backward_grad_x", [] {
                   std::vector<float> x(6), g(4), gx(5);
                   spmm_backward<float, int64_t>(Reduce::kSum, adj, 2, x, {}, g, {}, gx, {});
                 }, "spmm_backward: grad_x has 5 elements, expected N_src*F = 6"});
    v.push_back({"sddmm_heads_not_dividing", [] {
                   std::vector<float> a(9), b(6), out(6);
                   sddmm_dot_forward<float, int64_t>(adj, 3, 2, a, b, out);
                 }, "sddmm_dot: heads = 2 must be positive and divide F = 3"});
    v.push_back({"softmax_zero_heads", [] {
                   std::vector<float> s, a;
                   segment_softmax_forward<float, int64_t>(seg, 0, s, a);
                 }, "segment_softmax: heads = 0 must be positive"});
    v.push_back({"matmul_b_size", [] {
                   std::vector<float> a(6), b(5), c(4);
                   matmul<float>(a, b, c, 2, 3, 2);
                 }, "matmul: b has 5 elements, expected k*n = 6"});
    v.push_back({"nll_label_out_of_range", [] {
                   std::vector<float> lp(9);
                   nll_loss_forward<float, int64_t>(lp, 3, 3, idx({0, 2, 9}), {});
                 }, "nll_loss: labels[2] = 9 is outside [0, 3)"});
    v.push_back({"dropout_p", [] {
                   std::vector<float> x(4), out(4);
                   dropout_forward<float>({}, 1.5, 2, {}, x, out);
                 }, "dropout: p = 1.500000 is outside [0, 1]"});
    v.push_back({"dropout_ragged_rows", [] {
                   std::vector<float> x(5), out(5);
                   dropout_forward<float>({}, 0.5, 2, {}, x, out);
                 }, "dropout: x has 5 elements, expected rows*cols = 4"});
    return v;
  }();
  return list;
}

class BadInputTest : public ::testing::TestWithParam<int> {};

TEST_P(BadInputTest, ThrowsOpErrorNamingTheProblem) {
  const BadInput& b = bad_inputs()[GetParam()];
  try {
    b.call();
    FAIL() << b.name << ": no exception";
  } catch (const OpError& e) {
    EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << b.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BadInputTest,
                         ::testing::Range(0, static_cast<int>(bad_inputs().size())),
                         [](const auto& info) { return bad_inputs()[info.param].name; });

// Zero features over a graph with edges is valid input: every kernel runs on
// empty spans (null data) and writes nothing, or zeros per edge for sddmm. A
// prefetch of the row tail once computed `row + bytes - 1` from a null row
// here and looped forever (the graph has more edges than the prefetch
// distance, 64 rows ahead for empty rows, so the loops do prefetch).
TEST(ZeroFeatures, EveryAggregationRunsOnEmptyRows) {
  constexpr int64_t E = 200;
  std::vector<int64_t> src(E), dst(E);
  for (int64_t e = 0; e < E; ++e) {
    src[e] = (e * 7) % 3;
    dst[e] = (e * 5 + 1) % 3;
  }
  const auto adj = Adjacency<int64_t>::build(src, dst, 3, 3);
  const std::vector<float> none;
  std::vector<float> out, weight(E, 2.0f);
  std::vector<int64_t> arg;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Reduce r : {Reduce::kSum, Reduce::kMean, Reduce::kMax, Reduce::kMin}) {
      for (ScatterPath path : {ScatterPath::kAuto, ScatterPath::kCsrWalk, ScatterPath::kStreaming}) {
        scatter_forward<float, int64_t>(r, adj.by_dst, 0, none, out, arg, path);
      }
      std::vector<float> grad;
      scatter_backward<float, int64_t>(r, adj.by_dst, 0, none, arg, grad);
      spmm_forward<float, int64_t>(r, adj, 0, none, {}, out, arg);
      spmm_forward<float, int64_t>(r, adj, 0, none, weight, out, arg);
      std::vector<float> grad_w(E, -1.0f);
      spmm_backward<float, int64_t>(r, adj, 0, none, weight, none, arg, out, grad_w);
      EXPECT_EQ(grad_w, std::vector<float>(E, 0.0f)) << to_string(r);
    }
    gather_forward<float, int64_t>(adj.by_src, 0, none, out);
    std::vector<float> scores(E, -1.0f);
    sddmm_dot_forward<float, int64_t>(adj, 0, 1, none, none, scores);
    EXPECT_EQ(scores, std::vector<float>(E, 0.0f));
  }
}

}  // namespace
}  // namespace gnnrt::ops
