#include "runtime/op_defs.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runtime/builder.h"

namespace gnnrt::runtime {

using Shape = std::vector<int64_t>;

// ---- OpCheck ----

OpCheck::OpCheck(const Program& p, const Op& op, std::string where)
    : p_(p), op_(op), where_(std::move(where)) {}

void OpCheck::fail(const std::string& what) const {
  throw ShapeError(fmt::format("program '{}': {}: {}", p_.name, where_, what));
}

const ValueInfo& OpCheck::in(std::size_t i) const {
  if (!has(i)) fail(fmt::format("operand {} is missing", i));
  const ValueId v = op_.inputs[i];
  if (v < 0 || static_cast<std::size_t>(v) >= p_.values.size()) {
    fail(fmt::format("operand {} is %{}, which does not exist", i, v));
  }
  return p_.value(v);
}

int64_t OpCheck::rows(std::size_t i) const {
  if (shape(i).empty()) fail(fmt::format("operand {} is a scalar without rows", i));
  return shape(i)[0];
}

const GraphInfo& OpCheck::graph() const {
  if (!op_.attrs.has_graph()) fail("names no graph");
  const int32_t g = op_.attrs.graph();
  if (g < 0 || static_cast<std::size_t>(g) >= p_.graphs.size()) fail(fmt::format("no graph #{}", g));
  return p_.graphs[static_cast<std::size_t>(g)];
}

void OpCheck::operands(std::size_t min, std::size_t max) const {
  if (count() < min || count() > max) {
    fail(min == max ? fmt::format("takes {} operands, has {}", min, count())
                    : fmt::format("takes {} to {} operands, has {}", min, max, count()));
  }
}

void OpCheck::rank(std::size_t i, std::size_t r, const char* what) const {
  if (shape(i).size() != r) {
    fail(fmt::format("{} must have {} dimensions, has shape {}", what, r, shape_string(shape(i))));
  }
}

void OpCheck::dtype(std::size_t i, DType d, const char* what) const {
  if (in(i).dtype != d) {
    fail(fmt::format("{} must be {}, not {}", what, to_string(d), to_string(in(i).dtype)));
  }
}

void OpCheck::same_shape(std::size_t i, std::size_t j, const char* a, const char* b) const {
  if (shape(i) != shape(j)) {
    fail(fmt::format("{} {} and {} {} must have the same shape", a, shape_string(shape(i)), b,
                     shape_string(shape(j))));
  }
}

void OpCheck::shape_is(std::size_t i, const Shape& s, const char* what) const {
  if (shape(i) != s) {
    fail(fmt::format("{} {} must be {}", what, shape_string(shape(i)), shape_string(s)));
  }
}

void OpCheck::partitioned() const {
  if (!p_.partitioned) fail("only a partitioned program exchanges halo rows");
}

void OpCheck::out(DType d, Shape s, std::string suffix) {
  outputs_.push_back(OutputSpec{d, std::move(s), std::move(suffix)});
}

const Shape& OpCheck::given(std::size_t k) const {
  if (k >= op_.outputs.size()) fail(fmt::format("has no result {} to take its shape from", k));
  const ValueId v = op_.outputs[k];
  if (v < 0 || static_cast<std::size_t>(v) >= p_.values.size()) {
    fail(fmt::format("result {} is %{}, which does not exist", k, v));
  }
  return p_.value(v).shape;
}

void Gradient::sum_into(Builder& b, const std::vector<bool>& needs, std::unordered_map<ValueId, ValueId>& sums,
                        ValueId v, ValueId grad) {
  if (v == kNoValue || !needs[static_cast<std::size_t>(v)]) return;
  auto [it, fresh] = sums.try_emplace(v, grad);
  if (!fresh) it->second = b.add(it->second, grad);
}

// ---- the table ----

void OpTable::add(const OpDef& def) {
  const auto k = static_cast<std::size_t>(def.kind);
  if (defs_.size() <= k) {
    defs_.resize(k + 1);
    set_.resize(k + 1, false);
  }
  if (set_[k]) throw std::logic_error(fmt::format("op {} is defined twice", to_string(def.kind)));
  defs_[k] = def;
  set_[k] = true;
}

const OpDef& OpTable::at(OpKind kind) const { return defs_.at(static_cast<std::size_t>(kind)); }

void OpTable::check_complete() const {
#define GNNRT_OP_CHECK(kind, name)                                                                        \
  if (static_cast<std::size_t>(OpKind::kind) >= set_.size() || !set_[static_cast<std::size_t>(OpKind::kind)]) { \
    throw std::logic_error("op " name " has no definition in runtime/defs/");                            \
  }                                                                                                       \
  {                                                                                                       \
    const OpDef& d = at(OpKind::kind);                                                                    \
    if (d.shape == nullptr || d.run_f32 == nullptr || d.run_f64 == nullptr) {                             \
      throw std::logic_error("op " name " lacks its shape rule or a kernel");                            \
    }                                                                                                     \
  }
  GNNRT_FOR_EACH_OP(GNNRT_OP_CHECK)
#undef GNNRT_OP_CHECK
}

namespace {

const OpTable& table() {
  static const OpTable t = [] {
    OpTable t;
    defs::define_dense(t);
    defs::define_activation(t);
    defs::define_loss(t);
    defs::define_random(t);
    defs::define_norm(t);
    defs::define_graph(t);
    defs::define_attention(t);
    defs::define_heads(t);
    defs::define_collective(t);
    defs::define_state(t);
    t.check_complete();
    return t;
  }();
  return t;
}

}  // namespace

const OpDef& op_def(OpKind kind) { return table().at(kind); }

bool has_side_effects(OpKind kind) { return has_flag(kind, kSideEffects); }
bool is_collective(OpKind kind) { return has_flag(kind, kCollective); }

std::vector<OutputSpec> op_outputs(const Program& p, const Op& op, const std::string& where) {
  OpCheck c(p, op, where);
  op_def(op.kind).shape(c);
  return c.take();
}

void check_op(const Program& p, std::size_t i) {
  const Op& op = p.ops.at(i);
  const std::vector<OutputSpec> want = op_outputs(p, op, p.describe(i));
  const auto fail = [&](const std::string& what) {
    throw ShapeError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), what));
  };
  if (want.size() != op.outputs.size()) {
    fail(fmt::format("has {} results, its shape rule {}", op.outputs.size(), want.size()));
  }
  for (std::size_t k = 0; k < want.size(); ++k) {
    const ValueInfo& v = p.value(op.outputs[k]);
    if (v.dtype != want[k].dtype || v.shape != want[k].shape) {
      fail(fmt::format("result {} '{}' is {} {}, its shape rule says {} {}", k, v.name, to_string(v.dtype),
                       shape_string(v.shape), to_string(want[k].dtype), shape_string(want[k].shape)));
    }
  }
}

}  // namespace gnnrt::runtime
