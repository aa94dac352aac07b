#include "ops/dropout.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/rng.h"
#include "ops/threefry.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

// Element k of the flat index space (global row * cols + column) takes word
// word_of(k) of draw draw_of(k): k = 64 b + 16 w + l is word w of draw
// 16 b + l. So the 16 draws of a block of 64 elements sit in the 16 lanes of
// one vector register, and their four words are the block's four runs of 16
// elements: no shuffle between drawing and masking.
constexpr uint64_t draw_of(uint64_t k) { return (k >> 6 << 4) | (k & 15); }
constexpr uint32_t word_of(uint64_t k) { return static_cast<uint32_t>(k >> 4) & 3; }
constexpr int64_t kBlock = 64;        // elements of 16 draws
constexpr uint32_t kBlockDraws = 16;

// The generator's key for a dropout: (seed low, seed high, op, step low)
// words; draw d's counter is (d low, d high, 0, step high).
Words32 generator_key(const DropoutKey& key) {
  return {static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32),
          static_cast<uint32_t>(key.op), static_cast<uint32_t>(key.step)};
}
uint32_t step_high(const DropoutKey& key) { return static_cast<uint32_t>(key.step >> 32); }

// u >= p  <=>  r >= ceil(p * 2^32): r * 2^-32 is exact in double, so the
// integer comparison keeps exactly the elements the uniform would.
uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ceil(p * 4294967296.0)); }

// What every dropout kernel applies: the keep threshold of p and the scale of
// kept values, after checking p and the key. A threshold of 2^32 (p = 1, or
// so close to it that no 32-bit draw reaches it) keeps nothing: drop_all.
template <typename T>
struct Mask {
  T scale;
  uint32_t threshold;
  bool drop_all;

  Mask(std::string_view op, const DropoutKey& key, double p) {
    if (!(p >= 0.0 && p <= 1.0)) {
      throw OpError(op, "p = " + std::to_string(p) + " is outside [0, 1]");
    }
    if (key.op >> 32 != 0) {
      throw OpError(op, "key op = " + std::to_string(key.op) + " does not fit in 32 bits");
    }
    scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const uint64_t t = keep_threshold(p);
    drop_all = t > std::numeric_limits<uint32_t>::max();
    threshold = drop_all ? 0 : static_cast<uint32_t>(t);
  }
  // x scaled if its 32-bit draw keeps it, else +0.0, without a branch (one
  // mispredicts half the time on a random mask) and without multiplying
  // (NaN * 0 is NaN).
  T operator()(uint32_t draw, T x) const { return apply(draw >= threshold, x); }
  // x scaled if kept, else +0.0, branch-free as above.
  T apply(bool kept, T x) const {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    return std::bit_cast<T>(std::bit_cast<Bits>(x * scale) & (Bits{0} - static_cast<Bits>(kept)));
  }
};

// Where a kernel records which elements it kept (dropout_forward's `keep`,
// one byte per element, 1 = kept), or nothing when kKeep is false. Kernels
// store through a local __restrict pointer: a byte store may alias anything,
// and without it GCC reloaded every operand after each store and vectorised
// nothing.
template <bool kKeep>
struct KeepOut {
  uint8_t* bytes;
  KeepOut at(int64_t offset) const { return {kKeep ? bytes + offset : nullptr}; }
};

// Checks that every element's flat index (global row * cols + col) fits in
// 64 bits, OpError naming the first row beyond; returns the flat index space
// the rows reach: (largest global row + 1) * cols.
uint64_t expect_rows_fit(std::string_view op, int64_t cols, std::span<const int64_t> global_rows,
                         int64_t rows) {
  if (cols == 0 || rows == 0) return 0;
  const auto cols_u = static_cast<uint64_t>(cols);
  const uint64_t limit = (std::numeric_limits<uint64_t>::max() - cols_u + 1) / cols_u;
  if (global_rows.empty()) {
    if (static_cast<uint64_t>(rows - 1) > limit) {
      throw OpError(op, std::to_string(rows) + " rows of " + std::to_string(cols) +
                            " columns exceed 2^64 elements");
    }
    return static_cast<uint64_t>(rows) * cols_u;
  }
  uint64_t highest = 0;
  for (std::size_t r = 0; r < global_rows.size(); ++r) {
    const auto row = static_cast<uint64_t>(global_rows[r]);
    if (row > limit) {
      throw OpError(op, "global_rows[" + std::to_string(r) + "] = " +
                            std::to_string(global_rows[r]) + ": row * " + std::to_string(cols) +
                            " columns exceeds 2^64 elements");
    }
    highest = std::max(highest, row);
  }
  return (highest + 1) * cols_u;
}

