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
#include "ops/elementwise.h"
#include "ops/gcn_norm.h"
#include "ops/layer_norm.h"
#include "ops/optimizer.h"
#include "ops/error.h"
#include "ops/gather.h"
#include "ops/head_edges.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/sparse_matmul.h"
#include "ops/spmm.h"
#include "runtime/builder.h"

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
    // X [2, 3] with the 3 entries of adj (rows = its destinations).
    v.push_back({"sparse_matmul_values_size", [] {
                   std::vector<float> values(2), b(6), out(4);
                   sparse_matmul_forward<float, int64_t>(adj, values, b, 2, false, {}, out);
                 }, "sparse_matmul: values has 2 elements, expected E (stored values of X) = 3"});
    v.push_back({"sparse_matmul_b_size", [] {
                   std::vector<float> values(3), b(5), out(4);
                   sparse_matmul_forward<float, int64_t>(adj, values, b, 2, false, {}, out);
                 }, "sparse_matmul: b has 5 elements, expected K*M = 6"});
    v.push_back({"sparse_matmul_workspace", [] {
                   std::vector<float> values(3), b(6), out(4);
                   sparse_matmul_forward<float, int64_t>(adj, values, b, 2, true, {}, out);
                 }, "sparse_matmul: workspace has 0 elements, expected K*M = 6"});
    v.push_back({"sparse_matmul_pair_b2_size", [] {
                   std::vector<float> values(3), b(6), b2(5), out(4), out2(4);
                   sparse_matmul_forward_pair<float, int64_t>(adj, values, b, b2, 2, false, {}, {}, out, out2);
                 }, "sparse_matmul (pair): b2 has 5 elements, expected len(b) = 6"});
    v.push_back({"sparse_matmul_pair_out2_size", [] {
                   std::vector<float> values(3), b(6), b2(6), out(4), out2(3);
                   sparse_matmul_forward_pair<float, int64_t>(adj, values, b, b2, 2, false, {}, {}, out, out2);
                 }, "sparse_matmul (pair): out2 has 3 elements, expected len(out) = 4"});
    v.push_back({"sparse_matmul_pair_workspace2", [] {
                   std::vector<float> values(3), b(6), b2(6), ws(6), out(4), out2(4);
                   sparse_matmul_forward_pair<float, int64_t>(adj, values, b, b2, 2, true, ws, {}, out, out2);
                 }, "sparse_matmul (pair): workspace2 has 0 elements, expected K*M = 6"});
    v.push_back({"sparse_matmul_backward_pair_grad_out2", [] {
                   std::vector<float> values(3), g(4), g2(5), gb(6), gb2(6);
                   sparse_matmul_backward_b_pair<float, int64_t>(adj, values, g, g2, 2, true, {}, {}, gb, gb2);
                 }, "sparse_matmul_backward_b (pair): grad_out2 has 5 elements, expected len(grad_out) = 4"});
    v.push_back({"sparse_matmul_backward_pair_grad_b2", [] {
                   std::vector<float> values(3), g(4), g2(4), gb(6), gb2(7);
                   sparse_matmul_backward_b_pair<float, int64_t>(adj, values, g, g2, 2, true, {}, {}, gb, gb2);
                 }, "sparse_matmul_backward_b (pair): grad_b2 has 7 elements, expected len(grad_b) = 6"});
    v.push_back({"sparse_matmul_negative_m", [] {
                   std::vector<float> values(3), b, out;
                   sparse_matmul_forward<float, int64_t>(adj, values, b, -1, false, {}, out);
                 }, "sparse_matmul: m is negative (-1)"});
    v.push_back({"sparse_matmul_backward_grad_out", [] {
                   std::vector<float> values(3), g(3), gb(6);
                   sparse_matmul_backward_b<float, int64_t>(adj, values, g, 2, true, {}, gb);
                 }, "sparse_matmul_backward_b: grad_out has 3 elements, expected N*M = 4"});
    v.push_back({"sparse_matmul_backward_grad_b", [] {
                   std::vector<float> values(3), g(4), gb(7);
                   sparse_matmul_backward_b<float, int64_t>(adj, values, g, 2, true, {}, gb);
                 }, "sparse_matmul_backward_b: b has 7 elements, expected K*M = 6"});
    // G [5000, 64] misses the cache: the gradient walks X by rows and, stored
    // transposed, needs its [K, M] accumulators.
    v.push_back({"sparse_matmul_backward_workspace", [] {
                   const std::vector<int64_t> src{2}, dst{4999};
                   const auto wide = Adjacency<int64_t>::build(src, dst, 3, 5000);
                   std::vector<float> values(1), g(5000 * 64), gb(3 * 64);
                   sparse_matmul_backward_b<float, int64_t>(wide, values, g, 64, true, {}, gb);
                 }, "sparse_matmul_backward_b: workspace has 0 elements, expected K*M (walked by rows) = 192"});
    v.push_back({"sparse_dropout_p", [] {
                   std::vector<float> values(3), out(3);
                   sparse_dropout_forward<float, int64_t>({}, -0.5, adj.by_dst, {}, values, out);
                 }, "sparse_dropout: p = -0.500000 is outside [0, 1]"});
    v.push_back({"sparse_dropout_values_size", [] {
                   std::vector<float> values(4), out(4);
                   sparse_dropout_forward<float, int64_t>({}, 0.5, adj.by_dst, {}, values, out);
                 }, "sparse_dropout: values has 4 elements, expected E (stored values) = 3"});
    v.push_back({"sparse_dropout_global_rows", [] {
                   std::vector<float> values(3), out(3);
                   std::vector<int64_t> rows(5);
                   sparse_dropout_forward<float, int64_t>({}, 0.5, adj.by_dst, rows, values, out);
                 }, "sparse_dropout: global_rows has 5 elements, expected rows = 2"});
    v.push_back({"sddmm_heads_not_dividing", [] {
                   std::vector<float> a(9), b(6), out(6);
                   sddmm_dot_forward<float, int64_t>(adj, 3, 2, a, b, out);
                 }, "sddmm_dot: heads = 2 must be positive and divide F = 3"});
    v.push_back({"edge_head_dot_a_size", [] {
                   std::vector<float> a(7), r(6), out(6);
                   edge_head_dot<float, int64_t>(adj, 2, 2, a, r, out);
                 }, "edge_head_dot: a has 7 elements, expected N_dst*H*K = 8"});
    v.push_back({"head_scatter_zero_heads", [] {
                   std::vector<float> w, r(6), out;
                   head_scatter<float, int64_t>(adj, 0, 2, w, r, out);
                 }, "head_scatter: heads = 0 must be positive"});
    v.push_back({"head_gather_out_size", [] {
                   std::vector<float> w(6), a(8), out(5);
                   head_gather<float, int64_t>(adj, 2, 2, w, a, out);
                 }, "head_gather: out has 5 elements, expected E*K = 6"});
    v.push_back({"head_matmul_w_size", [] {
                   std::vector<float> x(12), w(20), out(16);
                   head_matmul<float>(x, w, out, 2, 2, 3, 4, false);
                 }, "head_matmul: w has 20 elements, expected H*P*Q = 24"});
    v.push_back({"head_outer_out_size", [] {
                   std::vector<float> a(12), b(16), out(23);
                   head_outer<float>(a, b, out, 2, 2, 3, 4);
                 }, "head_outer: out has 23 elements, expected H*P*Q = 24"});
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
    v.push_back({"cross_entropy_label_out_of_range", [] {
                   std::vector<float> x(9);
                   cross_entropy_forward<float, int64_t>(x, 3, 3, idx({0, 2, 9}), {});
                 }, "cross_entropy: labels[2] = 9 is outside [0, 3)"});
    v.push_back({"cross_entropy_backward_grad_x_size", [] {
                   std::vector<float> x(9), gx(8);
                   cross_entropy_backward<float, int64_t>(x, 3, 3, idx({0, 2, 1}), {}, 1.0f, gx);
                 }, "cross_entropy_backward: grad_x has 8 elements, expected rows*classes = 9"});
    v.push_back({"dropout_p", [] {
                   std::vector<float> x(4), out(4);
                   dropout_forward<float>({}, 1.5, 2, {}, x, out);
                 }, "dropout: p = 1.500000 is outside [0, 1]"});
    v.push_back({"dropout_keep_size", [] {
                   std::vector<float> x(4), out(4);
                   std::vector<uint8_t> keep(3);
                   dropout_forward<float>({}, 0.5, 2, {}, x, out, keep);
                 }, "dropout: keep has 3 elements, expected rows*cols = 4"});
    v.push_back({"dropout_backward_sizes", [] {
                   std::vector<float> g(4), gx(4);
                   std::vector<uint8_t> keep(5);
                   dropout_backward<float>(0.5, keep, g, gx);
                 }, "dropout_backward: grad_out has 4 elements, expected len(keep) = 5"});
    v.push_back({"dropout_backward_p", [] {
                   std::vector<float> g(4), gx(4);
                   std::vector<uint8_t> keep(4);
                   dropout_backward<float>(-0.1, keep, g, gx);
                 }, "dropout_backward: p = -0.100000 is outside [0, 1]"});
    v.push_back({"dropout_ragged_rows", [] {
                   std::vector<float> x(5), out(5);
                   dropout_forward<float>({}, 0.5, 2, {}, x, out);
                 }, "dropout: x has 5 elements, expected rows*cols = 4"});
    v.push_back({"bias_add_bias_size", [] {
                   std::vector<float> x(6), b(2), out(6);
                   bias_add_forward<float>(x, b, out, 2, 3);
                 }, "bias_add: bias has 2 elements, expected cols = 3"});
    v.push_back({"relu_out_size", [] {
                   std::vector<float> x(6), out(5);
                   relu_forward<float>(x, out);
                 }, "relu: out has 5 elements, expected len(x) = 6"});
    v.push_back({"leaky_relu_grad_size", [] {
                   std::vector<float> x(6), g(4), gx(6);
                   leaky_relu_backward<float>(x, 0.2f, g, gx);
                 }, "leaky_relu_backward: grad_out has 4 elements, expected len(x) = 6"});
    v.push_back({"elu_out_size", [] {
                   std::vector<double> x(3), out(4);
                   elu_forward<double>(x, 1.0, out);
                 }, "elu: out has 4 elements, expected len(x) = 3"});
    v.push_back({"concat_input_size", [] {
                   std::vector<float> a(6), b(5), out(12);
                   const std::vector<std::span<const float>> in{a, b};
                   const std::vector<int64_t> widths{2, 2};
                   concat_cols<float>(in, widths, 3, out);
                 }, "concat: input 1 has 5 elements, expected rows*width = 6"});
    v.push_back({"slice_cols_range", [] {
                   std::vector<float> x(12), out(6);
                   slice_cols<float>(x, 3, 4, 3, 2, out);
                 }, "slice_cols: columns 3 .. 5 exceed the 4 of x"});
    v.push_back({"silu_out_size", [] {
                   std::vector<float> x(3), out(4);
                   activation_forward<float>(Activation::kSilu, x, out);
                 }, "silu: out has 4 elements, expected len(x) = 3"});
    v.push_back({"gelu_tanh_grad_size", [] {
                   std::vector<double> x(3), g(2), gx(3);
                   activation_backward<double>(Activation::kGeluTanh, x, g, gx);
                 }, "gelu_tanh_backward: grad_out has 2 elements, expected len(x) = 3"});
    v.push_back({"exp_out_size", [] {
                   std::vector<double> x(3), out(2);
                   activation_forward<double>(Activation::kExp, x, out);
                 }, "exp: out has 2 elements, expected len(x) = 3"});
    v.push_back({"log_softmax_x_size", [] {
                   std::vector<float> x(5), out(6);
                   log_softmax_forward<float>(x, 2, 3, out);
                 }, "log_softmax: x has 5 elements, expected rows*cols = 6"});
    v.push_back({"scale_out_size", [] {
                   std::vector<float> x(3), out(2);
                   ops::scale<float>(x, 2.0f, out);
                 }, "scale: out has 2 elements, expected len(x) = 3"});
    v.push_back({"layer_norm_moments_size", [] {
                   std::vector<float> x(6);
                   std::vector<double> m(2);
                   layer_norm_moments<float>(x, {}, 2, 3, m);
                 }, "layer_norm_moments: moments has 2 elements, expected 3 = 3"});
    // The small ops and the optimizers check their spans too.
    v.push_back({"add_b_size", [] {
                   std::vector<float> a(4), b(3), out(4);
                   ops::add<float>(a, b, out);
                 }, "add: b has 3 elements, expected len(a) = 4"});
    v.push_back({"mul_out_size", [] {
                   std::vector<double> a(4), b(4), out(5);
                   ops::mul<double>(a, b, out);
                 }, "mul: out has 5 elements, expected len(a) = 4"});
    v.push_back({"head_dot_att_size", [] {
                   std::vector<float> x(12), att(5), out(6);
                   head_dot_forward<float>(x, att, 3, 2, 2, out);
                 }, "head_dot: att has 5 elements, expected H*C = 4"});
    v.push_back({"head_dot_grad_x_plus_size", [] {
                   std::vector<float> att(4), g(6), gx(12), plus(11);
                   head_dot_backward_x<float>(att, g, 3, 2, 2, gx, plus);
                 }, "head_dot_backward_x: plus has 11 elements, expected N*H*C = 12"});
    v.push_back({"head_dot_zero_heads", [] {
                   std::vector<float> x, att, out;
                   head_dot_forward<float>(x, att, 3, 0, 2, out);
                 }, "head_dot: heads must be >= 1, got 0"});
    v.push_back({"head_mean_out_size", [] {
                   std::vector<float> x(12), out(5);
                   head_mean_forward<float>(x, 3, 2, 2, out);
                 }, "head_mean: out has 5 elements, expected N*C = 6"});
    v.push_back({"edge_scale_weight_size", [] {
                   std::vector<float> m(8), w(3), out(8);
                   edge_scale<float>(m, w, 4, 1, 2, out);
                 }, "edge_scale: weight has 3 elements, expected E*H = 4"});
    v.push_back({"edge_dot_out_size", [] {
                   std::vector<float> g(8), m(8), out(5);
                   edge_dot<float>(g, m, 4, 1, 2, out);
                 }, "edge_dot: out has 5 elements, expected E*H = 4"});
    v.push_back({"divide_rows_negative_degree", [] {
                   std::vector<float> x(4), out(4);
                   divide_rows<float>(x, idx({1, -2}), 2, out);
                 }, "divide_rows: degree[1] = -2 is negative"});
    v.push_back({"l1_grad_size", [] {
                   std::vector<float> p(6), t(6), g(5);
                   std::vector<uint8_t> mask(3);
                   mse_loss_backward<float>(p, t, mask, 3, 2, 1.0f, g, LossForm::kAbsolute);
                 }, "l1_loss_backward: grad_pred has 5 elements, expected rows*cols = 6"});
    v.push_back({"mse_mask_size", [] {
                   std::vector<float> p(6), t(6);
                   std::vector<uint8_t> mask(2);
                   mse_loss_forward<float>(p, t, mask, 3, 2);
                 }, "mse_loss: mask has 2 elements, expected rows = 3"});
    v.push_back({"count_correct_label", [] {
                   std::vector<float> lp(6);
                   std::vector<uint8_t> mask{1, 0, 1};
                   count_correct<float>(lp, idx({0, 7, 5}), mask, 3, 2);
                 }, "count_correct: labels[2] = 5 is outside [0, 2)"});
    v.push_back({"layer_norm_gamma_size", [] {
                   std::vector<float> x(6), g(2), b(3), out(6);
                   std::vector<double> m(3);
                   layer_norm_forward<float>(LayerNormMode::kGraph, x, g, b, m, 2, 3, 1e-5, out);
                 }, "layer_norm: gamma has 2 elements, expected cols = 3"});
    v.push_back({"layer_norm_moments_missing", [] {
                   std::vector<float> x(6), g(3), b(3), out(6);
                   layer_norm_forward<float>(LayerNormMode::kGraph, x, g, b, {}, 2, 3, 1e-5, out);
                 }, "layer_norm: moments has 0 elements, expected graph mode's = 3"});
    v.push_back({"layer_norm_eps", [] {
                   std::vector<float> x(6), g(3), b(3), out(6);
                   layer_norm_forward<float>(LayerNormMode::kNode, x, g, b, {}, 2, 3, 0.0, out);
                 }, "layer_norm: eps must be > 0"});
    v.push_back({"layer_norm_backward_mask", [] {
                   std::vector<float> x(6), g(3), go(6), gx(6);
                   std::vector<double> m(3), sums(2);
                   std::vector<uint8_t> mask(5);
                   layer_norm_backward_x<float>(LayerNormMode::kGraph, x, g, go, m, sums, mask, 2, 3,
                                                1e-5, gx);
                 }, "layer_norm_backward_x: mask has 5 elements, expected rows (or none) = 2"});
    v.push_back({"adam_state_size", [] {
                   std::vector<float> g(4), p(4), m(3), s(4);
                   adam_update<float>({}, g, p, m, s);
                 }, "adam_update: exp_avg has 3 elements, expected len(param) = 4"});
    v.push_back({"adam_step_zero", [] {
                   std::vector<float> g(4), p(4), m(4), s(4);
                   adam_update<float>({.step = 0}, g, p, m, s);
                 }, "adam_update: step must be >= 1, got 0"});
    v.push_back({"sgd_grad_size", [] {
                   std::vector<float> g(2), p(4), buf(4);
                   sgd_update<float>({}, g, p, buf);
                 }, "sgd_update: grad has 2 elements, expected len(param) = 4"});
    v.push_back({"sgd_momentum_buffer", [] {
                   std::vector<float> g(4), p(4), buf;
                   sgd_update<float>({.momentum = 0.9}, g, p, buf);
                 }, "sgd_update: momentum_buffer has 0 elements, expected len(param) = 4"});
    v.push_back({"gcn_norm_degree_size", [] {
                   const auto square = Adjacency<int64_t>::build(idx({0, 1}), idx({1, 1}), 2, 2);
                   std::vector<float> w(2);
                   gcn_norm<float, int64_t>(square, idx({1, 2, 3}), w);
                 }, "gcn_norm: degree has 3 elements, expected N = 2"});
    v.push_back({"gcn_norm_negative_degree", [] {
                   const auto square = Adjacency<int64_t>::build(idx({0, 1}), idx({1, 1}), 2, 2);
                   std::vector<float> w(2);
                   gcn_norm<float, int64_t>(square, idx({1, -1}), w);
                 }, "gcn_norm: degree[1] = -1 is negative"});
    v.push_back({"gcn_norm_two_node_sets", [] {
                   std::vector<float> w(3);
                   gcn_norm<float, int64_t>(adj, {}, w);
                 }, "gcn_norm: the graph has 3 source and 2 destination nodes"});
    v.push_back({"segment_max_m_size", [] {
                   std::vector<float> score(4), m(3);
                   segment_max<float, int64_t>(seg, 1, score, m);
                 }, "segment_max: m has 3 elements, expected N*H = 4"});
    v.push_back({"segment_exp_sum_score_size", [] {
                   std::vector<float> score(3), m(4), s(4);
                   segment_exp_sum<float, int64_t>(seg, 1, score, m, s);
                 }, "segment_exp_sum: score has 3 elements, expected E*H = 4"});
    v.push_back({"segment_softmax_apply_s_size", [] {
                   std::vector<float> score(8), m(8), s(7), alpha(8);
                   segment_softmax_apply<float, int64_t>(seg, 2, score, m, s, alpha);
                 }, "segment_softmax_apply: s has 7 elements, expected N*H = 8"});
    v.push_back({"attention_softmax_a_src_size", [] {
                   std::vector<float> a(5), b(4), alpha(6);
                   attention_softmax_forward<float, int64_t>(adj, 2, 0.2f, a, b, alpha);
                 }, "attention_softmax: a_src has 5 elements, expected N_src*H = 6"});
    v.push_back({"attention_softmax_zero_heads", [] {
                   std::vector<float> a, b, alpha;
                   attention_softmax_forward<float, int64_t>(adj, 0, 0.2f, a, b, alpha);
                 }, "attention_softmax: heads = 0 must be positive"});
    v.push_back({"attention_softmax_backward_grad_logit", [] {
                   std::vector<float> a(3), b(2), alpha(3), g(3), gl(2);
                   attention_softmax_backward<float, int64_t>(adj, 1, 0.2f, a, b, alpha, g, gl);
                 }, "attention_softmax_backward: grad_logit has 2 elements, expected E*H = 3"});
    v.push_back({"sddmm_dot_backward_grad_b", [] {
                   std::vector<float> a(6), b(4), g(3), gb(3);
                   sddmm_dot_backward<float, int64_t>(adj, 2, 1, a, b, g, {}, gb);
                 }, "sddmm_dot_backward: grad_b has 3 elements, expected N_dst*F = 4"});
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

