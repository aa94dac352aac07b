#include "runtime/passes.h"

#include "runtime/builder.h"
#include "runtime/op_defs.h"

#include <fmt/format.h>

#include <algorithm>
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
  p.values.push_back(ValueInfo{std::move(name), p.float_type, std::move(shape), Role::kTemp});
  return static_cast<ValueId>(p.values.size() - 1);
}

// An spmm whose result is linear in x with per-edge scalar weights.
bool is_linear_aggregation(const Op& op) {
  return op.kind == OpKind::kSpmm &&
         (reduce_of(op.attrs) == ops::Reduce::kSum || reduce_of(op.attrs) == ops::Reduce::kMean) &&
         op.attrs.heads() == 1 && op.outputs.size() == 1;
}

// A matmul by a weight: X [N, Fin] times W (any layout), not transposing X.
bool is_weight_matmul(const Op& op) { return op.kind == OpKind::kMatMul && !op.attrs.trans_a(); }

}  // namespace

void verify(const Program& p) {
  const auto fail = [&](size_t i, const std::string& what) {
    throw CompileError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), what));
  };
  std::vector<bool> defined(p.values.size(), false);
  for (size_t v = 0; v < p.values.size(); ++v) {
    defined[v] = is_bound(p.values[v].role);
    for (int64_t d : p.values[v].shape) {
      if (d < 0) {
        throw CompileError(fmt::format("program '{}': value '{}' has a negative size in {}", p.name,
                                       p.values[v].name, shape_string(p.values[v].shape)));
      }
    }
  }
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
    if (op.attrs.has_graph() &&
        (op.attrs.graph() < 0 || static_cast<size_t>(op.attrs.graph()) >= p.graphs.size())) {
      fail(i, fmt::format("graph #{} does not exist", op.attrs.graph()));
    }
    // Its results as its shape rule gives them from its operands.
    try {
      check_op(p, i);
    } catch (const ShapeError& e) {
      throw CompileError(e.what());
    }
  }
  for (ValueId v : p.outputs) {
    if (v < 0 || static_cast<size_t>(v) >= p.values.size() || !defined[static_cast<size_t>(v)]) {
      throw CompileError(fmt::format("program '{}': output %{} is never defined", p.name, v));
    }
  }
}

namespace {

// Removes the ops marked in `gone` (indexed like p.ops), keeping the order.
void erase_ops(Program& p, const std::vector<bool>& gone) {
  size_t kept = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (gone[i]) continue;
    if (kept != i) p.ops[kept] = std::move(p.ops[i]);
    ++kept;
  }
  p.ops.resize(kept);
}

}  // namespace

int fuse_aggregations(Program& p) {
  const UseDef ud(p);
  int fused = 0;
  std::vector<bool> replaced(p.ops.size(), false);
  for (Op& op : p.ops) {
    if (op.kind != OpKind::kScatter) continue;
    ValueId messages = op.inputs[0];
    ValueId weight = kNoValue;
    int64_t heads = 1;
    const auto scale = ud.single_use_producer(p, messages, OpKind::kEdgeScale);
    if (scale) {
      const Op& s = p.ops[*scale];
      messages = s.inputs[0];
      weight = s.inputs[1];
      heads = s.attrs.heads();
    }
    const auto gather = ud.single_use_producer(p, messages, OpKind::kGather);
    if (!gather || p.ops[*gather].attrs.graph() != op.attrs.graph()) continue;
    // The spmm takes the scatter's place and outputs; the gather and the
    // edge_scale, whose one reader it was, go.
    op.kind = OpKind::kSpmm;
    op.inputs = {p.ops[*gather].inputs[0]};
    if (weight != kNoValue) op.inputs.push_back(weight);
    op.attrs.set_heads(heads);
    replaced[*gather] = true;
    if (scale) replaced[*scale] = true;
    ++fused;
  }
  // Only those: the rest of the program may hold values nothing reads yet,
  // such as a train step's loss before the backward is appended
  // (eliminate_dead_values took it, and with it every gradient).
  erase_ops(p, replaced);
  return fused;
}

