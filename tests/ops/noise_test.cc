// The reparameterisation noise (ops/noise.h) is its definition: element
// (r, c) is normal c % 4 of the Philox draw (seed, kNoiseStream, {step, op,
// global row, c / 4}), so any split of the rows and any thread count give
// the noise of the whole; it is standard normal; other keys draw other
// noise; bad sizes and ids are refused naming the op. (The encoder golden
// draws the same noise with its own Python Philox.)
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "ops/error.h"
#include "ops/noise.h"
#include "ops/rng.h"

namespace gnnrt::ops {
namespace {

constexpr int64_t kRows = 257, kCols = 18;
constexpr DropoutKey kKey{.seed = 9, .step = 4, .op = 31};

std::vector<int64_t> iota_rows(int64_t n, int64_t first = 0) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), first);
  return r;
}

TEST(Noise, EachElementIsItsPhiloxDraw) {
  const std::vector<int64_t> rows = iota_rows(kRows, 1000);
  std::vector<double> out(kRows * kCols);
  normal_forward<double>(kKey, kCols, rows, out);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const auto z = normals(philox(kKey.seed, kNoiseStream, {kKey.step, kKey.op, static_cast<uint64_t>(rows[r]),
                                                               static_cast<uint64_t>(c / 4)}));
      ASSERT_EQ(out[r * kCols + c], z[c % 4]) << r << ", " << c;
    }
  }
}

TEST(Noise, AnySplitOfRowsAndAnyThreadCountDrawTheSameNoise) {
  const std::vector<int64_t> all = iota_rows(kRows);
  std::vector<float> whole(kRows * kCols);
  omp_set_num_threads(1);
  normal_forward<float>(kKey, kCols, all, whole);
  // The rows in reverse on another "rank", with two threads.
  std::vector<int64_t> reversed(all.rbegin(), all.rend());
  std::vector<float> other(kRows * kCols);
  omp_set_num_threads(2);
  normal_forward<float>(kKey, kCols, reversed, other);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      ASSERT_EQ(other[(kRows - 1 - r) * kCols + c], whole[r * kCols + c]) << r << ", " << c;
    }
  }
}

TEST(Noise, IsStandardNormalAndOtherKeysDrawOtherNoise) {
  const int64_t rows = 20000, cols = 5;
  std::vector<double> a(rows * cols), b(rows * cols);
  normal_forward<double>(kKey, cols, iota_rows(rows), a);
  DropoutKey next = kKey;
  next.step += 1;
  normal_forward<double>(next, cols, iota_rows(rows), b);
  double mean = 0, square = 0, cross = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    mean += a[i];
    square += a[i] * a[i];
    cross += a[i] * b[i];
  }
  const double n = static_cast<double>(a.size());
  // 1e5 draws: the mean's standard error is 0.003, the variance's 0.0045.
  EXPECT_NEAR(mean / n, 0.0, 0.015);
  EXPECT_NEAR(square / n, 1.0, 0.025);
  EXPECT_NEAR(cross / n, 0.0, 0.015);  // the next step's noise is independent
}

TEST(Noise, BadInputIsRefusedNamingTheOp) {
  std::vector<float> out(3 * 2);
  const std::vector<int64_t> rows{0, -4, 2};
  try {
    normal_forward<float>(kKey, 2, rows, out);
    FAIL() << "a negative id was accepted";
  } catch (const OpError& e) {
    EXPECT_STREQ(e.what(), "normal: global_rows[1] = -4 is negative");
  }
  std::vector<float> short_out(5);
  EXPECT_THROW(normal_forward<float>(kKey, 2, iota_rows(3), short_out), OpError);
  EXPECT_THROW(normal_forward<float>(kKey, -1, iota_rows(3), out), OpError);
  std::vector<float> none;
  normal_forward<float>(kKey, 0, iota_rows(3), none);  // zero columns: nothing to draw
  normal_forward<float>(kKey, 4, {}, none);            // no rows
}

}  // namespace
}  // namespace gnnrt::ops
