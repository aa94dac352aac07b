// Reverse-mode autodiff over a Program: appends, after the existing ops, the
// backward ops of a scalar loss [1] with respect to chosen values (the
// parameters), using each op's backward rule. Gradients that reach a value
// along several paths are summed in reverse op order, so the program (and
// its result) is the same every time. Throws ShapeError if the loss is not a
// scalar or a value needing a gradient comes from an op with no backward rule.
#pragma once

#include <span>
#include <vector>

#include "runtime/builder.h"

namespace gnnrt::runtime {

// Returns one gradient per entry of wrt, kNoValue where the loss does not
// depend on that value (an optimizer then leaves it untouched, as torch does
// for a parameter whose .grad is None).
std::vector<ValueId> append_backward(Builder& b, ValueId loss, std::span<const ValueId> wrt);

}  // namespace gnnrt::runtime
