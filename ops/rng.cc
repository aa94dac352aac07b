#include "ops/rng.h"

#include <Random123/philox.h>
#include <Random123/threefry.h>

#include <bit>
#include <cmath>
#include <utility>

namespace gnnrt::ops {
namespace {

// Series coefficients, computed by the compiler (IEEE division, like at run
// time) so that the hot loops multiply instead of divide.
constexpr int kLogTerms = 12, kTrigTerms = 11;
constexpr std::array<double, kLogTerms> kInverseOdd = [] {  // 1 / 23, 1 / 21, ..., 1 / 1
  std::array<double, kLogTerms> a{};
  for (int i = 0; i < kLogTerms; ++i) a[i] = 1.0 / (23 - 2 * i);
  return a;
}();
constexpr std::array<double, kTrigTerms> kSinSteps = [] {  // 1 / (23 * 22), ..., 1 / (3 * 2)
  std::array<double, kTrigTerms> a{};
  for (int i = 0; i < kTrigTerms; ++i) a[i] = 1.0 / ((23.0 - 2 * i) * (22.0 - 2 * i));
  return a;
}();
constexpr std::array<double, kTrigTerms> kCosSteps = [] {  // 1 / (22 * 21), ..., 1 / (2 * 1)
  std::array<double, kTrigTerms> a{};
  for (int i = 0; i < kTrigTerms; ++i) a[i] = 1.0 / ((22.0 - 2 * i) * (21.0 - 2 * i));
  return a;
}();

// ln(u) for u in (0, 1]: u = m 2^e with m in [1/sqrt2, sqrt2), ln m = 2 atanh(t),
// t = (m - 1) / (m + 1), |t| < 0.18; the series to t^23 is exact to double.
double log_unit(double u) {
  // u >= 2^-53 is a normal double: split exponent and mantissa bits (frexp,
  // without the library call).
  const uint64_t bits = std::bit_cast<uint64_t>(u);
  int64_t e = static_cast<int64_t>(bits >> 52) - 1022;
  double m = std::bit_cast<double>((bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1022} << 52));
  if (m < 0.70710678118654752) {
    m *= 2.0;
    --e;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double series = 0.0;
  for (const double c : kInverseOdd) series = series * t2 + c;
  return static_cast<double>(e) * 0.69314718055994531 + 2.0 * t * series;
}

// (cos 2 pi u, sin 2 pi u) for u in [0, 1): quarter turn q exactly, then
// Taylor series on [0, pi/2) to the 23rd power (error below 1e-17), nested:
// sin phi / phi = 1 - p2/(2*3) (1 - p2/(4*5) (...)), cos phi = 1 - p2/(1*2) (1 - p2/(3*4) (...)).
std::pair<double, double> cos_sin_turn(double u) {
  const double four_u = 4.0 * u;
  const int q = static_cast<int>(four_u);
  const double phi = (four_u - q) * 1.5707963267948966;
  const double p2 = phi * phi;
  double s = 1.0, c = 1.0;
  for (int i = 0; i < kTrigTerms; ++i) {
    s = 1.0 - s * p2 * kSinSteps[i];
    c = 1.0 - c * p2 * kCosSteps[i];
  }
  s *= phi;
  switch (q) {
    case 0: return {c, s};
    case 1: return {-s, c};
    case 2: return {-c, -s};
    default: return {s, -c};
  }
}

}  // namespace

RngWords philox(uint64_t seed, uint64_t stream, const RngWords& counter) {
  using Philox = r123::Philox4x64;
  const Philox::ctr_type w =
      Philox()({{counter[0], counter[1], counter[2], counter[3]}}, {{seed, stream}});
  return {w.v[0], w.v[1], w.v[2], w.v[3]};
}

Words32 threefry(const Words32& key, const Words32& counter) {
  using Threefry = r123::Threefry4x32;
  const Threefry::ctr_type w = Threefry()({{counter[0], counter[1], counter[2], counter[3]}},
                                          {{key[0], key[1], key[2], key[3]}});
  return {w.v[0], w.v[1], w.v[2], w.v[3]};
}

namespace {

// Random123's threefry4x32_R(20, ...) written over lanes: the library's
// function works on one counter in a struct, which GCC does not vectorise
// across calls. Rotations R_32x4 and key schedule as in Random123's
// threefry.h; tests/ops/dropout_test.cc checks every word against the library.
// ks: the key's four words and their parity word; x: the counter, in place.
[[gnu::always_inline]] inline void threefry_rounds(const uint32_t (&ks)[5], uint32_t& x0,
                                                   uint32_t& x1, uint32_t& x2, uint32_t& x3) {
  constexpr int kRotate[8][2] = {{10, 26}, {11, 21}, {13, 27}, {23, 5},
                                 {6, 20},  {17, 11}, {25, 10}, {18, 20}};
  x0 += ks[0], x1 += ks[1], x2 += ks[2], x3 += ks[3];
  // Five groups of four rounds, each followed by a key injection.
#pragma GCC unroll 5
  for (int s = 1; s <= 5; ++s) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const int* rot = kRotate[(s - 1) % 2 * 4 + r];
      if (r % 2 == 0) {
        x0 += x1, x1 = std::rotl(x1, rot[0]), x1 ^= x0;
        x2 += x3, x3 = std::rotl(x3, rot[1]), x3 ^= x2;
      } else {
        x0 += x3, x3 = std::rotl(x3, rot[0]), x3 ^= x0;
        x2 += x1, x1 = std::rotl(x1, rot[1]), x1 ^= x2;
      }
    }
    x0 += ks[s % 5];
    x1 += ks[(s + 1) % 5];
    x2 += ks[(s + 2) % 5];
    x3 += ks[(s + 3) % 5] + static_cast<uint32_t>(s);
  }
}