// Independent draws per lane (ops/threefry.h): their four words each are
// the loop's live state. Four fill half of AVX-512's 32 registers; with
// AVX2's 16, four chains' 16 words spill to the stack, so AVX2 runs two
// (docs/kernels.md). The chain count does not change the bits.
constexpr int kChains = detail::kVectorRegisters >= 32 ? 4 : 2;

// Draws d0 + l + 16 j of lane l, j < N: their four words in x[.][j].
template <int N>
[[gnu::always_inline]] inline void draw_lane(const detail::ThreefryKey& ks, uint32_t c3,
                                             uint64_t d0, uint32_t l, uint32_t (&x)[4][N]) {
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) {
    const uint64_t d = d0 + l + kBlockDraws * static_cast<uint64_t>(j);
    x[0][j] = static_cast<uint32_t>(d), x[1][j] = static_cast<uint32_t>(d >> 32);
    x[2][j] = 0, x[3][j] = c3;
  }
  detail::threefry_rounds<N>(ks, x);
}

// Blocks [b0, b1) of the flat index space (elements 64 b0 .. 64 b1), from
// x to o (element 64 b0 at x[0] and o[0]): a block's 16 draws in the lanes,
// each word masking 16 consecutive elements; kChains blocks at a time.
template <typename T, bool kKeep>
[[gnu::target("prefer-vector-width=512")]] void mask_blocks(const detail::ThreefryKey& key,
                                                             uint32_t c3, const Mask<T>& mask,
                                                             uint64_t b0, uint64_t b1,
                                                             const T* __restrict x,
                                                             T* __restrict o, KeepOut<kKeep> keep) {
  const detail::ThreefryKey ks = key;  // a local: the loop keeps it in registers
  const auto run = [&]<int N>(uint64_t b) {
    const int64_t first = static_cast<int64_t>(b - b0) * kBlock;
    const T* __restrict xb = x + first;
    T* __restrict ob = o + first;
    // Kept flags as 32-bit lanes first, narrowed to bytes after the loop:
    // byte stores in the drawing loop made GCC vectorise it only 4 lanes
    // wide.
    uint32_t kept_lanes[kKeep ? N * kBlock : 1];
#pragma omp simd
    for (uint32_t l = 0; l < kBlockDraws; ++l) {
      uint32_t w[4][N];
      draw_lane<N>(ks, c3, b * kBlockDraws, l, w);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) {
#pragma GCC unroll 4
        for (int word = 0; word < 4; ++word) {
          const int64_t i = j * kBlock + word * kBlockDraws + l;
          const bool kept = w[word][j] >= mask.threshold;
          ob[i] = mask.apply(kept, xb[i]);
          if constexpr (kKeep) kept_lanes[i] = kept;
        }
      }
    }
    if constexpr (kKeep) {
      uint8_t* __restrict kb = keep.at(first).bytes;
      for (int64_t i = 0; i < N * kBlock; ++i) kb[i] = static_cast<uint8_t>(kept_lanes[i]);
    }
  };
  uint64_t b = b0;
  for (; b + kChains <= b1; b += kChains) run.template operator()<kChains>(b);
  for (; b < b1; ++b) run.template operator()<1>(b);
}

// Elements [k0, k0 + n) of the flat index space, from x to o, any k0 and n:
// the whole blocks through mask_blocks, the partial ones at either end
// element by element from their block's 16 draws.
template <typename T, bool kKeep>
void mask_range(const detail::ThreefryKey& ks, uint32_t c3, const Mask<T>& mask, uint64_t k0,
                int64_t n, const T* x, T* o, KeepOut<kKeep> keep) {
  const uint64_t k1 = k0 + static_cast<uint64_t>(n);
  const uint64_t first_whole = (k0 + kBlock - 1) / kBlock, end_whole = k1 / kBlock;
  const auto partial = [&](uint64_t from, uint64_t to) {  // within one block
    if (from >= to) return;
    uint32_t words[4][kBlockDraws];
    for (uint32_t l = 0; l < kBlockDraws; ++l) {
      uint32_t w[4][1];
      draw_lane<1>(ks, c3, from / kBlock * kBlockDraws, l, w);
      for (int word = 0; word < 4; ++word) words[word][l] = w[word][0];
    }
    for (uint64_t k = from; k < to; ++k) {
      const bool kept = words[word_of(k)][k & 15] >= mask.threshold;
      o[k - k0] = mask.apply(kept, x[k - k0]);
      if constexpr (kKeep) keep.bytes[k - k0] = static_cast<uint8_t>(kept);
    }
  };
  if (first_whole >= end_whole) {  // no whole block: at most two partial ones
    const uint64_t split = std::min(k1, first_whole * kBlock);
    partial(k0, split);
    partial(split, k1);
    return;
  }
  partial(k0, first_whole * kBlock);
  const uint64_t skip = first_whole * kBlock - k0;
  mask_blocks(ks, c3, mask, first_whole, end_whole, x + skip, o + skip,
              keep.at(static_cast<int64_t>(skip)));
  partial(end_whole * kBlock, k1);
}

