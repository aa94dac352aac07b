// exp and expm1 for kernels whose loops must vectorise (internal to ops/).
// Most callers' arguments are <= 0 by construction: a softmax's score minus
// its maximum, a log-probability, an ELU's negative inputs (its other lanes
// are selected away); they use exp_nonpositive and expm1_nonpositive. The
// three softmax pieces given their maximum as an input (segment_exp_sum,
// its gradient, segment_softmax_apply) use exp_float (any x, at the end of
// this file).
//
// glibc's expf is a call the compiler cannot vectorise (its vector variants
// need -ffast-math, which this project does not use: results must not
// depend on the compiler's reassociation), and that call per element is
// what a softmax, log_softmax or ELU spent its time in (docs/kernels.md).
// These are plain inline arithmetic, so a loop over them becomes SIMD code.
//
// float: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, n in [-126, 0];
// q = e^r - 1 = r + r^2 P(r) with Cephes' expf polynomial for P, and then
// e^x = 2^n q + 2^n and e^x - 1 = 2^n q + (2^n - 1): one scale (2^n is a
// normal float over the whole range) and no cancellation near 0, so one
// polynomial serves both, with no second branch for expm1 (docs/kernels.md).
// Accuracy (tests/ops/vector_math_test.cc,
// sweeping the range): within 1 ulp of the correctly rounded result on
// [-87.33, 0]; below -87.34 exp gives 0 (no subnormal results) and expm1
// -1; NaN gives NaN; -0 gives 1 and -0. A positive argument is treated as
// 0 (exp 1, expm1 0): the callers never pass one they keep.
// double (finite-difference checks): std::exp and std::expm1.
//
// Pure functions: the same input gives the same bits on every thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace gnnrt::ops::detail {

// The widest vector register, in bytes, and how many the target has. A GCC
// vector wider than a register is split into pieces that GCC keeps on the
// stack, and a loop whose live values outnumber the registers spills them
// (four Threefry chains' 16 words on AVX2); either slows the loop down
// badly (docs/kernels.md).
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
inline constexpr int kVectorRegisters = 32;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
inline constexpr int kVectorRegisters = 16;
#else
inline constexpr int kVectorBytes = 16;
inline constexpr int kVectorRegisters = 16;
#endif

// Elements of T in one vector register: the most lanes a kernel's GCC
// vectors should have.
template <typename T>
inline constexpr int kRegisterLanes = std::max<int>(1, kVectorBytes / static_cast<int>(sizeof(T)));

inline constexpr float kExpMin = -87.3365479f;  // below: exp is 0

// ln 2 in two parts: kLn2Hi has 9 significant bits, so n * kLn2Hi is exact
// for the n an exp or log meets; kLn2Lo = ln 2 - kLn2Hi.
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;

// n and q = e^r - 1 for x = n ln2 + r, |r| <= ln2 / 2, x already clamped to
// the caller's range (NaN passes through q): Cody-Waite reduction and
// Cephes' expf polynomial, shared by every exp below.
struct Reduction {
  int32_t n;
  float q;
};

[[gnu::always_inline]] inline Reduction reduce(float xc) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;       // 1.5 * 2^23: adding it rounds to an integer
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
  return {n, p * (r * r) + r};
}

// 2^n and e^r - 1 for x clamped to [kExpMin, 0], where 2^n is a normal float.
struct Reduced {
  float scale;  // 2^n
  float q;      // e^r - 1
};

[[gnu::always_inline]] inline Reduced reduce_nonpositive(float x) {
  // min/max rather than branches or selects: GCC turned those into masked
  // AVX-512 code twice as long. NaN passes through both.
  const Reduction e = reduce(std::max(std::min(x, 0.0f), kExpMin));
  return {std::bit_cast<float>((e.n + 127) << 23), e.q};
}

[[gnu::always_inline]] inline float exp_nonpositive_float(float x) {
  const Reduced e = reduce_nonpositive(x);
  const float out = e.scale * e.q + e.scale;
  return x < kExpMin ? 0.0f : out;
}

[[gnu::always_inline]] inline float expm1_nonpositive_float(float x) {
  const Reduced e = reduce_nonpositive(x);
  const float out = e.scale * e.q + (e.scale - 1.0f);
  return x == 0.0f ? x : out;  // keeps -0's sign
}

template <typename T>
[[gnu::always_inline]] inline T exp_nonpositive(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_nonpositive_float(x);
  } else {
    return std::exp(std::min(x, T(0)));
  }
}

