// The definition of each op the core runs: its flags, its shape rule, its
// cost where the generic estimate is wrong for it, its kernel (templated on
// the float type) and its gradient rule, all in its family's file under
// runtime/defs/ (dense, activation, loss, random, norm, graph, attention,
// heads, collective, state). The Builder emits an op's results from its
// shape rule, the verifier re-checks every op of a program against it
// (programs loaded from the cache included), the executor runs its kernel,
// the autodiff its gradient rule and the cost model reads its cost.
// docs/runtime.md, "Adding an op", lists the files an op touches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"
#include "runtime/program.h"

namespace gnnrt::runtime {

enum OpFlag : uint32_t {
  kSideEffects = 1u << 0,  // writes persistent state in place (never removed as dead)
  kCollective = 1u << 1,   // talks to other ranks: every rank runs it, in the same order
  kNoGradient = 1u << 2,   // its results carry no gradient (constants, shifts, integers)
};

// One result of an op: its dtype and shape, and the suffix its name adds to
// the first result's name (".arg", ".keep", ".workspace"); empty for the first.
struct OutputSpec {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string suffix;
};

// What a shape rule sees: the op's operands, attributes and graph in its
// program; it checks them and declares the results (out()). A failed check
// throws ShapeError "program 'P': <where>: <what>".
class OpCheck {
 public:
  using Shape = std::vector<int64_t>;
  OpCheck(const Program& p, const Op& op, std::string where);

  const Program& program() const { return p_; }
  const Op& op() const { return op_; }
  const OpAttrs& attrs() const { return op_.attrs; }
  DType float_type() const { return p_.float_type; }

  // Operand i: present when listed and not kNoValue.
  std::size_t count() const { return op_.inputs.size(); }
  bool has(std::size_t i) const { return i < op_.inputs.size() && op_.inputs[i] != kNoValue; }
  const ValueInfo& in(std::size_t i) const;  // fails when absent
  const Shape& shape(std::size_t i) const { return in(i).shape; }
  int64_t rows(std::size_t i) const;  // fails unless 1-D or more
  int64_t cols(std::size_t i) const { return shape(i).at(1); }  // after rank(i, 2)
  // The op's graph (attribute `graph`); fails when it names none.
  const GraphInfo& graph() const;

  // Checks; each fails with a message naming the operand (`what`).
  void operands(std::size_t min, std::size_t max) const;  // how many are listed
  void rank(std::size_t i, std::size_t r, const char* what) const;
  void dtype(std::size_t i, DType d, const char* what) const;
  void floating(std::size_t i, const char* what) const { dtype(i, float_type(), what); }
  void same_shape(std::size_t i, std::size_t j, const char* a, const char* b) const;
  void shape_is(std::size_t i, const Shape& s, const char* what) const;
  void partitioned() const;
  [[noreturn]] void fail(const std::string& what) const;

  // Results, in order.
  void out(DType d, Shape s, std::string suffix = {});
  void out_float(Shape s, std::string suffix = {}) { out(float_type(), std::move(s), std::move(suffix)); }
  // The shape result k has in the program (ops whose result shapes their
  // operands do not fix: bucket_wait); fails when the op has no result k.
  const Shape& given(std::size_t k) const;

  std::vector<OutputSpec> take() { return std::move(outputs_); }

 private:
  const Program& p_;
  const Op& op_;
  std::string where_;
  std::vector<OutputSpec> outputs_;
};

template <typename T>
class Kernel;  // runtime/kernel.h
class Builder;  // runtime/builder.h

// What an op's gradient rule sees (runtime/autodiff.cc runs the rules in
// reverse op order): the op, the gradient g of its first result and the
// builder to emit the backward ops with. add() sums a gradient into an
// operand's; needs() says whether an operand wants one at all.
class Gradient {
 public:
  Gradient(Builder& b, const Op& op, ValueId g, const std::vector<bool>& needs,
           std::unordered_map<ValueId, ValueId>& sums)
      : b(b), op(op), a(op.attrs), g(g), needs_(needs), sums_(sums) {}

  Builder& b;
  const Op& op;
  const OpAttrs& a;
  const ValueId g;

  bool needs(ValueId v) const { return v != kNoValue && needs_[static_cast<std::size_t>(v)]; }
  void add(ValueId v, ValueId grad) { sum_into(b, needs_, sums_, v, grad); }
  // Operand k, or kNoValue when an optional one is not listed.
  ValueId optional(std::size_t k) const { return k < op.inputs.size() ? op.inputs[k] : kNoValue; }

  // sums[v] += grad (a new sum op when v has one already), when v needs it.
  static void sum_into(Builder& b, const std::vector<bool>& needs, std::unordered_map<ValueId, ValueId>& sums,
                       ValueId v, ValueId grad);

 private:
  const std::vector<bool>& needs_;
  std::unordered_map<ValueId, ValueId>& sums_;
};

struct OpDef {
  OpKind kind;
  uint32_t flags = 0;
  void (*shape)(OpCheck&) = nullptr;
  // Adjusts the generic cost (bytes of operands and results, one flop per
  // result element; graph ops also read their index arrays); null for none.
  void (*cost)(const Program&, const Op&, OpCost&) = nullptr;
  // The kernel in float and in double; returns the bytes sent to other
  // ranks (collectives), 0 for the rest.
  double (*run_f32)(const Kernel<float>&) = nullptr;
  double (*run_f64)(const Kernel<double>&) = nullptr;
  // Null for an op that is never differentiated (a gradient op itself, or
  // one whose flags say kNoGradient).
  void (*gradient)(Gradient&) = nullptr;
};

// An op's kernel in both float types, for an OpDef row.
#define GNNRT_KERNEL(fn) &fn<float>, &fn<double>

// The table the family files fill, one row per op (checked: each op once).
class OpTable {
 public:
  void add(const OpDef& def);
  const OpDef& at(OpKind kind) const;
  void check_complete() const;  // throws std::logic_error naming an op without a row

 private:
  std::vector<OpDef> defs_;
  std::vector<bool> set_;
};

namespace defs {  // one per family file
void define_dense(OpTable& t);
void define_activation(OpTable& t);
void define_loss(OpTable& t);
void define_random(OpTable& t);
void define_norm(OpTable& t);
void define_graph(OpTable& t);
void define_attention(OpTable& t);
void define_heads(OpTable& t);
void define_collective(OpTable& t);
void define_state(OpTable& t);
}  // namespace defs

const OpDef& op_def(OpKind kind);
inline bool has_flag(OpKind kind, OpFlag flag) { return (op_def(kind).flags & flag) != 0; }

// The results `op` has by its shape rule in `p`; throws ShapeError
// "program 'P': <where>: ..." when its operands or attributes break it.
std::vector<OutputSpec> op_outputs(const Program& p, const Op& op, const std::string& where);

// Checks op #i's results against its shape rule: ShapeError on a mismatch.
void check_op(const Program& p, std::size_t i);

}  // namespace gnnrt::runtime