// Element k's word, for loops that draw element by element (vectorised
// across elements, each lane its own draw).
[[gnu::always_inline]] inline uint32_t element_word(const detail::ThreefryKey& ks, uint32_t c3,
                                                    uint64_t k) {
  const uint64_t d = draw_of(k);
  uint32_t w[4][1] = {{static_cast<uint32_t>(d)}, {static_cast<uint32_t>(d >> 32)}, {0}, {c3}};
  detail::threefry_rounds<1>(ks, w);
  const uint32_t word = word_of(k);
  return word == 0 ? w[0][0] : word == 1 ? w[1][0] : word == 2 ? w[2][0] : w[3][0];
}

// Elements with flat indices k[0, n), from x to o (element i at x[i],
// o[i]), a draw per element, each lane drawing for kChains elements 16
// apart; kept flags narrowed to bytes after each loop (as in mask_blocks).
// K: the indices' type (uint32_t when they fit, as in mask_values).
template <typename T, typename K, bool kKeep>
[[gnu::target("prefer-vector-width=512")]] void mask_indices(
    const detail::ThreefryKey& key, uint32_t c3, const Mask<T>& mask, const K* __restrict k,
    int64_t n, const T* __restrict x, T* __restrict o, KeepOut<kKeep> keep) {
  const detail::ThreefryKey ks = key;
  constexpr int64_t kStep = kChains * kBlockDraws;
  uint32_t kept_lanes[kKeep ? kStep : 1];
  const auto narrow = [&](int64_t i0, int64_t m) {
    if constexpr (kKeep) {
      uint8_t* __restrict kb = keep.bytes + i0;
      for (int64_t i = 0; i < m; ++i) kb[i] = static_cast<uint8_t>(kept_lanes[i]);
    }
  };
  int64_t i0 = 0;
  for (; i0 + kStep <= n; i0 += kStep) {
#pragma omp simd
    for (int64_t l = 0; l < kBlockDraws; ++l) {
      uint32_t w[4][kChains];
#pragma GCC unroll 8
      for (int j = 0; j < kChains; ++j) {
        const K kj = k[i0 + l + kBlockDraws * j];
        const K d = (kj >> 6 << 4) | (kj & 15);  // draw_of
        w[0][j] = static_cast<uint32_t>(d);
        w[1][j] = static_cast<uint32_t>(static_cast<uint64_t>(d) >> 32);
        w[2][j] = 0, w[3][j] = c3;
      }
      detail::threefry_rounds<kChains>(ks, w);
#pragma GCC unroll 8
      for (int j = 0; j < kChains; ++j) {
        const int64_t i = i0 + l + kBlockDraws * j;
        const auto word = static_cast<uint32_t>(k[i] >> 4) & 3;  // word_of
        const uint32_t r = word == 0 ? w[0][j] : word == 1 ? w[1][j] : word == 2 ? w[2][j] : w[3][j];
        const bool kept = r >= mask.threshold;
        o[i] = mask.apply(kept, x[i]);
        if constexpr (kKeep) kept_lanes[i - i0] = kept;
      }
    }
    narrow(i0, kStep);
  }
#pragma omp simd
  for (int64_t i = i0; i < n; ++i) {  // the last < kStep, a draw per lane
    const bool kept = element_word(ks, c3, k[i]) >= mask.threshold;
    o[i] = mask.apply(kept, x[i]);
    if constexpr (kKeep) kept_lanes[i - i0] = kept;
  }
  narrow(i0, n - i0);
}

