// Dense ops: constants, matrix products, elementwise sums and products, bias, column concatenation and slices,
// reshapes: each op's shape rule, cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/dense.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void fill(OpCheck& c) {
  c.operands(0, 0);
  c.out_float(Shape(c.attrs().shape().begin(), c.attrs().shape().end()));
}

template <typename T>
double run_fill(const Kernel<T>& run) {
  std::fill(run.out().begin(), run.out().end(), static_cast<T>(run.attrs.fill_value()));
  return 0;
}

void matmul(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const Shape& sa = c.shape(0);
  const Shape& sb = c.shape(1);
  const bool ta = c.attrs().trans_a(), tb = c.attrs().trans_b();
  const int64_t m = ta ? sa[1] : sa[0], ka = ta ? sa[0] : sa[1];
  const int64_t kb = tb ? sb[1] : sb[0], n = tb ? sb[0] : sb[1];
  if (ka != kb) {
    c.fail(fmt::format("inner sizes differ: a {}{} times b {}{}", shape_string(sa), ta ? "ᵀ" : "", shape_string(sb),
                       tb ? "ᵀ" : ""));
  }
  c.out_float({m, n});
}

void matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const auto& a = p.value(op.inputs[0]).shape;
  const auto& o = p.value(op.outputs[0]).shape;
  const double k = static_cast<double>(op.attrs.trans_a() ? a[0] : a[1]);
  c.flops = 2 * static_cast<double>(o[0]) * static_cast<double>(o[1]) * k;
}

template <typename T>
double run_mat_mul(const Kernel<T>& run) {
  const int64_t k = run.attrs.trans_a() ? run.in_rows(0) : run.in_cols(0);
  ops::matmul<T>(run.in(0), run.in(1), run.out(), run.out_rows(), k, run.out_cols(), run.attrs.trans_a(),
                 run.attrs.trans_b());
  return 0;
}

void mat_mul_gradient(Gradient& d) {
  const ValueId A = d.op.inputs[0], B = d.op.inputs[1];
  // C = op(A) op(B); see builder.h for the stored layouts.
  if (d.needs(A)) {
    d.add(A, d.a.trans_a() ? d.b.matmul(B, d.g, d.a.trans_b(), true) : d.b.matmul(d.g, B, false, !d.a.trans_b()));
  }
  if (d.needs(B)) {
    d.add(B, d.a.trans_b() ? d.b.matmul(d.g, A, true, d.a.trans_a()) : d.b.matmul(A, d.g, !d.a.trans_a(), false));
  }
}

// add, mul: elementwise over two operands of one shape.
void binary(OpCheck& c) {
  c.operands(2, 2);
  c.same_shape(0, 1, "a", "b");
  c.floating(0, "a");
  c.floating(1, "b");
  c.out_float(c.shape(0));
}

template <typename T>
double run_add(const Kernel<T>& run) {
  ops::add<T>(run.in(0), run.in(1), run.out());
  return 0;
}

void add_gradient(Gradient& d) {
  d.add(d.op.inputs[0], d.g);
  d.add(d.op.inputs[1], d.g);
}

template <typename T>
double run_mul(const Kernel<T>& run) {
  ops::mul<T>(run.in(0), run.in(1), run.out());
  return 0;
}

void mul_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.mul(d.g, d.op.inputs[1]));
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.mul(d.g, d.op.inputs[0]));
}

template <typename T>
double run_scale(const Kernel<T>& run) {
  ops::scale<T>(run.in(0), static_cast<T>(run.attrs.factor()), run.out());
  return 0;
}

void scale_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.scale(d.g, d.a.factor()));
}

void bias_add(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.floating(1, "bias");
  if (c.shape(1) != Shape{c.cols(0)}) {
    c.fail(fmt::format("bias {} does not match x {}", shape_string(c.shape(1)), shape_string(c.shape(0))));
  }
  c.out_float(c.shape(0));
}

template <typename T>
double run_bias_add(const Kernel<T>& run) {
  ops::bias_add_forward<T>(run.in(0), run.in(1), run.out(), run.out_rows(), run.out_cols());
  return 0;
}

void bias_add_gradient(Gradient& d) {
  d.add(d.op.inputs[0], d.g);
  if (d.needs(d.op.inputs[1])) d.add(d.op.inputs[1], d.b.bias_grad(d.g));
}

void bias_grad(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "g");
  c.out_float({c.cols(0)});
}

template <typename T>
double run_bias_grad(const Kernel<T>& run) {
  ops::bias_add_backward<T>(run.in(0), run.in_rows(0), run.in_cols(0), run.out());
  return 0;
}

void concat(OpCheck& c) {
  if (c.count() == 0) c.fail("no inputs");
  int64_t width = 0;
  for (std::size_t i = 0; i < c.count(); ++i) {
    matrix(c, i, "input");
    if (c.rows(i) != c.rows(0)) {
      c.fail(fmt::format("input {} {} and input 0 {} differ in rows", i, shape_string(c.shape(i)),
                         shape_string(c.shape(0))));
    }
    width += c.cols(i);
  }
  c.out_float({c.rows(0), width});
}

template <typename T>
double run_concat(const Kernel<T>& run) {
  std::vector<std::span<const T>> inputs;
  std::vector<int64_t> widths;
  for (size_t i = 0; i < run.op.inputs.size(); ++i) {
    inputs.push_back(run.in(i));
    widths.push_back(run.in_cols(i));
  }
  ops::concat_cols<T>(inputs, widths, run.out_rows(), run.out());
  return 0;
}

