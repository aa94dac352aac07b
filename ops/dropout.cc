#include "ops/dropout.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <type_traits>
#include <string>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/rng.h"

namespace gnnrt::ops {
namespace {

constexpr int64_t kColsPerDraw = 4;  // a Threefry4x32 draw: four 32-bit uniforms

// The widest column count whose blocks fit the counter's 32-bit block word.
constexpr int64_t kMaxCols = kColsPerDraw << 32;

// The generator's key for a dropout: (seed low, seed high, op, step low)
// words; a draw's counter is (row low, row high, column block, step high).
Words32 generator_key(const DropoutKey& key) {
  return {static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32),
          static_cast<uint32_t>(key.op), static_cast<uint32_t>(key.step)};
}

// The four 32-bit draws r for columns [4 * block, 4 * block + 4) of one row;
// column j's uniform is u = r[j] * 2^-32.
Words32 draws(const DropoutKey& key, uint64_t row, uint64_t block) {
  return threefry(generator_key(key),
                  {static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32),
                   static_cast<uint32_t>(block), static_cast<uint32_t>(key.step >> 32)});
}

// A chunk's draws, made together (ops/rng.h threefry_many): counters as
// four arrays, then the words of each, in per-thread arrays that only grow.
// Every block of the chunk gets its draw, zeros or not: finding the blocks
// that need none cost more (a branch per block) than the draws it saved.
struct DrawBatch {
  std::array<std::vector<uint32_t>, 4> counters, words;

  // Room for n draws; every counter's step word set.
  void start(std::size_t n, const DropoutKey& key) {
    if (counters[0].size() < n) {
      for (auto& c : counters) c.resize(n);
      for (auto& w : words) w.resize(n);
    }
    std::fill_n(counters[3].begin(), n, static_cast<uint32_t>(key.step >> 32));
  }
  void draw(const DropoutKey& key, std::size_t n) {
    threefry_many(generator_key(key),
                  {counters[0].data(), counters[1].data(), counters[2].data(), counters[3].data()},
                  {words[0].data(), words[1].data(), words[2].data(), words[3].data()},
                  static_cast<int64_t>(n));
  }
};

DrawBatch& thread_batch() {
  thread_local DrawBatch batch;
  return batch;
}

// The sparse dropout's counterpart: counters without their constant step
// word, each one's word (ops/rng.h threefry_pick), and the drawn words.
struct PickBatch {
  std::array<std::vector<uint32_t>, 3> counters;
  std::vector<uint8_t> pick;
  std::vector<uint32_t> words;

  void start(std::size_t n) {
    if (words.size() >= n) return;
    for (auto& c : counters) c.resize(n);
    pick.resize(n);
    words.resize(n);
  }
};

PickBatch& thread_pick_batch() {
  thread_local PickBatch batch;
  return batch;
}

constexpr int64_t kRowChunk = 64;  // rows whose draws are made together

// u >= p  <=>  r >= ceil(p * 2^32): r * 2^-32 is exact in double, so the
// integer comparison keeps exactly the elements the uniform would.
uint64_t keep_threshold(double p) { return static_cast<uint64_t>(std::ceil(p * 4294967296.0)); }

// What both dropout kernels apply: the keep threshold of p and the scale of
// kept values, after checking p.
template <typename T>
struct Mask {
  T scale;
  uint64_t threshold;

  Mask(std::string_view op, const DropoutKey& key, double p) {
    if (!(p >= 0.0 && p <= 1.0)) {
      throw OpError(op, "p = " + std::to_string(p) + " is outside [0, 1]");
    }
    if (key.op >> 32 != 0) {
      throw OpError(op, "key op = " + std::to_string(key.op) + " does not fit in 32 bits");
    }
    scale = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    threshold = keep_threshold(p);
  }
  // x scaled if its 32-bit draw keeps it, else +0.0, without a branch (one
  // mispredicts half the time on a random mask) and without multiplying
  // (NaN * 0 is NaN).
  T operator()(uint32_t draw, T x) const {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    return std::bit_cast<T>(std::bit_cast<Bits>(x * scale) &
                            (Bits{0} - static_cast<Bits>(draw >= threshold)));
  }
};

