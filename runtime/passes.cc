#include "runtime/passes.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

namespace gnnrt::runtime {
namespace {

bool is_bound(Role role) { return role != Role::kTemp; }

// Who defines each value and how many ops read it.
struct UseDef {
  std::vector<int64_t> def;   // op index, -1 for bound or undefined values
  std::vector<int32_t> uses;  // op inputs plus program outputs

  explicit UseDef(const Program& p) : def(p.values.size(), -1), uses(p.values.size(), 0) {
    for (size_t i = 0; i < p.ops.size(); ++i) {
      for (ValueId v : p.ops[i].outputs) def[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      for (ValueId v : p.ops[i].inputs) {
        if (v != kNoValue) ++uses[static_cast<size_t>(v)];
      }
    }
    for (ValueId v : p.outputs) ++uses[static_cast<size_t>(v)];
  }
  // The op defining v if it is of `kind` and v has exactly one use.
  std::optional<size_t> single_use_producer(const Program& p, ValueId v, OpKind kind) const {
    const int64_t d = def[static_cast<size_t>(v)];
    if (d < 0 || uses[static_cast<size_t>(v)] != 1) return std::nullopt;
    if (p.ops[static_cast<size_t>(d)].kind != kind) return std::nullopt;
    return static_cast<size_t>(d);
  }
};

ValueId add_temp(Program& p, std::string name, std::vector<int64_t> shape) {
  p.values.push_back(ValueInfo{std::move(name), DType::kF32, std::move(shape), Role::kTemp});
  return static_cast<ValueId>(p.values.size() - 1);
}

// An spmm whose result is linear in x with per-edge scalar weights.
bool is_linear_aggregation(const Op& op) {
  return op.kind == OpKind::kSpmm &&
         (op.attrs.reduce == ops::Reduce::kSum || op.attrs.reduce == ops::Reduce::kMean) &&
         op.attrs.heads == 1 && op.outputs.size() == 1;
}

// A matmul by a weight: X [N, Fin] times W (any layout), not transposing X.
bool is_weight_matmul(const Op& op) { return op.kind == OpKind::kMatMul && !op.attrs.trans_a; }

}  // namespace

void verify(const Program& p) {
  const auto fail = [&](size_t i, const std::string& what) {
    throw CompileError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), what));
  };
  std::vector<bool> defined(p.values.size(), false);
  for (size_t v = 0; v < p.values.size(); ++v) defined[v] = is_bound(p.values[v].role);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (ValueId v : op.inputs) {
      if (v == kNoValue) continue;
      if (v < 0 || static_cast<size_t>(v) >= p.values.size()) {
        fail(i, fmt::format("input %{} does not exist", v));
      }
      if (!defined[static_cast<size_t>(v)]) {
        fail(i, fmt::format("input '{}' is used before it is defined", p.value(v).name));
      }
    }
    for (ValueId v : op.outputs) {
      if (v < 0 || static_cast<size_t>(v) >= p.values.size()) {
        fail(i, fmt::format("output %{} does not exist", v));
      }
      if (is_bound(p.value(v).role)) {
        fail(i, fmt::format("writes {} '{}' as an output", to_string(p.value(v).role),
                            p.value(v).name));
      }
      if (defined[static_cast<size_t>(v)]) {
        fail(i, fmt::format("defines '{}' a second time", p.value(v).name));
      }
      defined[static_cast<size_t>(v)] = true;
    }
    if (op.attrs.graph >= 0 && static_cast<size_t>(op.attrs.graph) >= p.graphs.size()) {
      fail(i, fmt::format("graph #{} does not exist", op.attrs.graph));
    }
  }
  for (ValueId v : p.outputs) {
    if (v < 0 || static_cast<size_t>(v) >= p.values.size() || !defined[static_cast<size_t>(v)]) {
      throw CompileError(fmt::format("program '{}': output %{} is never defined", p.name, v));
    }
  }
}