int fuse_attention(Program& p) {
  const UseDef ud(p);
  int fused = 0;
  std::vector<bool> replaced(p.ops.size(), false);
  for (Op& op : p.ops) {
    if (op.kind != OpKind::kSegmentSoftmax) continue;
    const auto leaky = ud.single_use_producer(p, op.inputs[0], OpKind::kLeakyRelu);
    if (!leaky) continue;
    const auto add = ud.single_use_producer(p, p.ops[*leaky].inputs[0], OpKind::kSddmmAdd);
    if (!add || p.ops[*add].attrs.graph() != op.attrs.graph()) continue;
    // The fused op takes the softmax's place and output; sddmm_add's
    // operands are defined before it.
    op.kind = OpKind::kAttentionSoftmax;
    op.inputs = p.ops[*add].inputs;
    op.attrs.set_negative_slope(p.ops[*leaky].attrs.negative_slope());
    replaced[*leaky] = replaced[*add] = true;
    ++fused;
  }
  erase_ops(p, replaced);
  return fused;
}

int fuse_cross_entropy(Program& p) {
  const UseDef ud(p);
  int fused = 0;
  std::vector<bool> replaced(p.ops.size(), false);
  for (Op& op : p.ops) {
    if (op.kind != OpKind::kNllLoss) continue;
    const auto log_softmax = ud.single_use_producer(p, op.inputs[0], OpKind::kLogSoftmax);
    if (!log_softmax) continue;
    op.kind = OpKind::kCrossEntropy;
    op.inputs[0] = p.ops[*log_softmax].inputs[0];
    replaced[*log_softmax] = true;
    ++fused;
  }
  erase_ops(p, replaced);
  return fused;
}

int fuse_gradient_sums(Program& p) {
  const UseDef ud(p);
  std::vector<bool> folded(p.ops.size(), false);
  int fused = 0;
  for (Op& op : p.ops) {
    if (op.kind != OpKind::kAdd) continue;
    for (size_t side = 0; side < 2; ++side) {
      const auto dot = ud.single_use_producer(p, op.inputs[side], OpKind::kHeadDotGradX);
      if (!dot || p.ops[*dot].inputs.size() != 2) continue;
      // Addition is commutative in floating point: P + Q has the bits of Q + P.
      const ValueId plus = op.inputs[1 - side];
      const Op& d = p.ops[*dot];
      op.kind = OpKind::kHeadDotGradX;
      op.inputs = {d.inputs[0], d.inputs[1], plus};
      op.attrs = d.attrs;
      folded[*dot] = true;
      ++fused;
      break;
    }
  }
  // Only the folded dots go: the gradients are not read yet (the optimizer
  // comes next), so eliminate_dead_values would take the whole backward.
  erase_ops(p, folded);
  return fused;
}

namespace {

// Two unpaired sparse products of the same kind that one walk can run:
// the same sparse matrix, values, transpose and shapes.
bool can_pair(const Program& p, const Op& a, const Op& b) {
  const auto shape = [&](ValueId v) -> const std::vector<int64_t>& { return p.value(v).shape; };
  return a.kind == b.kind && a.inputs.size() == 2 && b.inputs.size() == 2 &&
         a.outputs.size() == 2 && b.outputs.size() == 2 && a.attrs.graph() == b.attrs.graph() &&
         a.attrs.trans_b() == b.attrs.trans_b() && a.inputs[0] == b.inputs[0] &&
         a.inputs[1] != b.inputs[1] && shape(a.inputs[1]) == shape(b.inputs[1]) &&
         shape(a.outputs[0]) == shape(b.outputs[0]) && shape(a.outputs[1]) == shape(b.outputs[1]);
}

}  // namespace

namespace {

// Where two products that can_pair may run as one op, or nothing: at i when
// j's dense operand is defined before i (moving j up), else at j when no op
// after i up to j itself reads i's results (moving i down). Never across an
// op that writes state (an optimizer update may rewrite the operand).
std::optional<size_t> pair_site(const Program& p, const UseDef& ud, size_t i, size_t j) {
  for (size_t k = i + 1; k < j; ++k) {
    if (has_side_effects(p.ops[k].kind)) return std::nullopt;
  }
  if (ud.def[static_cast<size_t>(p.ops[j].inputs[1])] < static_cast<int64_t>(i)) return i;
  const auto& made = p.ops[i].outputs;
  for (size_t k = i + 1; k <= j; ++k) {
    for (ValueId v : p.ops[k].inputs) {
      if (std::find(made.begin(), made.end(), v) != made.end()) return std::nullopt;
    }
  }
  return j;
}

// Joins the first pair found; false when there is none.
bool pair_one(Program& p) {
  const UseDef ud(p);
  const auto sparse_product = [](const Op& op) {
    return op.kind == OpKind::kSparseMatMul || op.kind == OpKind::kSparseMatMulGradB;
  };
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (!sparse_product(p.ops[i])) continue;
    for (size_t j = i + 1; j < p.ops.size(); ++j) {
      if (!can_pair(p, p.ops[i], p.ops[j])) continue;
      const std::optional<size_t> site = pair_site(p, ud, i, j);
      if (!site) continue;
      Op merged = p.ops[i];
      merged.inputs.push_back(p.ops[j].inputs[1]);
      merged.outputs.insert(merged.outputs.end(), p.ops[j].outputs.begin(), p.ops[j].outputs.end());
      p.ops[*site] = std::move(merged);
      p.ops.erase(p.ops.begin() + static_cast<std::ptrdiff_t>(*site == i ? j : i));
      return true;
    }
  }
  return false;
}

}  // namespace

