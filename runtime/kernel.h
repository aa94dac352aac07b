// What an op's kernel sees when the core runs it: its operands and results
// as spans (of the program's float type T, or of another dtype by name), its
// graph, its attributes and the run's scalars. Each op's kernel is written
// once, templated on T, in its family's definition file (runtime/defs/),
// next to its shape rule, cost and gradient rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/csr.h"
#include "ops/dropout.h"
#include "runtime/core.h"

namespace gnnrt::runtime {

template <typename T>
class Kernel {
 public:
  using Adjacency = Core::Adjacency;

  Kernel(Core& core, const Program& program, std::size_t op_index, std::span<std::byte* const> data,
         std::span<const Adjacency* const> graphs, const RunContext& context)
      : core(core),
        program(program),
        op(program.ops[op_index]),
        attrs(op.attrs),
        context(context),
        data_(data),
        graphs_(graphs) {}

  Core& core;  // the collective kernels' all-reduces and halo exchange
  const Program& program;
  const Op& op;
  const OpAttrs& attrs;
  const RunContext& context;

  // Operand k; empty when it is not listed or kNoValue (an optional one).
  std::span<const T> in(std::size_t k) const { return operand<T>(k); }
  std::span<const double> in_f64(std::size_t k) const { return operand<double>(k); }
  std::span<const int64_t> in_i64(std::size_t k) const { return operand<int64_t>(k); }
  std::span<const int32_t> in_i32(std::size_t k) const { return operand<int32_t>(k); }
  std::span<const uint8_t> in_u8(std::size_t k) const { return operand<uint8_t>(k); }
  // Operand k written in place (optimizer and metric state).
  std::span<T> inout(std::size_t k) const { return values<T>(op.inputs[k]); }
  std::span<double> inout_f64(std::size_t k) const { return values<double>(op.inputs[k]); }
  // Result k.
  std::span<T> out(std::size_t k = 0) const { return values<T>(op.outputs[k]); }
  std::span<double> out_f64(std::size_t k = 0) const { return values<double>(op.outputs[k]); }
  std::span<int32_t> out_i32(std::size_t k = 0) const { return values<int32_t>(op.outputs[k]); }
  std::span<uint8_t> out_u8(std::size_t k = 0) const { return values<uint8_t>(op.outputs[k]); }

  // Rows (the first dimension) and columns (the second, 1 for a vector) of
  // operand k or result k.
  int64_t in_rows(std::size_t k) const { return program.value(op.inputs[k]).shape.at(0); }
  int64_t in_cols(std::size_t k) const { return cols(op.inputs[k]); }
  int64_t out_rows(std::size_t k = 0) const { return program.value(op.outputs[k]).shape.at(0); }
  int64_t out_cols(std::size_t k = 0) const { return cols(op.outputs[k]); }

  // The op's graph (attribute `graph`), bound on the core.
  const Adjacency& graph() const { return *graphs_[static_cast<std::size_t>(attrs.graph())]; }
  // The key of this op's random draws in this run (dropout, noise).
  ops::DropoutKey dropout_key() const {
    return {context.seed, static_cast<uint64_t>(context.step), attrs.random_stream()};
  }
  // A loss's count of real rows times `per_row`: the global one when operand
  // `count_input` is given (partitioned and data-parallel programs), else the
  // rows the mask at `mask_input` keeps on this rank.
  int64_t loss_count(std::size_t mask_input, std::size_t count_input, int64_t per_row) const {
    if (count_input < op.inputs.size()) return in_i64(count_input)[0] * per_row;
    int64_t n = 0;
    for (uint8_t m : in_u8(mask_input)) n += m != 0;
    return n * per_row;
  }
  std::byte* bytes(ValueId v) const { return data_[static_cast<std::size_t>(v)]; }

 private:
  int64_t cols(ValueId v) const {
    const auto& s = program.value(v).shape;
    return s.size() > 1 ? s[1] : int64_t{1};
  }
  template <typename U>
  std::span<U> values(ValueId v) const {
    return std::span<U>(reinterpret_cast<U*>(bytes(v)), static_cast<std::size_t>(program.value(v).elements()));
  }
  template <typename U>
  std::span<const U> operand(std::size_t k) const {
    if (k >= op.inputs.size() || op.inputs[k] == kNoValue) return {};
    return values<U>(op.inputs[k]);
  }

  std::span<std::byte* const> data_;
  std::span<const Adjacency* const> graphs_;
};

}  // namespace gnnrt::runtime