int fuse_aggregations(Program& p) {
  const UseDef ud(p);
  int fused = 0;
  for (Op& op : p.ops) {
    if (op.kind != OpKind::kScatter) continue;
    ValueId messages = op.inputs[0];
    ValueId weight = kNoValue;
    int64_t heads = 1;
    if (auto scale = ud.single_use_producer(p, messages, OpKind::kEdgeScale)) {
      const Op& s = p.ops[*scale];
      messages = s.inputs[0];
      weight = s.inputs[1];
      heads = s.attrs.heads;
    }
    const auto gather = ud.single_use_producer(p, messages, OpKind::kGather);
    if (!gather || p.ops[*gather].attrs.graph != op.attrs.graph) continue;
    // The spmm takes the scatter's place and outputs; the gather and the
    // edge_scale are left without readers for eliminate_dead_values.
    op.kind = OpKind::kSpmm;
    op.inputs = {p.ops[*gather].inputs[0]};
    if (weight != kNoValue) op.inputs.push_back(weight);
    op.attrs.heads = heads;
    ++fused;
  }
  if (fused > 0) eliminate_dead_values(p);
  return fused;
}

int reorder_aggregate_matmul(Program& p) {
  const UseDef ud(p);
  std::vector<bool> removed(p.ops.size(), false);
  std::vector<std::vector<Op>> replacement(p.ops.size());
  int reordered = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& later = p.ops[i];
    // Case 1: matmul(aggregate(X), W) with W narrowing.
    if (is_weight_matmul(later)) {
      const auto agg = ud.single_use_producer(p, later.inputs[0], OpKind::kSpmm);
      // An op already rewritten (or removed) is not rewritten again.
      if (!agg || removed[*agg] || !replacement[*agg].empty() ||
          !is_linear_aggregation(p.ops[*agg])) {
        continue;
      }
      const Op& a = p.ops[*agg];
      const ValueId x = a.inputs[0];
      const ValueId out = later.outputs[0];
      const int64_t f_in = p.value(x).shape[1], f_out = p.value(out).shape[1];
      if (f_out >= f_in) continue;
      const ValueId t = add_temp(p, later.scope + "/matmul", {p.value(x).shape[0], f_out});
      Op mm = later;
      mm.inputs[0] = x;
      mm.outputs = {t};
      Op sp = a;
      sp.inputs[0] = t;
      sp.outputs = {out};
      removed[*agg] = true;
      replacement[i] = {std::move(mm), std::move(sp)};
      ++reordered;
      continue;
    }
    // Case 2: aggregate(matmul(X, W)) with W widening.
    if (is_linear_aggregation(later)) {
      const auto mm_index = ud.single_use_producer(p, later.inputs[0], OpKind::kMatMul);
      if (!mm_index || removed[*mm_index] || !replacement[*mm_index].empty() ||
          !is_weight_matmul(p.ops[*mm_index])) {
        continue;
      }
      const Op& m = p.ops[*mm_index];
      const ValueId x = m.inputs[0];
      const ValueId out = later.outputs[0];
      const int64_t f_in = p.value(x).shape[1], f_out = p.value(out).shape[1];
      if (f_out <= f_in) continue;
      const ValueId t = add_temp(p, later.scope + "/spmm", {p.value(out).shape[0], f_in});
      Op sp = later;
      sp.inputs[0] = x;
      sp.outputs = {t};
      Op mm = m;
      mm.inputs[0] = t;
      mm.outputs = {out};
      removed[*mm_index] = true;
      replacement[i] = {std::move(sp), std::move(mm)};
      ++reordered;
    }
  }
  if (reordered == 0) return 0;
  std::vector<Op> ops;
  ops.reserve(p.ops.size());
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (removed[i]) continue;
    if (replacement[i].empty()) {
      ops.push_back(std::move(p.ops[i]));
    } else {
      for (Op& op : replacement[i]) ops.push_back(std::move(op));
    }
  }
  p.ops = std::move(ops);
  return reordered;
}

int eliminate_dead_values(Program& p) {
  int removed_total = 0;
  for (;;) {
    const UseDef ud(p);
    std::vector<Op> kept;
    kept.reserve(p.ops.size());
    for (Op& op : p.ops) {
      bool live = has_side_effects(op.kind);
      for (ValueId v : op.outputs) live = live || ud.uses[static_cast<size_t>(v)] > 0;
      if (live) kept.push_back(std::move(op));
    }
    const int removed = static_cast<int>(p.ops.size() - kept.size());
    p.ops = std::move(kept);
    if (removed == 0) return removed_total;
    removed_total += removed;
  }
}

}  // namespace gnnrt::runtime