// Ops the executor runs without a kernel of their own (fill, accumulate,
// keep_winners) and the graph-level rules are checked by the Builder:
// ShapeError naming the program, the op and the shapes, at build time.
TEST(BadInputTest, BuilderRulesOfOpsWithoutAKernel) {
  using runtime::Builder;
  using runtime::ShapeError;
  const auto expect = [](const std::function<void(Builder&)>& build, const std::string& message) {
    Builder b("bad");
    try {
      build(b);
      ADD_FAILURE() << "no ShapeError; expected: " << message;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect([](Builder& b) { b.fill({2, -1}, 0.0); }, "program 'bad': value 'fill' has a negative size in [2, -1]");
  expect([](Builder& b) {
    const auto m = b.state("metrics", DType::kF64, {4});
    b.accumulate(m, b.fill({1}, 1.0), 4);
  }, "accumulate: slot 4 is outside metrics [4]");
  expect([](Builder& b) {
    b.graph("g", 2, 2, 3);
    b.keep_winners(0, b.input("g", DType::kF32, {2, 3}), b.input("arg", DType::kI32, {2, 4}));
  }, "keep_winners: g [2, 3] and arg [2, 4] must have the same shape");
  expect([](Builder& b) {
    b.graph("g", 3, 2, 5);
    b.gcn_norm(0);
  }, "gcn_norm: graph 'g' joins 3 source and 2 destination nodes");
  expect([](Builder& b) { b.halo_sum(b.input("x", DType::kF32, {2, 3})); },
         "halo_sum: only a partitioned program exchanges halo rows");
  expect([](Builder& b) {
    b.partition(4);
    b.halo_sum(b.input("x", DType::kF32, {3, 2}));
  }, "halo_sum: x [3, 2] must have a row per local vertex (4)");
  expect([](Builder& b) { b.halo_max(ops::Reduce::kMax, b.input("x", DType::kF32, {2, 3})); },
         "halo_max: only a partitioned program exchanges halo rows");
  expect([](Builder& b) {
    b.partition(4);
    b.halo_max(ops::Reduce::kMax, b.input("x", DType::kF32, {3, 2}));
  }, "halo_max: x [3, 2] must have a row per local vertex (4)");
  expect([](Builder& b) {
    b.partition(4);
    b.halo_max(ops::Reduce::kSum, b.input("x", DType::kF32, {4, 2}));
  }, "halo_max: reduce sum is not max or min");
  expect([](Builder& b) {
    b.partition(4);
    b.halo_max(ops::Reduce::kMax, b.input("x", DType::kI64, {4, 2}));
  }, "halo_max: x must be float32, not int64");
  expect([](Builder& b) {
    b.partition(4);
    b.graph("g", 4, 4, 6);
    b.halo_max(ops::Reduce::kMax, b.input("x", DType::kF32, {4, 2}), b.input("arg", DType::kI32, {4, 3}), 0);
  }, "halo_max: x [4, 2] and arg [4, 3] must have the same shape");
  expect([](Builder& b) {
    b.replicate();
    b.dropout(b.input("x", DType::kF32, {2, 3}), 0.5, 1);
  }, "dropout: a data-parallel program's dropout needs its rows' global ids");
  expect([](Builder& b) {
    b.dropout(b.input("x", DType::kF32, {2, 3}), 0.5, 1, -1, b.input("ids", DType::kI64, {3}));
  }, "dropout: x [2, 3] has another row count than its global ids [3]");
  expect([](Builder& b) { b.dropout(b.input("x", DType::kF32, {2, 3}), 1.5, 1); }, "dropout: p = 1.5 is not in [0, 1]");
  expect([](Builder& b) { b.allreduce(b.input("i", DType::kI64, {2})); },
         "allreduce: x must be float32 or float64, not int64");
  expect([](Builder& b) {
    b.layer_norm(b.input("x", DType::kF32, {2, 3}), b.input("w", DType::kF32, {3}),
                 b.input("b", DType::kF32, {3}), false, 0.0);
  }, "layer_norm: eps = 0 must be > 0");
  expect([](Builder& b) { b.add(b.input("x", DType::kF32, {2}), b.input("y", DType::kF64, {2})); },
         "add: b must be float32, not float64");
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

// The edge-count guard at its bound, without 2^31 edges in memory: the
// count alone decides.
TEST(Limits, EdgeCountsBeyondTheIndexTypeAreRefused) {
  EXPECT_NO_THROW(check_edge_count<int32_t>((int64_t{1} << 31) - 1, "csr"));
  try {
    check_edge_count<int32_t>(int64_t{1} << 31, "csr");
    ADD_FAILURE() << "2^31 edges with int32 ids: no error";
  } catch (const OpError& e) {
    EXPECT_NE(std::string(e.what()).find("2147483648 edges do not fit the index type"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_edge_count<int64_t>(int64_t{1} << 40, "csr"));
}

}  // namespace
}  // namespace gnnrt::ops
