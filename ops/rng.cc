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
