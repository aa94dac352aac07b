// Collectives: the all-reduce, the halo exchange of partitioned programs, gradient buckets: each op's shape rule, cost,
// kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "ops/reduce.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/halo.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void allreduce(OpCheck& c) {
  c.operands(1, 1);
  if (!is_floating(c.in(0).dtype)) {
    c.fail(fmt::format("x must be float32 or float64, not {}", to_string(c.in(0).dtype)));
  }
  c.out(c.in(0).dtype, c.shape(0));
}

template <typename T>
double run_all_reduce(const Kernel<T>& run) {
  const ValueInfo& out = run.program.value(run.op.outputs[0]);
  return run.core.all_reduce_op(out.dtype, run.bytes(run.op.inputs[0]), run.bytes(run.op.outputs[0]),
                                static_cast<std::size_t>(out.elements()));
}

void all_reduce_gradient(Gradient& d) {
  // d(sum_r L_r)/dx_r = sum_r' dL_r'/dy: the all-reduced gradient.
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.allreduce(d.g));
}

void halo_sum(OpCheck& c) {
  c.operands(1, 1);
  halo_rows(c);
  c.out_float(c.shape(0));
}

// The exchange behind a partitioned program's halo ops.
template <typename T>
Halo& halo_of(const Kernel<T>& run) {
  if (!run.core.options().halo) {
    throw RunError(fmt::format("program '{}': {}: the core has no halo (CoreOptions::halo)", run.program.name,
                               to_string(run.op.kind)));
  }
  return *run.core.options().halo;
}

template <typename T>
double run_halo_sum(const Kernel<T>& run) {
  Halo& halo = halo_of(run);
  auto o = run.out();
  std::copy(run.in(0).begin(), run.in(0).end(), o.begin());
  const double before = halo.bytes_sent();
  halo.sum<T>(o, run.out_cols());
  return halo.bytes_sent() - before;
}

void halo_sum_gradient(Gradient& d) {
  // The same for the replicas of each vertex.
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.halo_sum(d.g));
}

// (x[, arg, edge_id]) -> (y[, arg])
void halo_max(OpCheck& c) {
  c.operands(1, 3);
  halo_rows(c);
  const ops::Reduce reduce = reduction(c);
  if (!ops::has_arg(reduce)) c.fail(fmt::format("reduce {} is not max or min", ops::to_string(reduce)));
  c.out_float(c.shape(0));
  if (c.count() == 1) return;
  c.operands(3, 3);
  c.dtype(1, DType::kI32, "arg");
  c.same_shape(0, 1, "x", "arg");
  vector_of(c, 2, DType::kI64, c.graph().num_edges, "edge ids");
  c.out(DType::kI32, c.shape(0), ".arg");
}

template <typename T>
double run_halo_max(const Kernel<T>& run) {
  Halo& halo = halo_of(run);
  auto o = run.out();
  std::copy(run.in(0).begin(), run.in(0).end(), o.begin());
  const bool max = reduce_of(run.attrs) == ops::Reduce::kMax;
  const double before = halo.bytes_sent();
  if (run.op.inputs.size() == 1) {
    if (!max) throw RunError("halo_max without arg is a max");
    halo.max<T>(o, run.out_cols());
    return halo.bytes_sent() - before;
  }
  // Keys: the global id of each element's local winning edge.
  const auto arg = run.in_i32(1);
  const auto edge_id = run.in_i64(2);
  const auto edges = static_cast<int32_t>(edge_id.size());
  std::vector<int64_t> keys(o.size());
  for (size_t k = 0; k < o.size(); ++k) {
    keys[k] = arg[k] < edges ? edge_id[static_cast<size_t>(arg[k])] : collectives::HaloExchange::kNoKey;
  }
  std::vector<int64_t> mine = keys;
  halo.keyed<T>(o, keys, run.out_cols(), max);
  auto new_arg = run.out_i32(1);
  for (size_t k = 0; k < o.size(); ++k) {
    const bool won = mine[k] != collectives::HaloExchange::kNoKey && keys[k] == mine[k];
    new_arg[k] = won ? arg[k] : edges;
    if (keys[k] == collectives::HaloExchange::kNoKey) o[k] = T(0);  // empty everywhere
  }
  return halo.bytes_sent() - before;
}

void halo_max_gradient(Gradient& d) {
  if (d.op.inputs.size() == 1) return;  // a shift
  // The whole gradient of the element goes to the global winner: the
  // replicas' shares are summed, then kept on the winning rank only.
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.keep_winners(d.a.graph(), d.b.halo_sum(d.g), d.op.outputs[1]));
}