// Row r's global id: global_rows[r], or r when there are none.
uint64_t global_row(std::span<const int64_t> global_rows, int64_t r) {
  return global_rows.empty() ? static_cast<uint64_t>(r) : static_cast<uint64_t>(global_rows[r]);
}

template <typename T>
void apply_mask(std::string_view op, const DropoutKey& key, double p, int64_t cols,
                std::span<const int64_t> global_rows, std::span<const T> in, std::span<T> out) {
  const Mask<T> mask(op, key, p);
  expect_non_negative(op, "cols", cols);
  if (cols == 0) {
    if (!in.empty()) throw OpError(op, "cols is 0 but x is not empty");
    expect_size(op, "out", out.size(), 0, "0");
    return;
  }
  const int64_t rows = static_cast<int64_t>(in.size()) / cols;
  expect_size(op, "x", in.size(), rows * cols, "rows*cols");
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  if (!global_rows.empty()) expect_size(op, "global_rows", global_rows.size(), rows, "rows");
  if (cols > kMaxCols) throw OpError(op, "cols = " + std::to_string(cols) + " exceeds 2^34");
  const int64_t blocks = (cols + kColsPerDraw - 1) / kColsPerDraw;
  const T* __restrict x = in.data();
  T* __restrict o = out.data();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 14))
  for (int64_t r0 = 0; r0 < rows; r0 += kRowChunk) {
    const int64_t r1 = std::min(rows, r0 + kRowChunk);
    const auto n = static_cast<std::size_t>((r1 - r0) * blocks);
    DrawBatch& batch = thread_batch();
    batch.start(n, key);
    uint32_t* __restrict row_low = batch.counters[0].data();
    uint32_t* __restrict row_high = batch.counters[1].data();
    uint32_t* __restrict block = batch.counters[2].data();
    for (int64_t r = r0; r < r1; ++r) {
      const uint64_t row = global_row(global_rows, r);
      const int64_t i0 = (r - r0) * blocks;
      for (int64_t b = 0; b < blocks; ++b) {
        row_low[i0 + b] = static_cast<uint32_t>(row);
        row_high[i0 + b] = static_cast<uint32_t>(row >> 32);
        block[i0 + b] = static_cast<uint32_t>(b);
      }
    }
    batch.draw(key, n);
    const uint32_t* __restrict w0 = batch.words[0].data();
    const uint32_t* __restrict w1 = batch.words[1].data();
    const uint32_t* __restrict w2 = batch.words[2].data();
    const uint32_t* __restrict w3 = batch.words[3].data();
    const T* xc = x + r0 * cols;
    T* oc = o + r0 * cols;
    if (cols % kColsPerDraw == 0) {
      // Draw i covers the chunk's elements [4i, 4i + 4): one loop over the
      // whole chunk, vectorised however narrow its rows.
      for (std::size_t i = 0; i < n; ++i) {
        oc[4 * i] = mask(w0[i], xc[4 * i]);
        oc[4 * i + 1] = mask(w1[i], xc[4 * i + 1]);
        oc[4 * i + 2] = mask(w2[i], xc[4 * i + 2]);
        oc[4 * i + 3] = mask(w3[i], xc[4 * i + 3]);
      }
    } else if (cols == 1) {  // one attention head: a draw per row, its first word
      for (std::size_t i = 0; i < n; ++i) oc[i] = mask(w0[i], xc[i]);
    } else {
      for (int64_t r = 0; r < r1 - r0; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          oc[r * cols + c] = mask(batch.words[c % kColsPerDraw][r * blocks + c / kColsPerDraw],
                                  xc[r * cols + c]);
        }
      }
    }
  }
}

}  // namespace