// Rows [r0, r1) of a dense [rows, cols] matrix whose rows are the global
// rows global_rows[r], a draw per element: the elements' flat indices in a
// per-thread buffer, then mask_indices over them.
template <typename T, typename K, bool kKeep>
void mask_rows(const detail::ThreefryKey& ks, uint32_t c3, const Mask<T>& mask, int64_t cols,
               const int64_t* global_rows, int64_t r0, int64_t r1, const T* x, T* o,
               KeepOut<kKeep> keep) {
  thread_local std::vector<K> flat;
  const auto n = static_cast<std::size_t>((r1 - r0) * cols);
  if (flat.size() < n) flat.resize(n);
  K* __restrict k = flat.data();
  const auto w = static_cast<K>(cols);
  if (cols == 1) {  // one attention head: the rows are the elements
    for (int64_t r = r0; r < r1; ++r) k[r - r0] = static_cast<K>(global_rows[r]);
  } else if (cols < kBlockDraws) {  // narrow rows: one flat loop, no loop per row
    K base = static_cast<K>(global_rows[r0]) * w, c = 0;
    int64_t r = r0;
    for (std::size_t i = 0; i < n; ++i) {
      k[i] = base + c;
      if (++c == w) c = 0, base = ++r < r1 ? static_cast<K>(global_rows[r]) * w : 0;
    }
  } else {
    for (int64_t r = r0; r < r1; ++r) {
      const K k0 = static_cast<K>(global_rows[r]) * w;
      K* __restrict kr = k + (r - r0) * cols;
      for (int64_t c = 0; c < cols; ++c) kr[c] = k0 + static_cast<K>(c);
    }
  }
  mask_indices<T, K, kKeep>(ks, c3, mask, k, static_cast<int64_t>(n), x + r0 * cols, o + r0 * cols,
                            keep.at(r0 * cols));
}

// Stored values at CSR positions [q0, q1), a draw per value: value e =
// entry[q] (q itself when kInOrder) of row row_of[e] and column col[q], the
// element (global row, col) of the dense [*, cols] matrix. Each lane draws
// for kChains values 16 positions apart. K: the flat index's type, uint32_t
// when the rows' elements number at most 2^32 (then each lane's index
// arithmetic is one 32-bit operation, not two halves of 64-bit ones).
template <typename T, typename I, typename K, bool kInOrder, bool kGlobal>
[[gnu::target("prefer-vector-width=512")]] void mask_values(
    const detail::ThreefryKey& key, uint32_t c3, const Mask<T>& mask, K cols,
    const I* __restrict row_of, const I* __restrict col, const I* __restrict entry,
    const int64_t* __restrict global_rows, int64_t q0, int64_t q1, const T* __restrict v,
    T* __restrict o) {
  const detail::ThreefryKey ks = key;
  const auto run = [&]<int N>(int64_t base) {
#pragma omp simd
    for (int64_t l = 0; l < kBlockDraws; ++l) {
      K k[N];
      uint32_t w[4][N];
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) {
        const int64_t q = base + l + kBlockDraws * j;
        const int64_t e = kInOrder ? q : static_cast<int64_t>(entry[q]);
        const I r = row_of[e];
        const K row = kGlobal ? static_cast<K>(global_rows[r]) : static_cast<K>(r);
        k[j] = row * cols + static_cast<K>(col[q]);
        const K d = (k[j] >> 6 << 4) | (k[j] & 15);  // draw_of
        w[0][j] = static_cast<uint32_t>(d);
        w[1][j] = static_cast<uint32_t>(static_cast<uint64_t>(d) >> 32);
        w[2][j] = 0, w[3][j] = c3;
      }
      detail::threefry_rounds<N>(ks, w);
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) {
        const int64_t q = base + l + kBlockDraws * j;
        const int64_t e = kInOrder ? q : static_cast<int64_t>(entry[q]);
        const auto word = static_cast<uint32_t>(k[j] >> 4) & 3;  // word_of
        const uint32_t r = word == 0 ? w[0][j] : word == 1 ? w[1][j] : word == 2 ? w[2][j] : w[3][j];
        o[e] = mask(r, v[e]);
      }
    }
  };
  int64_t q = q0;
  for (; q + kChains * kBlockDraws <= q1; q += kChains * kBlockDraws) run.template operator()<kChains>(q);
#pragma omp simd
  for (int64_t t = q; t < q1; ++t) {  // the last < kChains * 16 values, a draw per lane
    const int64_t e = kInOrder ? t : static_cast<int64_t>(entry[t]);
    const I r = row_of[e];
    const K row = kGlobal ? static_cast<K>(global_rows[r]) : static_cast<K>(r);
    o[e] = mask(element_word(ks, c3, row * cols + static_cast<K>(col[t])), v[e]);
  }
}

