// Dropout's mask is a function of (seed, step, op, global row, column) only:
// any split of the rows gives the mask of the whole, the backward reuses it,
// and the keep rate is 1 - p. The lane-parallel Threefry gives Random123's
// words. (Exact masks are also checked against the reference's NumPy
// Threefry in the golden cases.)
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <numeric>
#include <vector>

#include "ops/dropout.h"
#include "ops/error.h"
#include "ops/rng.h"

namespace gnnrt::ops {
namespace {

constexpr int64_t kRows = 300, kCols = 37;

std::vector<float> ones(int64_t n) { return std::vector<float>(n, 1.0f); }

TEST(Dropout, AnySplitOfRowsDrawsTheSameMask) {
  const DropoutKey key{.seed = 42, .step = 7, .op = 3};
  std::vector<float> whole(kRows * kCols);
  dropout_forward<float>(key, 0.3, kCols, {}, ones(kRows * kCols), whole);
  // Rows 0..99 on one "core", the rest on another, listed in reverse order.
  std::vector<int64_t> first(100), second(kRows - 100);
  std::iota(first.begin(), first.end(), 0);
  for (int64_t i = 0; i < kRows - 100; ++i) second[i] = kRows - 1 - i;
  std::vector<float> a(100 * kCols), b((kRows - 100) * kCols);
  dropout_forward<float>(key, 0.3, kCols, first, ones(a.size()), a);
  dropout_forward<float>(key, 0.3, kCols, second, ones(b.size()), b);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const float part = r < 100 ? a[r * kCols + c] : b[(kRows - 1 - r) * kCols + c];
      ASSERT_EQ(part, whole[r * kCols + c]) << r << ", " << c;
      ASSERT_EQ(whole[r * kCols + c] != 0.0f, dropout_keeps(key, 0.3, r, c));
    }
  }
}

TEST(Dropout, BackwardUsesTheForwardMaskAndScale) {
  const DropoutKey key{.seed = 1, .step = 2, .op = 9};
  const auto x = ones(kRows * kCols);
  std::vector<float> y(x.size()), g(x.size());
  dropout_forward<float>(key, 0.25, kCols, {}, x, y);
  dropout_backward<float>(key, 0.25, kCols, {}, x, g);
  EXPECT_EQ(y, g);
  for (float v : y) EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6f);
}

TEST(Dropout, KeepRateIsOneMinusP) {
  const int64_t rows = 2000, cols = 100;
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<float> y(rows * cols);
    dropout_forward<float>({.seed = 5, .step = 0, .op = 0}, p, cols, {}, ones(y.size()), y);
    const double kept = std::count_if(y.begin(), y.end(), [](float v) { return v != 0; });
    const double rate = kept / static_cast<double>(y.size());
    // 200k Bernoulli draws: standard deviation below 0.0012.
    EXPECT_NEAR(rate, 1 - p, 0.006) << "p = " << p;
  }
}

TEST(Dropout, KeyPartsChangeTheMask) {
  std::vector<float> base(kRows * kCols), other(kRows * kCols);
  dropout_forward<float>({.seed = 1, .step = 1, .op = 1}, 0.5, kCols, {}, ones(base.size()), base);
  for (DropoutKey k : {DropoutKey{2, 1, 1}, DropoutKey{1, 2, 1}, DropoutKey{1, 1, 2}}) {
    dropout_forward<float>(k, 0.5, kCols, {}, ones(other.size()), other);
    EXPECT_NE(base, other);
  }
}

// threefry_many and threefry_pick against Random123's own Threefry4x32
// (ops::threefry), for counts that fill no vector, one, and a tail, and
// counters whose words carry (all ones) or differ only in their high bits.
TEST(Threefry, ManyGivesTheLibrarysWords) {
  const Words32 key = {0xdeadbeefu, 7, 0xffffffffu, 123};
  for (int64_t n : {0, 1, 15, 16, 17, 1000}) {
    std::array<std::vector<uint32_t>, 4> c, w;
    for (auto& v : c) v.resize(n);
    for (auto& v : w) v.resize(n, 0xabababab);
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<uint32_t>(i);
      c[0][i] = u * 2654435761u;
      c[1][i] = i % 3 == 0 ? 0xffffffffu : u;
      c[2][i] = u << 24;
      c[3][i] = ~u;
    }
    threefry_many(key, {c[0].data(), c[1].data(), c[2].data(), c[3].data()},
                  {w[0].data(), w[1].data(), w[2].data(), w[3].data()}, n);
    // threefry_pick: one word of each draw, the fourth counter word shared.
    const uint32_t c3 = 0x80000001u;
    std::vector<uint8_t> pick(n);
    for (int64_t i = 0; i < n; ++i) pick[i] = static_cast<uint8_t>((i * 7 + i / 5) % 4);
    std::vector<uint32_t> picked(n, 0xabababab);
    threefry_pick(key, {c[0].data(), c[1].data(), c[2].data()}, c3, pick.data(), picked.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const Words32 want = threefry(key, {c[0][i], c[1][i], c[2][i], c[3][i]});
      for (int j = 0; j < 4; ++j) ASSERT_EQ(w[j][i], want[j]) << "n = " << n << ", i = " << i;
      ASSERT_EQ(picked[i], threefry(key, {c[0][i], c[1][i], c[2][i], c3})[pick[i]])
          << "n = " << n << ", i = " << i;
    }
  }
}

TEST(Dropout, OpIdBeyond32BitsAndColumnsBeyond2To34AreErrors) {
  std::vector<float> y(kCols);
  const DropoutKey wide_op{.seed = 1, .step = 1, .op = uint64_t{1} << 32};
  EXPECT_THROW(dropout_forward<float>(wide_op, 0.5, kCols, {}, ones(kCols), y), OpError);
  EXPECT_THROW(dropout_keeps(wide_op, 0.5, 0, 0), OpError);
  EXPECT_THROW(dropout_keeps({}, 0.5, 0, uint64_t{1} << 34), OpError);
  EXPECT_NO_THROW(dropout_keeps({}, 0.5, 0, (uint64_t{1} << 34) - 1));
}

}  // namespace
}  // namespace gnnrt::ops
