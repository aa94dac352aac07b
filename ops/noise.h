// Gaussian noise whose every element is a pure function of (seed, step, op
// id, global row, column), as dropout's masks are (ops/dropout.h): a VAE's
// reparameterisation noise, the same on any rank count, share or thread
// count. Element (r, c) is normal c % 4 of ops::normals(philox(seed,
// kNoiseStream, {step, op, global_rows[r], c / 4})) (ops/rng.h): four
// normals a draw, bit-identical everywhere (no libm), rounded to T.
//
// Layout: out [rows, cols] row-major; global_rows [rows] (negative ids are
// refused). Blocking; OpenMP inside. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/dropout.h"

namespace gnnrt::ops {

// Philox's stream for noise draws: apart from parameter initialisation's
// (parameter indices) and the batch orders' (model/training/batch_source.cc).
inline constexpr uint64_t kNoiseStream = 0x6e6f697365ull;  // "noise"

template <typename T>
void normal_forward(const DropoutKey& key, int64_t cols, std::span<const int64_t> global_rows, std::span<T> out);

}  // namespace gnnrt::ops
