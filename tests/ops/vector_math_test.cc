// ops/vector_math.h against glibc's double-precision exp, expm1 and log: the
// floats of the range the header promises (strided), in ulp of the exact
// result rounded to float, plus the edges (underflow, zeros, infinities,
// NaN, a positive argument).
#include "ops/vector_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace gnnrt::ops::detail {
namespace {

// Floats in order as integers: key(next float up) = key(x) + 1.
int64_t key(float v) {
  const auto bits = std::bit_cast<int32_t>(v);
  return bits < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - bits : int64_t{bits};
}

float from_key(int64_t k) {
  return std::bit_cast<float>(static_cast<int32_t>(
      k < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - k : k));
}

// Distance in units in the last place between two finite floats.
int64_t ulps(float a, float b) { return std::abs(key(a) - key(b)); }

// The largest ulp error of fn over the floats in [lo, hi], every `stride`-th
// one, against reference computed in double and rounded once.
template <typename Fn, typename Ref>
int64_t worst_ulps(float lo, float hi, int stride, Fn fn, Ref reference, float* worst_x) {
  int64_t worst = 0;
  for (int64_t k = key(lo); k <= key(hi); k += stride) {
    const float x = from_key(k);
    const float want = static_cast<float>(reference(static_cast<double>(x)));
    const int64_t d = ulps(fn(x), want);
    if (d > worst) {
      worst = d;
      *worst_x = x;
    }
  }
  return worst;
}

const auto kExp = [](double x) { return std::exp(x); };
const auto kExpm1 = [](double x) { return std::expm1(x); };

// The whole range strided (about 1e7 of its 1.1e9 floats, quick under the
// sanitizers too), [-2, -0.5] at every third float and [-1e-3, 0] at every
// 101st.
TEST(VectorMath, ExpWithinOneUlpOverItsRange) {
  float at = 0;
  EXPECT_LE(worst_ulps(-87.3365f, 0.0f, 97, exp_nonpositive_float, kExp, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(-2.0f, -0.5f, 3, exp_nonpositive_float, kExp, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(-1e-3f, 0.0f, 101, exp_nonpositive_float, kExp, &at), 1) << "at x = " << at;
}

TEST(VectorMath, ExpEdges) {
  EXPECT_EQ(exp_nonpositive_float(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_float(-0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_float(-INFINITY), 0.0f);
  EXPECT_EQ(exp_nonpositive_float(-100.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp_nonpositive_float(NAN)));
  EXPECT_TRUE(std::isnan(exp_nonpositive_float(-NAN)));
  // The end of the range is finite and near the exact value.
  EXPECT_LE(ulps(exp_nonpositive_float(-87.33f), static_cast<float>(std::exp(double{-87.33f}))), 1);
  EXPECT_GT(exp_nonpositive_float(-87.3365f), 0.0f);
  // A positive argument counts as 0 (no caller keeps one).
  EXPECT_EQ(exp_nonpositive_float(3.0f), 1.0f);
}

TEST(VectorMath, GeneralExpWithinOneUlpOverItsRange) {
  float at = 0;
  EXPECT_LE(worst_ulps(-87.3365f, 88.72f, 97, exp_float, kExp, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(0.5f, 2.0f, 3, exp_float, kExp, &at), 1) << "at x = " << at;
  EXPECT_EQ(exp_float(0.0f), 1.0f);
  EXPECT_EQ(exp_float(-100.0f), 0.0f);
  EXPECT_EQ(exp_float(-INFINITY), 0.0f);  // a head whose scores are all -inf
  EXPECT_TRUE(std::isnan(exp_float(-NAN)));
  EXPECT_EQ(exp_float(INFINITY), INFINITY);
  EXPECT_EQ(exp_float(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_float(NAN)));
  EXPECT_LE(ulps(exp_float(88.72f), static_cast<float>(std::exp(double{88.72f}))), 1);
}

TEST(VectorMath, Expm1WithinOneUlp) {
  float at = 0;
  EXPECT_LE(worst_ulps(-87.0f, 0.0f, 97, expm1_nonpositive_float, kExpm1, &at), 1) << "at x = " << at;
  // Near 0, where e^x - 1 would cancel, and around -ln 2 / 2, where n turns.
  EXPECT_LE(worst_ulps(-0.75f, -0.25f, 3, expm1_nonpositive_float, kExpm1, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(-1e-3f, 0.0f, 101, expm1_nonpositive_float, kExpm1, &at), 1) << "at x = " << at;
  EXPECT_EQ(expm1_nonpositive_float(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(expm1_nonpositive_float(-0.0f)));
  EXPECT_EQ(expm1_nonpositive_float(-INFINITY), -1.0f);
  EXPECT_EQ(expm1_nonpositive_float(-100.0f), -1.0f);
  EXPECT_TRUE(std::isnan(expm1_nonpositive_float(NAN)));
  EXPECT_EQ(expm1_nonpositive_float(-1e-30f), -1e-30f);
  EXPECT_EQ(expm1_nonpositive_float(2.0f), 0.0f);
}

// Every positive normal float strided (about 1.1e7 of 2.1e9), [0.5, 2]
// (where e and the m < sqrt(1/2) switch turn) at every third, and [1, 64]
// (log_softmax's row sums of up to 64 classes) at every fifth.
TEST(VectorMath, LogWithinOneUlpOverPositiveNormals) {
  const auto log = [](double x) { return std::log(x); };
  float at = 0;
  EXPECT_LE(worst_ulps(std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), 191,
                       log_normal_float, log, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(0.5f, 2.0f, 3, log_normal_float, log, &at), 1) << "at x = " << at;
  EXPECT_LE(worst_ulps(1.0f, 64.0f, 5, log_normal_float, log, &at), 1) << "at x = " << at;
  EXPECT_EQ(log_normal_float(1.0f), 0.0f);
  EXPECT_EQ(log_normal_float(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(log_normal_float(NAN)));
  EXPECT_LE(ulps(log_normal_float(std::numeric_limits<float>::max()),
                 static_cast<float>(std::log(double{std::numeric_limits<float>::max()}))), 1);
}

}  // namespace
}  // namespace gnnrt::ops::detail