int pair_sparse_products(Program& p) {
  // One pair at a time, each found with fresh definitions (a pair moves one
  // product's results to another op).
  int paired = 0;
  while (pair_one(p)) ++paired;
  return paired;
}

namespace {

// Ops that act on each row of a vertex matrix linearly and keep its width:
// what may follow an spmm in a linear aggregation (the halo sum of a
// partitioned program, the division of a mean by global degrees).
bool is_row_linear(const Op& op) {
  return op.kind == OpKind::kHaloSum || op.kind == OpKind::kDivideRows;
}

// The ops of a linear aggregation, in program order: an spmm (sum or mean,
// scalar weights) and the row-linear ops that alone consume it, one after
// the other. Every intermediate value has exactly one use.
using Chain = std::vector<size_t>;

// The chain that ends by defining `v`, or empty.
Chain chain_ending_at(const Program& p, const UseDef& ud, ValueId v) {
  Chain chain;
  for (;;) {
    const int64_t d = ud.def[static_cast<size_t>(v)];
    if (d < 0 || ud.uses[static_cast<size_t>(v)] != 1) return {};
    const Op& op = p.ops[static_cast<size_t>(d)];
    if (op.outputs.size() != 1 || op.outputs[0] != v) return {};
    chain.insert(chain.begin(), static_cast<size_t>(d));
    if (is_linear_aggregation(op)) return chain;
    if (!is_row_linear(op)) return {};
    v = op.inputs[0];
  }
}

// The chain that starts at the spmm `first`: it and the row-linear ops that
// alone consume its result, in order.
Chain chain_starting_at(const Program& p, const UseDef& ud, size_t first) {
  Chain chain{first};
  for (;;) {
    const ValueId v = p.ops[chain.back()].outputs[0];
    if (ud.uses[static_cast<size_t>(v)] != 1) return chain;
    size_t next = p.ops.size();
    for (size_t j = chain.back() + 1; j < p.ops.size(); ++j) {
      const auto& in = p.ops[j].inputs;
      if (std::find(in.begin(), in.end(), v) != in.end()) {
        next = j;
        break;
      }
    }
    if (next == p.ops.size() || !is_row_linear(p.ops[next]) || p.ops[next].inputs[0] != v) {
      return chain;
    }
    chain.push_back(next);
  }
}

// The chain's ops applied to `x` instead, `width` columns wide: new temps,
// the last one `out`.
std::vector<Op> rewire(Program& p, const Chain& chain, ValueId x, int64_t width, ValueId out) {
  std::vector<Op> ops;
  ValueId in = x;
  for (size_t k = 0; k < chain.size(); ++k) {
    Op op = p.ops[chain[k]];
    op.inputs[0] = in;
    if (k + 1 == chain.size()) {
      op.outputs = {out};
    } else {
      const ValueInfo& old = p.value(op.outputs[0]);
      op.outputs = {add_temp(p, old.name, {old.shape[0], width})};
    }
    in = op.outputs[0];
    ops.push_back(std::move(op));
  }
  return ops;
}

}  // namespace