constexpr int64_t kParallel = 1 << 14;  // elements below which one thread masks

// reach: the flat index space the rows reach (expect_rows_fit).
template <typename T, bool kKeep>
void mask_dense(const DropoutKey& key, const Mask<T>& mask, int64_t cols,
                std::span<const int64_t> global_rows, int64_t rows, uint64_t reach, const T* x,
                T* o, KeepOut<kKeep> keep) {
  const int64_t n = rows * cols;
  const detail::ThreefryKey ks(generator_key(key));
  const uint32_t c3 = step_high(key);
  if (global_rows.empty()) {  // row r is global row r: elements 0 .. n, in order
    detail::for_blocks(n, 16 * kBlock, n > kParallel, [&, ks](int64_t begin, int64_t end) {
      mask_range(ks, c3, mask, static_cast<uint64_t>(begin), end - begin, x + begin, o + begin,
                 keep.at(begin));
    });
    return;
  }
  const auto cols_u = static_cast<uint64_t>(cols);
  if (cols % kBlock == 0) {  // every row whole blocks
    const int64_t rows_per = std::max<int64_t>(1, 16 * kBlock / cols);
    detail::for_blocks(rows, rows_per, n > kParallel, [&, ks](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint64_t b = static_cast<uint64_t>(global_rows[r]) * cols_u / kBlock;
        mask_blocks(ks, c3, mask, b, b + cols_u / kBlock, x + r * cols, o + r * cols,
                    keep.at(r * cols));
      }
    });
    return;
  }
  // A draw per element: rows of other widths share their blocks with rows
  // that may be elsewhere.
  const int64_t rows_per = std::max<int64_t>(1, 16 * kBlock / cols);
  const bool narrow = reach <= (uint64_t{1} << 32);
  detail::for_blocks(rows, rows_per, n > kParallel, [&, ks](int64_t r0, int64_t r1) {
    if (narrow) {
      mask_rows<T, uint32_t>(ks, c3, mask, cols, global_rows.data(), r0, r1, x, o, keep);
    } else {
      mask_rows<T, uint64_t>(ks, c3, mask, cols, global_rows.data(), r0, r1, x, o, keep);
    }
  });
}

}  // namespace

bool dropout_keeps(const DropoutKey& key, double p, uint64_t global_row, uint64_t col,
                   uint64_t cols) {
  constexpr std::string_view op = "dropout_keeps";
  const Mask<float> mask(op, key, p);
  if (col >= cols) {
    throw OpError(op, "col = " + std::to_string(col) + " is not below cols = " + std::to_string(cols));
  }
  const int64_t row = static_cast<int64_t>(global_row);
  expect_rows_fit(op, static_cast<int64_t>(cols), std::span<const int64_t>(&row, 1), 1);
  if (mask.drop_all) return false;
  const uint64_t k = global_row * cols + col;
  const uint64_t d = draw_of(k);
  const Words32 w = threefry(generator_key(key), {static_cast<uint32_t>(d),
                                                  static_cast<uint32_t>(d >> 32), 0, step_high(key)});
  return w[word_of(k)] >= mask.threshold;
}

template <typename T>
void dropout_forward(const DropoutKey& key, double p, int64_t cols,
                     std::span<const int64_t> global_rows, std::span<const T> x, std::span<T> out,
                     std::span<uint8_t> keep) {
  constexpr std::string_view op = "dropout";
  const Mask<T> mask(op, key, p);
  expect_non_negative(op, "cols", cols);
  if (cols == 0) {
    if (!x.empty()) throw OpError(op, "cols is 0 but x is not empty");
    expect_size(op, "out", out.size(), 0, "0");
    if (!keep.empty()) expect_size(op, "keep", keep.size(), 0, "0");
    return;
  }
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  expect_size(op, "x", x.size(), rows * cols, "rows*cols");
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  if (!keep.empty()) expect_size(op, "keep", keep.size(), rows * cols, "rows*cols");
  if (!global_rows.empty()) expect_size(op, "global_rows", global_rows.size(), rows, "rows");
  const uint64_t reach = expect_rows_fit(op, cols, global_rows, rows);
  if (mask.drop_all) {
    std::fill(out.begin(), out.end(), T(0));
    std::fill(keep.begin(), keep.end(), uint8_t{0});
    return;
  }
  if (keep.empty()) {
    mask_dense(key, mask, cols, global_rows, rows, reach, x.data(), out.data(),
               KeepOut<false>{nullptr});
  } else {
    mask_dense(key, mask, cols, global_rows, rows, reach, x.data(), out.data(),
               KeepOut<true>{keep.data()});
  }
}

