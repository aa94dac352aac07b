// exp and expm1 for kernels whose loops must vectorise (internal to ops/).
//
// glibc's expf is a call the compiler cannot vectorise (its vector variants
// need -ffast-math, which this project does not use: results must not
// depend on the compiler's reassociation). A softmax, log_softmax or ELU
// over [E, 8] spent 2-3 ns per element in that call (bench/README.md).
// These are plain inline arithmetic, so a loop over them becomes SIMD code.
//
// float: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, Cephes' expf
// polynomial for e^r, and 2^n put into the exponent in two halves (so n =
// 128 and n = -126 need no special case). Accuracy (tests/ops/
// vector_math_test.cc, sweeping the range): within 1 ulp of the correctly
// rounded e^x on [-87.33, 88.72]; 0 below -87.34 (no subnormal results, an
// absolute error under 1.2e-38), +inf above 88.73, NaN for NaN. expm1: a
// degree-8 Taylor polynomial for |x| < 0.5 (no cancellation near 0),
// e^x - 1 elsewhere; within 2 ulp.
// double (finite-difference checks): std::exp and std::expm1.
//
// Pure functions: the same input gives the same bits on every thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gnnrt::ops::detail {

[[gnu::always_inline]] inline float exp_float(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;      // 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;       // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMax = 88.7228394f;         // above: +inf
  constexpr float kMin = -87.3365479f;        // below: 0
  // min/max rather than branches or selects: GCC turned those into masked
  // AVX-512 code twice as long. NaN passes through every step below.
  const float xc = std::min(std::max(x, kMin), kMax);
  const float t = xc * kLog2e + kRound;  // n + kRound, in the mantissa's low bits
  const float fn = t - kRound;
  const int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  float r = xc - fn * kLn2Hi;
  r = r - fn * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  const int32_t half = n >> 1;
  const float s1 = std::bit_cast<float>((half + 127) << 23);
  const float s2 = std::bit_cast<float>((n - half + 127) << 23);
  const float out = y * s1 * s2;
  return x < kMin ? 0.0f : (x > kMax ? INFINITY : out);
}

[[gnu::always_inline]] inline float expm1_float(float x) {
  // e^x - 1 = x + x^2 (1/2 + x (1/6 + x (1/24 + ...))) for small |x|.
  float p = 1.0f / 40320;
  p = p * x + 1.0f / 5040;
  p = p * x + 1.0f / 720;
  p = p * x + 1.0f / 120;
  p = p * x + 1.0f / 24;
  p = p * x + 1.0f / 6;
  p = p * x + 0.5f;
  const float small = p * (x * x) + x;
  const float large = exp_float(x) - 1.0f;
  return (x < 0.5f && x > -0.5f) ? small : large;
}

template <typename T>
[[gnu::always_inline]] inline T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_float(x);
  } else {
    return std::exp(x);
  }
}

template <typename T>
[[gnu::always_inline]] inline T vexpm1(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return expm1_float(x);
  } else {
    return std::expm1(x);
  }
}

}  // namespace gnnrt::ops::detail