void key_schedule(const Words32& key, uint32_t (&ks)[5]) {
  for (int i = 0; i < 4; ++i) ks[i] = key[i];
  ks[4] = 0x1BD11BDAu ^ key[0] ^ key[1] ^ key[2] ^ key[3];
}

}  // namespace

__attribute__((target("prefer-vector-width=512")))
void threefry_many(const Words32& key, const std::array<const uint32_t*, 4>& c,
                   const std::array<uint32_t*, 4>& out, int64_t n) {
  uint32_t ks[5];
  key_schedule(key, ks);
  const uint32_t* __restrict c0 = c[0];
  const uint32_t* __restrict c1 = c[1];
  const uint32_t* __restrict c2 = c[2];
  const uint32_t* __restrict c3 = c[3];
  uint32_t* __restrict o0 = out[0];
  uint32_t* __restrict o1 = out[1];
  uint32_t* __restrict o2 = out[2];
  uint32_t* __restrict o3 = out[3];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x0 = c0[i], x1 = c1[i], x2 = c2[i], x3 = c3[i];
    threefry_rounds(ks, x0, x1, x2, x3);
    o0[i] = x0, o1[i] = x1, o2[i] = x2, o3[i] = x3;
  }
}

__attribute__((target("prefer-vector-width=512")))
void threefry_pick(const Words32& key, const std::array<const uint32_t*, 3>& c, uint32_t c3,
                   const uint8_t* pick, uint32_t* out, int64_t n) {
  uint32_t ks[5];
  key_schedule(key, ks);
  const uint32_t* __restrict c0 = c[0];
  const uint32_t* __restrict c1 = c[1];
  const uint32_t* __restrict c2 = c[2];
  const uint8_t* __restrict word = pick;
  uint32_t* __restrict o = out;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x0 = c0[i], x1 = c1[i], x2 = c2[i], x3 = c3;
    threefry_rounds(ks, x0, x1, x2, x3);
    const uint32_t w = word[i];
    o[i] = w == 0 ? x0 : w == 1 ? x1 : w == 2 ? x2 : x3;
  }
}

std::array<double, 4> normals(const RngWords& w) {
  std::array<double, 4> z;
  for (int pair = 0; pair < 2; ++pair) {
    const double radius = std::sqrt(-2.0 * log_unit(unit_nonzero(w[2 * pair])));
    const auto [c, s] = cos_sin_turn(unit(w[2 * pair + 1]));
    z[2 * pair] = radius * c;
    z[2 * pair + 1] = radius * s;
  }
  return z;
}

}  // namespace gnnrt::ops