template <typename T>
void dropout_backward(double p, std::span<const uint8_t> keep, std::span<const T> grad_out,
                      std::span<T> grad_x) {
  constexpr std::string_view op = "dropout_backward";
  const Mask<T> mask(op, {}, p);
  expect_size(op, "grad_out", grad_out.size(), static_cast<int64_t>(keep.size()), "len(keep)");
  expect_size(op, "grad_x", grad_x.size(), static_cast<int64_t>(keep.size()), "len(keep)");
  const uint8_t* k = keep.data();
  const T* g = grad_out.data();
  T* o = grad_x.data();
  const auto n = static_cast<int64_t>(keep.size());
  // Bytes widened to 32-bit lanes a block at a time, then the masked loop
  // (one loop mixing bytes and floats vectorised 4 lanes wide).
  detail::for_blocks(n, 16 * kBlock, n > 4 * kParallel, [=](int64_t begin, int64_t end) {
    const uint8_t* __restrict kb = k;
    const T* __restrict gb = g;
    T* __restrict ob = o;
    uint32_t lanes[kBlock];
    for (int64_t i0 = begin; i0 < end; i0 += kBlock) {
      const int64_t m = std::min(kBlock, end - i0);
      for (int64_t i = 0; i < m; ++i) lanes[i] = kb[i0 + i];
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) ob[i0 + i] = mask.apply(lanes[i] != 0, gb[i0 + i]);
    }
  });
}

template <typename T, typename I>
void sparse_dropout_forward(const DropoutKey& key, double p, const Csr<I>& rows,
                            std::span<const int64_t> global_rows, std::span<const T> values,
                            std::span<T> out) {
  constexpr std::string_view op = "sparse_dropout";
  const Mask<T> mask(op, key, p);
  const int64_t n = rows.num_rows();
  expect_size(op, "values", values.size(), rows.num_edges(), "E (stored values)");
  expect_size(op, "out", out.size(), rows.num_edges(), "E (stored values)");
  if (!global_rows.empty()) expect_size(op, "global_rows", global_rows.size(), n, "rows");
  const bool narrow = expect_rows_fit(op, rows.num_cols(), global_rows, n) <= (uint64_t{1} << 32);
  if (mask.drop_all) {
    std::fill(out.begin(), out.end(), T(0));
    return;
  }
  const detail::ThreefryKey ks(generator_key(key));
  const uint32_t c3 = step_high(key);
  const I* row_of = rows.row_of_edge().data();
  const I* col = rows.col().data();
  const I* entry = rows.edge().data();
  const T* v = values.data();
  T* o = out.data();
  const int64_t count = rows.num_edges();
  const bool in_order = rows.edges_in_row_order(), global = !global_rows.empty();
  // Values sharing a draw draw it twice, which costs less than finding them.
  detail::for_blocks(count, 16 * kBlock, count > kParallel, [&, ks](int64_t q0, int64_t q1) {
    const auto run = [&]<typename K, bool kInOrder, bool kGlobal>() {
      mask_values<T, I, K, kInOrder, kGlobal>(ks, c3, mask, static_cast<K>(rows.num_cols()),
                                              row_of, col, entry, global_rows.data(), q0, q1, v, o);
    };
    const auto by_order = [&]<typename K>() {
      if (in_order && !global) run.template operator()<K, true, false>();
      else if (in_order) run.template operator()<K, true, true>();
      else if (!global) run.template operator()<K, false, false>();
      else run.template operator()<K, false, true>();
    };
    if (narrow) by_order.template operator()<uint32_t>();
    else by_order.template operator()<uint64_t>();
  });
}

#define GNNRT_INSTANTIATE(T)                                                                   \
  template void dropout_forward<T>(const DropoutKey&, double, int64_t, std::span<const int64_t>, \
                                   std::span<const T>, std::span<T>, std::span<uint8_t>);      \
  template void dropout_backward<T>(double, std::span<const uint8_t>, std::span<const T>,      \
                                    std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)
#undef GNNRT_INSTANTIATE

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sparse_dropout_forward<T, I>(const DropoutKey&, double, const Csr<I>&,       \
                                             std::span<const int64_t>, std::span<const T>, \
                                             std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
