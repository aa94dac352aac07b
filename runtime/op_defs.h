// The definition of each op the core runs, in one table (op_defs.cc): its
// flags, its shape rule and, where the generic estimate is wrong for it, its
// cost. The Builder emits an op's results from its shape rule, the verifier
// re-checks every op of a program against it (programs loaded from the cache
// included), the autodiff reads the flags, and the cost model the cost.
// The other two parts of an op live where their code runs: its kernel in
// executor.cc (templated on the float type) and its backward rule in
// autodiff.cc. docs/runtime.md lists the places an op touches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

struct OpDef {
  OpKind kind;
  uint32_t flags = 0;
  void (*shape)(OpCheck&) = nullptr;
  // Adjusts the generic cost (bytes of operands and results, one flop per
  // result element; graph ops also read their index arrays); null for none.
  void (*cost)(const Program&, const Op&, OpCost&) = nullptr;
};

const OpDef& op_def(OpKind kind);
inline bool has_flag(OpKind kind, OpFlag flag) { return (op_def(kind).flags & flag) != 0; }

// The results `op` has by its shape rule in `p`; throws ShapeError
// "program 'P': <where>: ..." when its operands or attributes break it.
std::vector<OutputSpec> op_outputs(const Program& p, const Op& op, const std::string& where);

// Checks op #i's results against its shape rule: ShapeError on a mismatch.
void check_op(const Program& p, std::size_t i);

}  // namespace gnnrt::runtime
