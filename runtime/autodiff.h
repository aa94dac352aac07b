// Reverse-mode autodiff over a Program: appends, after the existing ops, the
// backward ops of a scalar loss [1] (or of given outputs with given upstream
// gradients) with respect to chosen values, using each op's backward rule.
// Gradients that reach a value along several paths are summed in reverse op
// order, so the program (and its result) is the same every time. Throws
// ShapeError if the loss is not a scalar or a value needing a gradient comes
// from an op with no backward rule.
//
// In a partitioned program each rank differentiates its share of the global
// objective: halo ops differentiate into halo ops, all-reduces into
// all-reduces, so every local gradient is this rank's part of the global
// gradient (parameter gradients are then all-reduced by the compiler).
// Shifts that do not change a result (a softmax's max) get no gradient.
#pragma once

#include <span>
#include <vector>

#include "runtime/builder.h"

namespace gnnrt::runtime {

// Returns one gradient per entry of wrt, kNoValue where the loss does not
// depend on that value (an optimizer then leaves it untouched, as torch does
// for a parameter whose .grad is None).
std::vector<ValueId> append_backward(Builder& b, ValueId loss, std::span<const ValueId> wrt);

// The same seeded with upstream gradients: d(sum_k <outputs[k], seeds[k]>)/d wrt.
std::vector<ValueId> append_backward(Builder& b, std::span<const ValueId> outputs,
                                     std::span<const ValueId> seeds, std::span<const ValueId> wrt);

}  // namespace gnnrt::runtime
