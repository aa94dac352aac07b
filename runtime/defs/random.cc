// Random ops keyed by the run (seed, step) and the op (dropout, sparse dropout, normal noise): each op's shape rule,
// cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/dropout.h"
#include "ops/noise.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

// (x[, global_rows]) -> (out, keep)
void dropout(OpCheck& c) {
  c.operands(1, 2);
  c.floating(0, "x");
  probability(c);
  if (c.has(1)) {
    c.dtype(1, DType::kI64, "global row ids");
    if (c.shape(1) != Shape{c.rows(0)}) {
      c.fail(fmt::format("x {} has another row count than its global ids {}", shape_string(c.shape(0)),
                         shape_string(c.shape(1))));
    }
  }
  c.out_float(c.shape(0));
  c.out(DType::kBool, c.shape(0), ".keep");
}

template <typename T>
double run_dropout(const Kernel<T>& run) {
  ops::dropout_forward<T>(run.dropout_key(), run.attrs.dropout_p(), run.out_cols(), run.in_i64(1), run.in(0), run.out(),
                          run.out_u8(1));
  return 0;
}

void dropout_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.dropout_grad(d.g, d.op.outputs[1], d.a.dropout_p()));
}

void dropout_grad(OpCheck& c) {
  c.operands(2, 2);
  c.floating(0, "g");
  c.dtype(1, DType::kBool, "keep");
  c.same_shape(0, 1, "g", "keep");
  probability(c);
  c.out_float(c.shape(0));
}

template <typename T>
double run_dropout_grad(const Kernel<T>& run) {
  ops::dropout_backward<T>(run.attrs.dropout_p(), run.in_u8(1), run.in(0), run.out());
  return 0;
}

// (global_rows [N]) -> [N, width]
void normal(OpCheck& c) {
  c.operands(1, 1);
  c.dtype(0, DType::kI64, "global row ids");
  c.rank(0, 1, "global row ids");
  if (c.attrs().width() < 0) c.fail(fmt::format("width {} is negative", c.attrs().width()));
  c.out_float({c.rows(0), c.attrs().width()});
}

template <typename T>
double run_normal(const Kernel<T>& run) {
  ops::normal_forward<T>(run.dropout_key(), run.attrs.width(), run.in_i64(0), run.out());
  return 0;
}

// (values[, global_rows])
void sparse_dropout(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = stored_values(c, 0);
  probability(c);
  if (c.has(1)) {
    c.dtype(1, DType::kI64, "global row ids");
    if (c.shape(1) != Shape{g.num_dst}) {
      c.fail(fmt::format("'{}' has {} rows, its global ids {}", g.name, g.num_dst, shape_string(c.shape(1))));
    }
  }
  c.out_float(c.shape(0));
}

template <typename T>
double run_sparse_dropout(const Kernel<T>& run) {
  ops::sparse_dropout_forward<T, int32_t>(run.dropout_key(), run.attrs.dropout_p(), run.graph().by_dst, run.in_i64(1),
                                          run.in(0), run.out());
  return 0;
}

}  // namespace

void define_random(OpTable& t) {
  t.add({OpKind::kDropout, 0, dropout, nullptr, GNNRT_KERNEL(run_dropout), dropout_gradient});
  t.add({OpKind::kDropoutGrad, 0, dropout_grad, nullptr, GNNRT_KERNEL(run_dropout_grad), nullptr});
  t.add({OpKind::kNormal, kNoGradient, normal, nullptr, GNNRT_KERNEL(run_normal), nullptr});
  // Of input features: nothing upstream is trained.
  t.add({OpKind::kSparseDropout, kNoGradient, sparse_dropout, nullptr, GNNRT_KERNEL(run_sparse_dropout), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

ValueId Builder::dropout(ValueId x, double p, uint64_t key, int32_t edges_of_graph, ValueId global_rows) {
  constexpr OpKind k = OpKind::kDropout;
  if (p == 0) return x;
  OpAttrs a;
  a.set_dropout_p(p);
  a.set_random_stream(key);
  std::vector<ValueId> inputs{x};
  if (global_rows != kNoValue) {
    inputs.push_back(global_rows);
  } else if (partitioned()) {
    inputs.push_back(edges_of_graph >= 0 ? graph_input(edges_of_graph, true)
                                         : node_input(kNodeGlobalId, DType::kI64));
  } else if (replicated()) {
    // Local rows differ from one rank count to another; the mask must not.
    fail(k, "a data-parallel program's dropout needs its rows' global ids");
  }
  // The second result, "<out>.keep" (a byte per element), is the mask for the backward.
  return emit(k, std::move(inputs), a);
}

ValueId Builder::normal(ValueId global_rows, int64_t width, uint64_t key) {
  OpAttrs a;
  a.set_width(width);
  a.set_random_stream(key);
  return emit(OpKind::kNormal, {global_rows}, a);
}

ValueId Builder::sparse_dropout(int32_t matrix, ValueId values, double p, uint64_t key) {
  constexpr OpKind k = OpKind::kSparseDropout;
  OpAttrs a = graph_attrs(k, matrix);
  if (p == 0) return values;
  a.set_dropout_p(p);
  a.set_random_stream(key);
  std::vector<ValueId> inputs{values};
  if (partitioned()) inputs.push_back(node_input(kNodeGlobalId, DType::kI64));
  return emit(k, std::move(inputs), a);
}

ValueId Builder::dropout_grad(ValueId g, ValueId keep, double p) {
  OpAttrs a;
  a.set_dropout_p(p);
  return emit(OpKind::kDropoutGrad, {g, keep}, a);
}

}  // namespace gnnrt::runtime