bool dropout_keeps(const DropoutKey& key, double p, uint64_t global_row, uint64_t col) {
  const Mask<float> mask("dropout_keeps", key, p);
  if (col >= static_cast<uint64_t>(kMaxCols)) {
    throw OpError("dropout_keeps", "col = " + std::to_string(col) + " is at or beyond 2^34");
  }
  return draws(key, global_row, col / kColsPerDraw)[col % kColsPerDraw] >= mask.threshold;
}

template <typename T>
void dropout_forward(const DropoutKey& key, double p, int64_t cols,
                     std::span<const int64_t> global_rows, std::span<const T> x,
                     std::span<T> out) {
  apply_mask("dropout", key, p, cols, global_rows, x, out);
}

template <typename T>
void dropout_backward(const DropoutKey& key, double p, int64_t cols,
                      std::span<const int64_t> global_rows, std::span<const T> grad_out,
                      std::span<T> grad_x) {
  apply_mask("dropout_backward", key, p, cols, global_rows, grad_out, grad_x);
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
  if (rows.num_cols() > kMaxCols) {
    throw OpError(op, "the matrix's " + std::to_string(rows.num_cols()) + " columns exceed 2^34");
  }
  const int64_t* rp = rows.rowptr().data();
  const I* col = rows.col().data();
  const I* entry = rows.edge().data();
  const T* __restrict v = values.data();
  T* __restrict o = out.data();
#pragma omp parallel for schedule(dynamic, 1) if (rows.num_edges() > (1 << 14))
  for (int64_t r0 = 0; r0 < n; r0 += kRowChunk) {
    const int64_t r1 = std::min(n, r0 + kRowChunk);
    // A draw per stored value, keyed by its block, and of its words the one
    // of its column: values sharing a block draw the same words twice, which
    // costs less than finding them (about 6% of Cora's values share a
    // block, 20% of PubMed's).
    const int64_t q0 = rp[r0];
    const auto count = static_cast<std::size_t>(rp[r1] - q0);
    PickBatch& batch = thread_pick_batch();
    batch.start(count);
    uint32_t* __restrict row_low = batch.counters[0].data();
    uint32_t* __restrict row_high = batch.counters[1].data();
    uint32_t* __restrict block = batch.counters[2].data();
    uint8_t* __restrict pick = batch.pick.data();
    for (int64_t r = r0; r < r1; ++r) {
      const uint64_t row = global_row(global_rows, r);
      for (int64_t q = rp[r]; q < rp[r + 1]; ++q) {
        const auto c = static_cast<uint64_t>(col[q]);
        row_low[q - q0] = static_cast<uint32_t>(row);
        row_high[q - q0] = static_cast<uint32_t>(row >> 32);
        block[q - q0] = static_cast<uint32_t>(c / kColsPerDraw);
        pick[q - q0] = static_cast<uint8_t>(c % kColsPerDraw);
      }
    }
    threefry_pick(generator_key(key), {row_low, row_high, block},
                  static_cast<uint32_t>(key.step >> 32), pick, batch.words.data(),
                  static_cast<int64_t>(count));
    const uint32_t* __restrict words = batch.words.data();
    const int64_t q1 = rp[r1];
    for (int64_t q = q0; q < q1; ++q) {
      const auto e = static_cast<std::size_t>(entry[q]);
      o[e] = mask(words[q - q0], v[e]);
    }
  }
}

#define GNNRT_INSTANTIATE(T)                                                                   \
  template void dropout_forward<T>(const DropoutKey&, double, int64_t, std::span<const int64_t>, \
                                   std::span<const T>, std::span<T>);                          \
  template void dropout_backward<T>(const DropoutKey&, double, int64_t,                        \
                                    std::span<const int64_t>, std::span<const T>,              \
                                    std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)
#undef GNNRT_INSTANTIATE

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sparse_dropout_forward<T, I>(const DropoutKey&, double, const Csr<I>&,       \
                                             std::span<const int64_t>, std::span<const T>, \
                                             std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