template <typename T>
[[gnu::always_inline]] inline T expm1_nonpositive(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return expm1_nonpositive_float(x);
  } else {
    return std::expm1(std::min(x, T(0)));
  }
}

// e^x for any x, for the softmax pieces whose maximum is an input (the
// partitioned softmax's segment_exp_sum, its gradient and
// segment_softmax_apply, where a score can exceed the maximum it is
// given): the same reduction, with 2^n put into the exponent in two halves
// (so n = 128 and n = -126 need no special case). Within 1 ulp on
// [-87.33, 88.72]; 0 below -87.34, +inf above 88.73.
[[gnu::always_inline]] inline float exp_float(float x) {
  constexpr float kMax = 88.7228394f;  // above: +inf
  // NaN passes through the clamp and every step below.
  const Reduction e = reduce(std::min(std::max(x, kExpMin), kMax));
  const float y = e.q + 1.0f;
  const int32_t half = e.n >> 1;
  const float s1 = std::bit_cast<float>((half + 127) << 23);
  const float s2 = std::bit_cast<float>((e.n - half + 127) << 23);
  const float out = y * s1 * s2;
  return x < kExpMin ? 0.0f : (x > kMax ? INFINITY : out);
}

// log x for a positive normal float (log_softmax's log of a row's sum,
// which is at least 1): x = 2^e m with m in [sqrt(1/2), sqrt(2)), log x =
// e ln 2 + log(1 + f), f = m - 1, by Cephes' logf polynomial with ln 2 in
// two parts (e * kLn2Hi is exact). Within 1 ulp on [FLT_MIN, FLT_MAX]
// (tests/ops/vector_math_test.cc); NaN gives NaN and +inf gives +inf. Zero,
// negative and subnormal arguments are not handled: the callers never pass
// one. glibc's logf, one call per row that the compiler cannot vectorise,
// was about half of a narrow log_softmax's time (docs/kernels.md).
[[gnu::always_inline]] inline float log_normal_float(float x) {
  const auto bits = std::bit_cast<int32_t>(x);
  // x = 2^(e0) m0 with m0 in [0.5, 1) (frexp), then m0 < sqrt(1/2) moves
  // one factor 2 into m.
  const int32_t e0 = ((bits >> 23) & 0xff) - 126;
  const float m0 = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);
  const bool low = m0 < 0.707106781186547524f;
  const float f = low ? m0 + m0 - 1.0f : m0 - 1.0f;
  const float e = static_cast<float>(low ? e0 - 1 : e0);
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z;
  y += kLn2Lo * e;
  y += -0.5f * z;
  const float out = (f + y) + kLn2Hi * e;
  return x == INFINITY || x != x ? x : out;
}

template <typename T>
[[gnu::always_inline]] inline T log_normal(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return log_normal_float(x);
  } else {
    return std::log(x);
  }
}

template <typename T>
[[gnu::always_inline]] inline T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_float(x);
  } else {
    return std::exp(x);
  }
}

// v[j] = column j of the 8 x 8 block whose row i was v[i] (V: a GCC vector
// of 8 elements): pairs of rows interleaved by element, then pairs of
// pairs, then the 128-bit halves swapped (unpack, shuffle, permute, as the
// classic AVX 8 x 8 float transpose). Pure data movement: the same bits.
template <typename V>
[[gnu::always_inline]] inline void transpose8(V (&v)[8]) {
  V t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(v[i], v[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(v[i], v[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  // u[j] holds columns j and j + 4 of rows 0-3 (u[j]) or 4-7 (u[4 + j]).
  V u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = __builtin_shufflevector(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    v[j + 4] = __builtin_shufflevector(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// The 8 x 8 block of T at in (row stride in_stride) transposed into out
// (row stride out_stride), through transpose8. The loads and stores are
// unrolled: as loops, GCC filled v on the stack 16 bytes at a time and
// transpose8 read it back 32 at a time, a store-forwarding stall per row
// on AVX2 (docs/kernels.md).
template <typename T>
[[gnu::always_inline]] inline void transpose_block8(const T* in, int64_t in_stride, T* out,
                                                    int64_t out_stride) {
  using V [[gnu::vector_size(8 * sizeof(T))]] = T;
  V v[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) std::memcpy(&v[i], in + i * in_stride, sizeof(V));
  transpose8(v);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) std::memcpy(out + j * out_stride, &v[j], sizeof(V));
}

}  // namespace gnnrt::ops::detail
