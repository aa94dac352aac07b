// Dropout's mask is a function of (seed, step, op, global row, column) only:
// any split of the rows gives the mask of the whole, the backward reuses it,
// and the keep rate is 1 - p. Every kernel path (blocks of 64 drawn kChains at
// a time or one, partial blocks, rows at global ids, a draw per element or per
// stored value, 32- and 64-bit flat indices) keeps exactly the elements
// dropout_keeps, which draws with Random123's own Threefry, says. (Exact
// masks are also checked against the reference's NumPy Threefry in the
// golden cases.)
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <numeric>
#include <string>
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
      ASSERT_EQ(whole[r * kCols + c] != 0.0f, dropout_keeps(key, 0.3, r, c, kCols));
    }
  }
}

TEST(Dropout, BackwardUsesTheForwardMaskAndScale) {
  const DropoutKey key{.seed = 1, .step = 2, .op = 9};
  const auto x = ones(kRows * kCols);
  std::vector<float> y(x.size()), g(x.size());
  std::vector<uint8_t> keep(x.size(), 7);
  dropout_forward<float>(key, 0.25, kCols, {}, x, y, keep);
  dropout_backward<float>(0.25, keep, x, g);
  EXPECT_EQ(y, g);
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(keep[i], y[i] != 0.0f ? 1 : 0) << i;  // every byte written, 0 or 1
    EXPECT_TRUE(y[i] == 0.0f || std::abs(y[i] - 1.0f / 0.75f) < 1e-6f);
  }
  // The same bytes with rows at global ids (a draw per element) and with
  // every element dropped.
  std::vector<int64_t> rows(kRows);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<uint8_t> keep_rows(x.size(), 7);
  dropout_forward<float>(key, 0.25, kCols, rows, x, y, keep_rows);
  EXPECT_EQ(keep_rows, keep);
  dropout_forward<float>(key, 1.0, kCols, {}, x, y, keep_rows);
  EXPECT_EQ(std::count(keep_rows.begin(), keep_rows.end(), 0), std::ssize(keep_rows));
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

// Each layout's mask against dropout_keeps (the library's Threefry), in
// float and double: rows whose elements fill 0, 1, 4, 5 and more blocks of
// 64 and end in a partial one; rows at global ids far apart (whole-block
// rows at cols = 64 and 128, a draw per element otherwise), flat indices
// beyond 2^32, a step beyond 32 bits.
template <typename T>
void expect_layouts_match_library() {
  const DropoutKey key{.seed = (uint64_t{9} << 40) | 5, .step = (uint64_t{3} << 32) | 8, .op = 4};
  const double p = 0.45;
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t cols : {1, 3, 16, 64, 100, 128}) {
    for (int64_t rows : {1, 2, 5, 17, 41, 333}) {
      std::vector<int64_t> far(rows);
      for (int64_t r = 0; r < rows; ++r) far[r] = r % 3 == 0 ? (int64_t{1} << 33) + 7 * r : rows - r;
      for (const bool global : {false, true}) {
        std::vector<T> x(rows * cols), y(x.size());
        std::vector<uint8_t> keep(x.size(), 7);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(1 + i % 97);
        dropout_forward<T>(key, p, cols, global ? std::span<const int64_t>(far) : std::span<const int64_t>(),
                           x, y, keep);
        for (int64_t r = 0; r < rows; ++r) {
          const uint64_t row = global ? static_cast<uint64_t>(far[r]) : static_cast<uint64_t>(r);
          for (int64_t c = 0; c < cols; ++c) {
            const std::size_t i = r * cols + c;
            const bool kept = dropout_keeps(key, p, row, c, cols);
            ASSERT_EQ(y[i], kept ? x[i] * scale : T(0))
                << "cols " << cols << ", rows " << rows << ", global " << global << ", (" << r
                << ", " << c << ")";
            ASSERT_EQ(keep[i], kept ? 1 : 0) << "keep, cols " << cols << ", (" << r << ", " << c << ")";
          }
        }
      }
    }
  }
}

TEST(Dropout, EveryLayoutKeepsWhatTheLibrarysDrawsKeep) {
  expect_layouts_match_library<float>();
  expect_layouts_match_library<double>();
}

// Sparse values against dropout_keeps: entries in row order and shuffled,
// rows at their own ids and at global ids beyond 2^32 flat indices, more
// and fewer than 64 values (the lanes' kChains draws and the tail).
TEST(SparseDropout, StoredValuesKeepWhatTheDenseMaskKeeps) {
  const DropoutKey key{.seed = 77, .step = 12, .op = 6};
  const double p = 0.35;
  const int64_t n = 90, k = 300;
  for (const bool shuffled : {false, true}) {
    std::vector<int32_t> row, col;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        if ((r * 31 + c * 17) % 11 == 0) row.push_back(static_cast<int32_t>(r)), col.push_back(static_cast<int32_t>(c));
      }
    }
    if (shuffled) {
      for (std::size_t i = 0; i + 1 < row.size(); i += 2) {
        std::swap(row[i], row[row.size() - 1 - i]);
        std::swap(col[i], col[col.size() - 1 - i]);
      }
    }
    const auto csr = Csr<int32_t>::build(row, n, col, k);
    ASSERT_EQ(csr.edges_in_row_order(), !shuffled);
    std::vector<int64_t> far(n);
    for (int64_t r = 0; r < n; ++r) far[r] = (int64_t{1} << 30) * (r % 4) + r;
    for (const bool global : {false, true}) {
      std::vector<float> v(row.size()), out(row.size());
      for (std::size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>(e + 1);
      sparse_dropout_forward<float, int32_t>(
          key, p, csr, global ? std::span<const int64_t>(far) : std::span<const int64_t>(), v, out);
      for (std::size_t e = 0; e < v.size(); ++e) {
        const uint64_t r = global ? static_cast<uint64_t>(far[row[e]]) : static_cast<uint64_t>(row[e]);
        const float want = dropout_keeps(key, p, r, col[e], k) ? v[e] * static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
        ASSERT_EQ(out[e], want) << "shuffled " << shuffled << ", global " << global << ", value " << e;
      }
    }
  }
}

TEST(Dropout, OpIdBeyond32BitsAndFlatIndicesBeyond2To64AreErrors) {
  std::vector<float> y(kCols);
  const DropoutKey wide_op{.seed = 1, .step = 1, .op = uint64_t{1} << 32};
  EXPECT_THROW(dropout_forward<float>(wide_op, 0.5, kCols, {}, ones(kCols), y), OpError);
  EXPECT_THROW(dropout_keeps(wide_op, 0.5, 0, 0, 1), OpError);
  EXPECT_THROW(dropout_keeps({}, 0.5, 0, 5, 5), OpError);  // col not below cols
  EXPECT_THROW(dropout_keeps({}, 0.5, uint64_t{1} << 62, 0, 8), OpError);
  EXPECT_NO_THROW(dropout_keeps({}, 0.5, (uint64_t{1} << 61) - 1, 7, 8));
  // A global row whose elements' flat indices pass 2^64, named.
  const std::vector<int64_t> rows = {3, int64_t{1} << 62};
  std::vector<float> two(2 * 8);
  try {
    dropout_forward<float>({}, 0.5, 8, rows, ones(two.size()), two);
    FAIL() << "no error";
  } catch (const OpError& e) {
    EXPECT_NE(std::string(e.what()).find("global_rows[1] = 4611686018427387904"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gnnrt::ops