int reorder_aggregate_matmul(Program& p) {
  const UseDef ud(p);
  std::vector<bool> removed(p.ops.size(), false);
  std::vector<std::vector<Op>> replacement(p.ops.size());
  const auto touched = [&](const Chain& chain) {
    for (size_t i : chain) {
      if (removed[i] || !replacement[i].empty()) return true;
    }
    return false;
  };
  int reordered = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& later = p.ops[i];
    // Case 1: matmul(aggregate(X), W) with W narrowing.
    if (is_weight_matmul(later)) {
      const Chain chain = chain_ending_at(p, ud, later.inputs[0]);
      // An op already rewritten (or removed) is not rewritten again.
      if (chain.empty() || touched(chain)) continue;
      const ValueId x = p.ops[chain.front()].inputs[0];
      const ValueId out = later.outputs[0];
      const int64_t f_in = p.value(x).shape[1], f_out = p.value(out).shape[1];
      if (f_out >= f_in) continue;
      const ValueId t = add_temp(p, later.scope + "/matmul", {p.value(x).shape[0], f_out});
      Op mm = p.ops[i];
      mm.inputs[0] = x;
      mm.outputs = {t};
      replacement[i].push_back(std::move(mm));
      for (Op& op : rewire(p, chain, t, f_out, out)) replacement[i].push_back(std::move(op));
      for (size_t c : chain) removed[c] = true;
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
      const Chain chain = chain_starting_at(p, ud, i);
      if (touched(chain)) continue;
      const ValueId x = p.ops[*mm_index].inputs[0];
      const ValueId out = p.ops[chain.back()].outputs[0];
      const int64_t f_in = p.value(x).shape[1], f_out = p.value(out).shape[1];
      if (f_out <= f_in) continue;
      const ValueId t = add_temp(p, p.ops[chain.back()].scope + "/aggregate", {p.value(out).shape[0], f_in});
      Op mm = p.ops[*mm_index];
      mm.inputs[0] = t;
      mm.outputs = {out};
      std::vector<Op> ops = rewire(p, chain, x, f_in, t);
      ops.push_back(std::move(mm));
      removed[*mm_index] = true;
      for (size_t c : chain) removed[c] = true;
      removed[chain.back()] = false;
      replacement[chain.back()] = std::move(ops);
      ++reordered;
    }
  }
  if (reordered == 0) return 0;
  std::vector<Op> ops;
  ops.reserve(p.ops.size());
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (!replacement[i].empty()) {
      for (Op& op : replacement[i]) ops.push_back(std::move(op));
    } else if (!removed[i]) {
      ops.push_back(std::move(p.ops[i]));
    }
  }
  p.ops = std::move(ops);
  return reordered;
}

