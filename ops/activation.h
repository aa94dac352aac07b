// The smooth activations one kernel pair computes (ops/dense.h,
// activation_forward): their names, shared by the kernels, the runtime's
// op attributes (op_attrs.proto: the same numbers) and the model's modules.
#pragma once

#include <string_view>

namespace gnnrt::ops {

// kClip clamps to [-bound, bound] (the kernels' `bound`; torch.clamp, whose
// gradient passes at the bounds themselves); the others take no parameter.
enum class Activation { kSigmoid = 0, kSilu = 1, kGeluTanh = 2, kExp = 3, kTanh = 4, kAbs = 5, kClip = 6 };
std::string_view to_string(Activation a);

}  // namespace gnnrt::ops