void concat_gradient(Gradient& d) {
  int64_t begin = 0;
  for (const ValueId x : d.op.inputs) {
    const int64_t width = d.b.shape(x)[1];
    if (d.needs(x)) d.add(x, d.b.slice_cols(d.g, begin, width));
    begin += width;
  }
}

void slice_cols(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  const int64_t begin = c.attrs().begin(), width = c.attrs().width();
  if (begin < 0 || width < 0 || begin + width > c.cols(0)) {
    c.fail(fmt::format("columns {} .. {} are not within x {}", begin, begin + width, shape_string(c.shape(0))));
  }
  c.out_float({c.rows(0), width});
}

template <typename T>
double run_slice_cols(const Kernel<T>& run) {
  ops::slice_cols<T>(run.in(0), run.in_rows(0), run.in_cols(0), run.attrs.begin(), run.attrs.width(), run.out());
  return 0;
}

void slice_cols_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) {
    // The gradient in its columns, zeros on either side.
    const int64_t rows = d.b.shape(d.op.inputs[0])[0], cols = d.b.shape(d.op.inputs[0])[1];
    std::vector<ValueId> parts;
    if (d.a.begin() > 0) parts.push_back(d.b.fill({rows, d.a.begin()}, 0.0));
    parts.push_back(d.g);
    if (const int64_t right = cols - d.a.begin() - d.a.width(); right > 0)
      parts.push_back(d.b.fill({rows, right}, 0.0));
    d.add(d.op.inputs[0], parts.size() == 1 ? d.g : d.b.concat(parts));
  }
}

void reshape(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "x");
  const Shape s(c.attrs().shape().begin(), c.attrs().shape().end());
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) c.fail(fmt::format("shape {} has a negative size", shape_string(s)));
    n *= d;
  }
  if (n != c.in(0).elements()) {
    c.fail(fmt::format("x {} has {} elements, shape {} {}", shape_string(c.shape(0)), c.in(0).elements(),
                       shape_string(s), n));
  }
  c.out_float(s);
}

template <typename T>
double run_reshape(const Kernel<T>& run) {
  std::copy(run.in(0).begin(), run.in(0).end(), run.out().begin());
  return 0;
}

void reshape_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.reshape(d.g, d.b.shape(d.op.inputs[0])));
}

}  // namespace

void define_dense(OpTable& t) {
  t.add({OpKind::kFill, kNoGradient, fill, nullptr, GNNRT_KERNEL(run_fill), nullptr});
  t.add({OpKind::kMatMul, 0, matmul, matmul_cost, GNNRT_KERNEL(run_mat_mul), mat_mul_gradient});
  t.add({OpKind::kAdd, 0, binary, nullptr, GNNRT_KERNEL(run_add), add_gradient});
  t.add({OpKind::kMul, 0, binary, nullptr, GNNRT_KERNEL(run_mul), mul_gradient});
  t.add({OpKind::kScale, 0, unary, nullptr, GNNRT_KERNEL(run_scale), scale_gradient});
  t.add({OpKind::kBiasAdd, 0, bias_add, nullptr, GNNRT_KERNEL(run_bias_add), bias_add_gradient});
  t.add({OpKind::kBiasGrad, 0, bias_grad, nullptr, GNNRT_KERNEL(run_bias_grad), nullptr});
  t.add({OpKind::kConcat, 0, concat, nullptr, GNNRT_KERNEL(run_concat), concat_gradient});
  t.add({OpKind::kSliceCols, 0, slice_cols, nullptr, GNNRT_KERNEL(run_slice_cols), slice_cols_gradient});
  t.add({OpKind::kReshape, 0, reshape, nullptr, GNNRT_KERNEL(run_reshape), reshape_gradient});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {
namespace {
using Shape = std::vector<int64_t>;
}  // namespace

ValueId Builder::fill(Shape s, double value) {
  OpAttrs a;
  a.set_fill_value(value);
  for (int64_t d : s) a.add_shape(d);
  return emit(OpKind::kFill, {}, a);
}

ValueId Builder::matmul(ValueId a, ValueId b, bool trans_a, bool trans_b) {
  OpAttrs attrs;
  attrs.set_trans_a(trans_a);
  attrs.set_trans_b(trans_b);
  return emit(OpKind::kMatMul, {a, b}, attrs);
}

ValueId Builder::add(ValueId a, ValueId b) { return emit(OpKind::kAdd, {a, b}); }

ValueId Builder::mul(ValueId a, ValueId b) { return emit(OpKind::kMul, {a, b}); }

ValueId Builder::scale(ValueId x, double factor) {
  OpAttrs a;
  a.set_factor(factor);
  return emit(OpKind::kScale, {x}, a);
}

ValueId Builder::bias_add(ValueId x, ValueId bias) { return emit(OpKind::kBiasAdd, {x, bias}); }

ValueId Builder::concat(const std::vector<ValueId>& inputs) { return emit(OpKind::kConcat, inputs); }

ValueId Builder::slice_cols(ValueId x, int64_t begin, int64_t width) {
  OpAttrs a;
  a.set_begin(begin);
  a.set_width(width);
  return emit(OpKind::kSliceCols, {x}, a);
}

ValueId Builder::reshape(ValueId x, std::vector<int64_t> shape) {
  OpAttrs a;
  for (int64_t d : shape) a.add_shape(d);
  return emit(OpKind::kReshape, {x}, a);
}

ValueId Builder::bias_grad(ValueId g) { return emit(OpKind::kBiasGrad, {g}); }

}  // namespace gnnrt::runtime