std::vector<ValueId> bucket_gradients(Program& p, std::span<const ValueId> grads,
                                      int64_t bucket_bytes, int* buckets) {
  const UseDef ud(p);
  // The gradients by the op that finishes them, in program order.
  std::vector<std::pair<int64_t, size_t>> ready;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i] != kNoValue) ready.emplace_back(ud.def[static_cast<size_t>(grads[i])], i);
  }
  std::stable_sort(ready.begin(), ready.end());
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = bucket_bytes;
  for (const auto& [def, i] : ready) {
    if (bytes >= bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(i);
    bytes += p.value(grads[i]).bytes();
  }
  Builder b(std::move(p));
  Builder::Scope scope(b, "gradients");
  // Each start goes right after the op that defines its bucket's last
  // gradient (a gradient defined by no op, a bound value, starts first).
  std::vector<std::vector<Op>> after(b.program().ops.size() + 1);
  std::vector<ValueId> bucket_values;
  for (size_t k = 0; k < groups.size(); ++k) {
    std::vector<ValueId> members;
    int64_t last = -1;
    for (size_t i : groups[k]) {
      members.push_back(grads[i]);
      last = std::max(last, ud.def[static_cast<size_t>(grads[i])]);
    }
    bucket_values.push_back(b.bucket_start(members, k));
    after[static_cast<size_t>(last + 1)].push_back(std::move(b.program().ops.back()));
    b.program().ops.pop_back();
  }
  Program& q = b.program();
  std::vector<Op> ops;
  ops.reserve(q.ops.size() + groups.size());
  for (size_t i = 0; i <= q.ops.size(); ++i) {
    for (Op& op : after[i]) ops.push_back(std::move(op));
    if (i < q.ops.size()) ops.push_back(std::move(q.ops[i]));
  }
  q.ops = std::move(ops);
  std::vector<ValueId> reduced(grads.begin(), grads.end());
  for (size_t k = 0; k < groups.size(); ++k) {
    std::vector<ValueId> members;
    for (size_t i : groups[k]) members.push_back(grads[i]);
    const std::vector<ValueId> outs = b.bucket_wait(bucket_values[k], members, k);
    for (size_t j = 0; j < groups[k].size(); ++j) reduced[groups[k][j]] = outs[j];
  }
  *buckets = static_cast<int>(groups.size());
  p = b.take();
  return reduced;
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

namespace {

// The gather defining v when it selects more rows than it reads (a matmul of
// its result costs more than one of its input), else null.
const Op* widening_gather(const Program& p, const UseDef& ud, ValueId v) {
  const int64_t d = ud.def[static_cast<size_t>(v)];
  if (d < 0) return nullptr;
  const Op& op = p.ops[static_cast<size_t>(d)];
  if (op.kind != OpKind::kGather) return nullptr;
  return p.value(op.inputs[0]).shape[0] < p.value(v).shape[0] ? &op : nullptr;
}

// matmul(x, w) as `like` multiplies (its transposes and scope), writing `out`
// or a new temp of rows(x) rows; x's rows gathered first when x is a
// widening gather's result.
ValueId project(Program& p, const UseDef& ud, const Op& like, ValueId x, ValueId w, ValueId out,
                std::vector<Op>& ops) {
  const int64_t cols = p.value(like.outputs[0]).shape[1];
  Op mm = like;
  mm.inputs = {x, w};
  if (const Op* gather = widening_gather(p, ud, x)) {
    mm.inputs[0] = gather->inputs[0];
    mm.outputs = {add_temp(p, like.scope + "/projected", {p.value(gather->inputs[0]).shape[0], cols})};
    Op g = *gather;
    g.inputs = {mm.outputs[0]};
    g.outputs = {out != kNoValue ? out : add_temp(p, like.scope + "/gathered", {p.value(x).shape[0], cols})};
    g.scope = like.scope;
    ops.push_back(std::move(mm));
    ops.push_back(std::move(g));
    return ops.back().outputs[0];
  }
  mm.outputs = {out != kNoValue ? out : add_temp(p, like.scope + "/part", {p.value(x).shape[0], cols})};
  ops.push_back(std::move(mm));
  return ops.back().outputs[0];
}

}  // namespace

int project_before_gather(Program& p) {
  const UseDef ud(p);
  std::vector<Op> ops;
  ops.reserve(p.ops.size());
  int rewritten = 0;
  // Ops are copied, not moved: the rewrites read earlier ops (gathers,
  // concatenations) in p.ops.
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op op = p.ops[i];
    if (op.kind != OpKind::kMatMul || op.attrs.trans_a()) {
      ops.push_back(op);
      continue;
    }
    const ValueId x = op.inputs[0], w = op.inputs[1], out = op.outputs[0];
    const int64_t d = ud.def[static_cast<size_t>(x)];
    const Op* concat = d >= 0 && p.ops[static_cast<size_t>(d)].kind == OpKind::kConcat ? &p.ops[static_cast<size_t>(d)]
                                                                                      : nullptr;
    bool any = false;
    // Two parts or more (a one-input concatenation is a copy).
    if (concat != nullptr && concat->inputs.size() > 1 && op.attrs.trans_b()) {
      for (ValueId part : concat->inputs) any = any || widening_gather(p, ud, part) != nullptr;
    }
    if (any) {
      // x Wᵀ = Σ_k part_k W[:, columns of part k]ᵀ (W is [out, in]).
      ValueId sum = kNoValue;
      int64_t begin = 0;
      for (size_t k = 0; k < concat->inputs.size(); ++k) {
        const ValueId part = concat->inputs[k];
        const int64_t width = p.value(part).shape[1];
        Op slice{OpKind::kSliceCols, {w}, {}, {}, op.scope};
        slice.attrs.set_begin(begin);
        slice.attrs.set_width(width);
        slice.outputs = {add_temp(p, op.scope + "/weight_part", {p.value(w).shape[0], width})};
        begin += width;
        const ValueId w_part = slice.outputs[0];
        ops.push_back(std::move(slice));
        const bool last = k + 1 == concat->inputs.size();
        const ValueId term = project(p, ud, op, part, w_part, kNoValue, ops);
        if (sum == kNoValue) {
          sum = term;
          continue;
        }
        Op add{OpKind::kAdd, {sum, term}, {}, {}, op.scope};
        add.outputs = {last ? out : add_temp(p, op.scope + "/sum", p.value(out).shape)};
        sum = add.outputs[0];
        ops.push_back(std::move(add));
      }
      ++rewritten;
      continue;
    }
    if (widening_gather(p, ud, x) != nullptr) {
      project(p, ud, op, x, w, out, ops);
      ++rewritten;
      continue;
    }
    ops.push_back(op);
  }
  p.ops = std::move(ops);
  return rewritten;
}

}  // namespace gnnrt::runtime