// (g...) -> [Σ elements], its all-reduce started
void bucket_start(OpCheck& c) {
  if (c.count() == 0) c.fail("no gradients");
  int64_t elements = 0;
  for (std::size_t i = 0; i < c.count(); ++i) {
    c.floating(i, "gradient");
    elements += c.in(i).elements();
  }
  c.out_float({elements});
}

template <typename T>
double run_bucket_start(const Kernel<T>& run) {
  auto bucket = run.out();
  size_t at = 0;
  for (size_t k = 0; k < run.op.inputs.size(); ++k) {
    const auto g = run.in(k);
    std::copy(g.begin(), g.end(), bucket.begin() + static_cast<std::ptrdiff_t>(at));
    at += g.size();
  }
  run.core.start_bucket(run.attrs.bucket(), bucket.data(), bucket.size(), sizeof(T) == 8);
  return static_cast<double>(bucket.size_bytes());
}

// (bucket) -> (g...) shaped as given, their sizes adding up to the bucket's
void bucket_wait(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "bucket");
  c.rank(0, 1, "bucket");
  int64_t elements = 0;
  for (std::size_t k = 0; k < c.op().outputs.size(); ++k) {
    const Shape& s = c.given(k);
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    elements += n;
    c.out_float(s);
  }
  if (elements != c.shape(0)[0]) {
    c.fail(fmt::format("the gradients hold {} elements, the bucket {}", elements, c.shape(0)[0]));
  }
}

template <typename T>
double run_bucket_wait(const Kernel<T>& run) {
  run.core.wait_bucket(run.attrs.bucket());
  const auto bucket = run.in(0);
  size_t at = 0;
  for (size_t k = 0; k < run.op.outputs.size(); ++k) {
    auto g = run.out(k);
    std::copy_n(bucket.begin() + static_cast<std::ptrdiff_t>(at), g.size(), g.begin());
    at += g.size();
  }
  return 0;
}

}  // namespace

void define_collective(OpTable& t) {
  t.add({OpKind::kAllReduce, kCollective, allreduce, nullptr, GNNRT_KERNEL(run_all_reduce), all_reduce_gradient});
  t.add({OpKind::kHaloSum, kCollective, halo_sum, nullptr, GNNRT_KERNEL(run_halo_sum), halo_sum_gradient});
  t.add({OpKind::kHaloMax, kCollective, halo_max, nullptr, GNNRT_KERNEL(run_halo_max), halo_max_gradient});
  t.add({OpKind::kBucketStart, kCollective, bucket_start, nullptr, GNNRT_KERNEL(run_bucket_start), nullptr});
  t.add({OpKind::kBucketWait, 0, bucket_wait, nullptr, GNNRT_KERNEL(run_bucket_wait), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {
namespace {
using Shape = std::vector<int64_t>;
using ops::Reduce;
}  // namespace

ValueId Builder::allreduce(ValueId x) { return emit(OpKind::kAllReduce, {x}); }

ValueId Builder::halo_sum(ValueId x) { return emit(OpKind::kHaloSum, {x}); }

std::pair<ValueId, ValueId> Builder::halo_max(Reduce reduce, ValueId x, ValueId arg,
                                              int32_t graph) {
  constexpr OpKind k = OpKind::kHaloMax;
  OpAttrs a;
  a.set_reduce(to_proto(reduce));
  std::vector<ValueId> inputs{x};
  if (arg != kNoValue) {
    a = graph_attrs(k, graph);
    a.set_reduce(to_proto(reduce));
    inputs.push_back(arg);
    inputs.push_back(graph_input(graph, true));
  }
  const std::vector<ValueId> out = emit_op(k, std::move(inputs), a);
  return {out[0], out.size() > 1 ? out[1] : kNoValue};
}

ValueId Builder::bucket_start(const std::vector<ValueId>& grads, uint64_t bucket) {
  OpAttrs a;
  a.set_bucket(bucket);
  return emit(OpKind::kBucketStart, grads, a);
}

std::vector<ValueId> Builder::bucket_wait(ValueId bucket_value, const std::vector<ValueId>& grads,
                                          uint64_t bucket) {
  OpAttrs a;
  a.set_bucket(bucket);
  std::vector<std::pair<std::string, Shape>> given;
  for (ValueId g : grads) given.emplace_back(program_.value(g).name + ".allreduced", shape(g));
  return emit_op(OpKind::kBucketWait, {bucket_value}, a, given);
}

}  // namespace gnnrt::runtime
