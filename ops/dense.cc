#include "ops/dense.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

using detail::kParallelElements;

// matmul is bitwise identical for any thread count because the work is cut
// into pieces that depend only on (m, k, n): OpenBLAS runs single-threaded
// on each piece and OpenMP threads take whole pieces. Row blocks of C for
// tall products; for a small C with a long inner dimension (a weight
// gradient X^T G), fixed depth blocks whose partial products are added in
// block order.
constexpr int64_t kRowBlock = 256;
constexpr int64_t kDepthBlock = 2048;
constexpr int64_t kMaxSplitOutput = 1 << 18;  // C elements per depth-block partial

// The depth of those blocks: kDepthBlock, or for a product with a tiny C
// and at least kShortSplitWork multiply-adds, a quarter of k (at least
// kShortDepthBlock), so that a k too short for two kDepthBlocks still gives
// every thread a piece (GAT's classifier weight gradient on Cora,
// [7, 2708] x [2708, 64], is such a product; docs/kernels.md); its four
// partials cost 512 extra additions per block.
constexpr int64_t kShortSplitOutput = 1 << 12;
constexpr int64_t kShortSplitWork = int64_t{1} << 20;
constexpr int64_t kShortDepthBlock = 512;

int64_t depth_block(int64_t m, int64_t k, int64_t n) {
  if (m * n > kShortSplitOutput || m * n * k < kShortSplitWork) return kDepthBlock;
  return std::clamp((k + 3) / 4, kShortDepthBlock, kDepthBlock);
}

// OpenBLAS's OpenMP build sizes its thread team from omp_get_max_threads()
// at each call, and its pthread build from openblas_set_num_threads; pin both
// to one thread for the duration of a call (the OpenMP setting is per thread).
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : saved_(omp_get_max_threads()) {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
    omp_set_num_threads(1);
  }
  ~SingleThreadedBlas() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

void cblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const SingleThreadedBlas pin;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void cblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  const SingleThreadedBlas pin;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// Calls fn(begin, end) over [0, n) in blocks of 4096 elements, spread over
// threads when n is large (detail::for_blocks).
template <typename Fn>
void elementwise(std::size_t n, const Fn& fn) {
  const auto size = static_cast<int64_t>(n);
  detail::for_blocks(size, int64_t{1} << 12, size > kParallelElements, fn);
}

template <typename T>
void expect_same_sizes(std::string_view op, std::span<const T> x, std::size_t out_size,
                       std::string_view out_name) {
  expect_size(op, out_name, out_size, static_cast<int64_t>(x.size()), "len(x)");
}

}  // namespace

namespace {

// c [m, n] = op(a) op(b) (+ c), m, n, k > 0, cut into pieces (above).
template <typename T>
void gemm(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, bool trans_a, bool trans_b,
          bool accumulate) {
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  const T beta = accumulate ? T(1) : T(0);

  if (m >= 2 * kRowBlock) {
    const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
    // Consecutive blocks per thread (static), like the row ranges of the
    // other kernels, so a thread's rows of C stay in its cache for the next op.
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t r0 = blk * kRowBlock;
      const int64_t rows = std::min(kRowBlock, m - r0);
      // Rows r0.. of op(a): rows of a, or columns of a stored transposed.
      const T* a0 = a + (trans_a ? r0 : r0 * k);
      cblas_gemm(trans_a, trans_b, rows, n, k, T(1), a0, lda, b, ldb, beta, c + r0 * n, n);
    }
    return;
  }
  if (const int64_t depth_step = depth_block(m, k, n);
      k >= 2 * depth_step && m * n <= kMaxSplitOutput) {
    const int64_t blocks = (k + depth_step - 1) / depth_step;
    std::vector<T> partial(blocks * m * n);
    // Consecutive depth blocks per thread (static): a thread reads the rows
    // of a and b that its row blocks of the ops before wrote.
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t k0 = blk * depth_step;
      const int64_t depth = std::min(depth_step, k - k0);
      const T* a0 = a + (trans_a ? k0 * m : k0);
      const T* b0 = b + (trans_b ? k0 : k0 * n);
      cblas_gemm(trans_a, trans_b, m, n, depth, T(1), a0, lda, b0, ldb, T(0),
                 partial.data() + blk * m * n, n);
    }
    const int64_t size = m * n;
#pragma omp parallel for if (size > kParallelElements)
    for (int64_t i = 0; i < size; ++i) {
      T sum = accumulate ? c[i] : T(0);
      for (int64_t blk = 0; blk < blocks; ++blk) sum += partial[blk * size + i];
      c[i] = sum;
    }
    return;
  }
  cblas_gemm(trans_a, trans_b, m, n, k, T(1), a, lda, b, ldb, beta, c, n);
}

// OpenBLAS computes a float product with a few rows or columns of C past
// their last multiple of 8 in slow edge kernels, so such a product runs at
// the next multiple of 8 instead: op(b) (or op(a)) copied with zero columns
// (rows), C computed into a padded buffer and its part copied out. Where the
// copies cost more than the edge kernels, it is not padded: columns of C are
// padded when n % 8 is 5-7 and k >= 32, rows when m % 8 is 7 and n >= 32
// (measurements: docs/kernels.md). Each element of C is the same dot
// product over k as before, though OpenBLAS may round it differently; the
// pieces still depend only on (m, k, n), so results stay bitwise the same
// for any thread count.
// The buffers are held per calling thread and bounded (kPadElements each,
// 3 MiB in all, outside the memory plan): a product whose padded operand
// (or, when trans_a, whose padded C) would be larger is not padded; a tall C
// is computed in blocks of rows.
constexpr int64_t kPadTo = 8;
constexpr int64_t kPadElements = int64_t{1} << 18;  // 1 MiB of floats per buffer

// The padded size of a side of C of `size` whose remainder past a multiple of
// 8 is at least `min_tail`, or the size itself.
int64_t padded(int64_t size, int64_t min_tail) {
  return size < 2 * kPadTo && size % kPadTo >= min_tail ? (size / kPadTo + 1) * kPadTo : size;
}

// op(x) [rows, cols] -> a plain [rows8, cols8] matrix, the new rows and
// columns zero (x stored [cols, rows] when trans).
template <typename T>
void pad_into(const T* x, bool trans, int64_t rows, int64_t cols, int64_t rows8, int64_t cols8,
              std::vector<T>& out) {
  out.assign(static_cast<std::size_t>(rows8 * cols8), T(0));
  T* __restrict o = out.data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) o[r * cols8 + j] = trans ? x[j * rows + r] : x[r * cols + j];
  }
}

// True when it computed c (see above); false when the product is not padded.
template <typename T>
bool padded_gemm(const T* a, const T* b, T* c, int64_t m, int64_t k, int64_t n, bool trans_a,
                 bool trans_b, bool accumulate) {
  if (!std::is_same_v<T, float> || accumulate) return false;
  thread_local std::vector<T> a8, b8, c8;
  if (const int64_t n8 = k >= 32 ? padded(n, 5) : n; n8 != n) {
    // Blocks of rows of C; one block when trans_a (a's rows are C's columns).
    const int64_t block = trans_a ? m : std::max<int64_t>(1, kPadElements / n8);
    if (k * n8 > kPadElements || (trans_a && m * n8 > kPadElements)) return false;
    pad_into(b, trans_b, k, n, k, n8, b8);
    c8.resize(static_cast<std::size_t>(std::min(m, block) * n8));
    T* __restrict cp = c8.data();
    for (int64_t r0 = 0; r0 < m; r0 += block) {
      const int64_t rows = std::min(block, m - r0);
      // When trans_a there is one block (r0 = 0): a's rows are C's columns.
      gemm(trans_a ? a : a + r0 * k, b8.data(), cp, rows, k, n8, trans_a, false, false);
      T* __restrict out = c + r0 * n;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) out[r * n + j] = cp[r * n8 + j];
      }
    }
    return true;
  }
  if (const int64_t m8 = n >= 32 ? padded(m, 7) : m; m8 != m) {
    if (m8 * k > kPadElements || m8 * n > kPadElements) return false;
    pad_into(a, trans_a, m, k, m8, k, a8);
    c8.resize(static_cast<std::size_t>(m8 * n));
    gemm(a8.data(), b, c8.data(), m8, k, n, false, trans_b, false);
    std::copy(c8.begin(), c8.begin() + m * n, c);  // C's first m rows
    return true;
  }
  return false;
}

}  // namespace

template <typename T>
void matmul(std::span<const T> a, std::span<const T> b, std::span<T> c, int64_t m, int64_t k,
            int64_t n, bool trans_a, bool trans_b, bool accumulate) {
  constexpr std::string_view op = "matmul";
  expect_non_negative(op, "m", m);
  expect_non_negative(op, "k", k);
  expect_non_negative(op, "n", n);
  expect_size(op, "a", a.size(), m * k, "m*k");
  expect_size(op, "b", b.size(), k * n, "k*n");
  expect_size(op, "c", c.size(), m * n, "m*n");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c.begin(), c.end(), T(0));
    return;
  }
  if (!padded_gemm(a.data(), b.data(), c.data(), m, k, n, trans_a, trans_b, accumulate)) {
    gemm(a.data(), b.data(), c.data(), m, k, n, trans_a, trans_b, accumulate);
  }
}

template <typename T>
void head_matmul(std::span<const T> x, std::span<const T> w, std::span<T> out, int64_t m, int64_t heads,
                 int64_t p, int64_t q, bool trans_w) {
  constexpr std::string_view op = "head_matmul";
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
  expect_non_negative(op, "m", m);
  expect_non_negative(op, "p", p);
  expect_non_negative(op, "q", q);
  expect_size(op, "x", x.size(), m * heads * p, "m*H*P");
  expect_size(op, "w", w.size(), heads * p * q, "H*P*Q");
  expect_size(op, "out", out.size(), m * heads * q, "m*H*Q");
  if (m == 0 || q == 0) return;
  if (p == 0) {
    std::fill(out.begin(), out.end(), T(0));
    return;
  }
  // Heads in parallel: each writes its own columns of out.
#pragma omp parallel for schedule(static) if (m * heads * p * q > kParallelElements)
  for (int64_t h = 0; h < heads; ++h) {
    cblas_gemm(false, trans_w, m, q, p, T(1), x.data() + h * p, heads * p, w.data() + h * p * q,
               trans_w ? p : q, T(0), out.data() + h * q, heads * q);
  }
}

template <typename T>
void head_outer(std::span<const T> a, std::span<const T> b, std::span<T> out, int64_t m, int64_t heads,
                int64_t p, int64_t q) {
  constexpr std::string_view op = "head_outer";
  if (heads <= 0) throw OpError(op, "heads = " + std::to_string(heads) + " must be positive");
  expect_non_negative(op, "m", m);
  expect_non_negative(op, "p", p);
  expect_non_negative(op, "q", q);
  expect_size(op, "a", a.size(), m * heads * p, "m*H*P");
  expect_size(op, "b", b.size(), m * heads * q, "m*H*Q");
  expect_size(op, "out", out.size(), heads * p * q, "H*P*Q");
  if (p == 0 || q == 0) return;
  if (m == 0) {
    std::fill(out.begin(), out.end(), T(0));
    return;
  }
#pragma omp parallel for schedule(static) if (m * heads * p * q > kParallelElements)
  for (int64_t h = 0; h < heads; ++h) {
    cblas_gemm(true, false, p, q, m, T(1), a.data() + h * p, heads * p, b.data() + h * q, heads * q, T(0),
               out.data() + h * p * q, q);
  }
}

template <typename T>
void bias_add_forward(std::span<const T> x, std::span<const T> bias, std::span<T> out,
                      int64_t rows, int64_t cols) {
  constexpr std::string_view op = "bias_add";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "x", x.size(), rows * cols, "rows*cols");
  expect_size(op, "bias", bias.size(), cols, "cols");
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  if (rows * cols == 0) return;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x.data() + r * cols;
    T* o = out.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = xr[c] + bias[c];
  }
}

template <typename T>
void bias_add_backward(std::span<const T> grad_out, int64_t rows, int64_t cols,
                       std::span<T> grad_bias) {
  constexpr std::string_view op = "bias_add_backward";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "grad_out", grad_out.size(), rows * cols, "rows*cols");
  expect_size(op, "grad_bias", grad_bias.size(), cols, "cols");
  // Columns are split among threads; each column sums its rows in order.
  // A whole block has a constant width, so its sums stay in registers.
  constexpr int64_t kBlock = 16;
  const T* __restrict gp = grad_out.data();
  T* __restrict out = grad_bias.data();
#pragma omp parallel for if (rows * cols > kParallelElements)
  for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
    const int64_t c1 = std::min(cols, c0 + kBlock);
    T acc[kBlock] = {};
    if (c1 - c0 == kBlock) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* g = gp + r * cols + c0;
#pragma omp simd
        for (int64_t c = 0; c < kBlock; ++c) acc[c] += g[c];
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const T* g = gp + r * cols;
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] += g[c];
      }
    }
    std::copy(acc, acc + (c1 - c0), out + c0);
  }
}

template <typename T>
void relu_forward(std::span<const T> x, std::span<T> out) {
  expect_same_sizes("relu", x, out.size(), "out");
  const T* __restrict xp = x.data();
  T* __restrict o = out.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = xp[i] > T(0) ? xp[i] : T(0);
  });
}

template <typename T>
void relu_backward(std::span<const T> x, std::span<const T> grad_out, std::span<T> grad_x) {
  expect_same_sizes("relu_backward", x, grad_out.size(), "grad_out");
  expect_same_sizes("relu_backward", x, grad_x.size(), "grad_x");
  const T* __restrict xp = x.data();
  const T* __restrict g = grad_out.data();
  T* __restrict gx = grad_x.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) gx[i] = xp[i] > T(0) ? g[i] : T(0);
  });
}

template <typename T>
void leaky_relu_forward(std::span<const T> x, T negative_slope, std::span<T> out) {
  expect_same_sizes("leaky_relu", x, out.size(), "out");
  const T* __restrict xp = x.data();
  T* __restrict o = out.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = xp[i] > T(0) ? xp[i] : negative_slope * xp[i];
  });
}

template <typename T>
void leaky_relu_backward(std::span<const T> x, T negative_slope, std::span<const T> grad_out,
                         std::span<T> grad_x) {
  expect_same_sizes("leaky_relu_backward", x, grad_out.size(), "grad_out");
  expect_same_sizes("leaky_relu_backward", x, grad_x.size(), "grad_x");
  const T* __restrict xp = x.data();
  const T* __restrict g = grad_out.data();
  T* __restrict gx = grad_x.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) gx[i] = xp[i] > T(0) ? g[i] : negative_slope * g[i];
  });
}

template <typename T>
void elu_forward(std::span<const T> x, T alpha, std::span<T> out) {
  expect_same_sizes("elu", x, out.size(), "out");
  const T* __restrict xp = x.data();
  T* __restrict o = out.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = xp[i] > T(0) ? xp[i] : alpha * detail::expm1_nonpositive(xp[i]);
  });
}

template <typename T>
void elu_backward(std::span<const T> x, T alpha, std::span<const T> grad_out,
                  std::span<T> grad_x) {
  expect_same_sizes("elu_backward", x, grad_out.size(), "grad_out");
  expect_same_sizes("elu_backward", x, grad_x.size(), "grad_x");
  const T* __restrict xp = x.data();
  const T* __restrict g = grad_out.data();
  T* __restrict gx = grad_x.data();
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      gx[i] = xp[i] > T(0) ? g[i] : g[i] * alpha * detail::exp_nonpositive(xp[i]);
    }
  });
}

template <typename T>
void concat_cols(std::span<const std::span<const T>> inputs, std::span<const int64_t> widths, int64_t rows,
                 std::span<T> out) {
  constexpr std::string_view op = "concat";
  expect_non_negative(op, "rows", rows);
  expect_size(op, "widths", widths.size(), static_cast<int64_t>(inputs.size()), "len(inputs)");
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    expect_non_negative(op, "width", widths[i]);
    expect_size(op, "input " + std::to_string(i), inputs[i].size(), rows * widths[i], "rows*width");
    total += widths[i];
  }
  expect_size(op, "out", out.size(), rows * total, "rows*sum(widths)");
  if (rows * total == 0) return;
#pragma omp parallel for schedule(static) if (rows * total > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    T* o = out.data() + r * total;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t w = widths[i];
      std::copy_n(inputs[i].data() + r * w, w, o);
      o += w;
    }
  }
}

template <typename T>
void slice_cols(std::span<const T> x, int64_t rows, int64_t cols, int64_t begin, int64_t width, std::span<T> out) {
  constexpr std::string_view op = "slice_cols";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "begin", begin);
  expect_non_negative(op, "width", width);
  if (begin + width > cols) {
    throw OpError(op, "columns " + std::to_string(begin) + " .. " + std::to_string(begin + width) +
                          " exceed the " + std::to_string(cols) + " of x");
  }
  expect_size(op, "x", x.size(), rows * cols, "rows*cols");
  expect_size(op, "out", out.size(), rows * width, "rows*width");
  if (rows * width == 0) return;
#pragma omp parallel for schedule(static) if (rows * width > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x.data() + r * cols + begin, width, out.data() + r * width);
}

std::string_view to_string(Activation a) {
  switch (a) {
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kSilu: return "silu";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kExp: return "exp";
    case Activation::kTanh: return "tanh";
    case Activation::kAbs: return "abs";
    case Activation::kClip: return "clip";
  }
  return "?";
}

namespace detail {

// sigmoid(x) from exp(-|x|) <= 1: no overflow at either end.
template <typename T>
[[gnu::always_inline]] inline T sigmoid(T x) {
  const T e = exp_nonpositive(-std::abs(x));
  return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

// tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) <= 1.
template <typename T>
[[gnu::always_inline]] inline T tanh_stable(T u) {
  const T e = exp_nonpositive(T(-2) * std::abs(u));
  const T t = (T(1) - e) / (T(1) + e);
  return u < T(0) ? -t : t;
}

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

}  // namespace detail

template <typename T>
void activation_forward(Activation kind, std::span<const T> x, std::span<T> out, T bound) {
  expect_same_sizes(to_string(kind), x, out.size(), "out");
  const T* __restrict xp = x.data();
  T* __restrict o = out.data();
  const auto c = static_cast<T>(detail::kGeluC), k = static_cast<T>(detail::kGeluA);
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    switch (kind) {
      case Activation::kSigmoid:
        for (int64_t i = b; i < e; ++i) o[i] = detail::sigmoid(xp[i]);
        return;
      case Activation::kSilu:
        for (int64_t i = b; i < e; ++i) o[i] = xp[i] * detail::sigmoid(xp[i]);
        return;
      case Activation::kGeluTanh:
        for (int64_t i = b; i < e; ++i) {
          const T v = xp[i];
          o[i] = T(0.5) * v * (T(1) + detail::tanh_stable(c * (v + k * v * v * v)));
        }
        return;
      case Activation::kExp:
        for (int64_t i = b; i < e; ++i) o[i] = std::exp(xp[i]);
        return;
      case Activation::kTanh:
        for (int64_t i = b; i < e; ++i) o[i] = detail::tanh_stable(xp[i]);
        return;
      case Activation::kAbs:
        for (int64_t i = b; i < e; ++i) o[i] = std::abs(xp[i]);
        return;
      case Activation::kClip:
        for (int64_t i = b; i < e; ++i) o[i] = std::clamp(xp[i], -bound, bound);
        return;
    }
  });
}

template <typename T>
void activation_backward(Activation kind, std::span<const T> x, std::span<const T> grad_out, std::span<T> grad_x,
                         T bound) {
  const std::string name = std::string(to_string(kind)) + "_backward";
  expect_same_sizes(name, x, grad_out.size(), "grad_out");
  expect_same_sizes(name, x, grad_x.size(), "grad_x");
  const T* __restrict xp = x.data();
  const T* __restrict g = grad_out.data();
  T* __restrict gx = grad_x.data();
  const auto c = static_cast<T>(detail::kGeluC), k = static_cast<T>(detail::kGeluA);
  elementwise(x.size(), [=](int64_t b, int64_t e) {
    switch (kind) {
      case Activation::kSigmoid:
        for (int64_t i = b; i < e; ++i) {
          const T s = detail::sigmoid(xp[i]);
          gx[i] = g[i] * s * (T(1) - s);
        }
        return;
      case Activation::kSilu:
        for (int64_t i = b; i < e; ++i) {
          const T s = detail::sigmoid(xp[i]);
          gx[i] = g[i] * s * (T(1) + xp[i] * (T(1) - s));
        }
        return;
      case Activation::kGeluTanh:
        for (int64_t i = b; i < e; ++i) {
          const T v = xp[i];
          const T t = detail::tanh_stable(c * (v + k * v * v * v));
          const T du = c * (T(1) + T(3) * k * v * v);
          gx[i] = g[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
        }
        return;
      case Activation::kExp:
        for (int64_t i = b; i < e; ++i) gx[i] = g[i] * std::exp(xp[i]);
        return;
      case Activation::kTanh:
        for (int64_t i = b; i < e; ++i) {
          const T t = detail::tanh_stable(xp[i]);
          gx[i] = g[i] * (T(1) - t * t);
        }
        return;
      case Activation::kAbs:  // sign(x), 0 at 0 as torch's
        for (int64_t i = b; i < e; ++i) gx[i] = xp[i] > T(0) ? g[i] : xp[i] < T(0) ? -g[i] : T(0);
        return;
      case Activation::kClip:
        for (int64_t i = b; i < e; ++i) gx[i] = xp[i] >= -bound && xp[i] <= bound ? g[i] : T(0);
        return;
    }
  });
}

std::string blas_kernels() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string blas_config() {
  const char* config = openblas_get_config();
  return config != nullptr ? config : "unknown";
}

std::optional<std::string> blas_kernels_warning(std::string_view kernels, bool avx2_fma,
                                                bool selectable) {
  // The sets OpenBLAS picks for CPUs it identifies as having AVX2 (each
  // uses it, except Excavator's, which is that CPU's own). Builds without
  // DYNAMIC_ARCH name their one set in capitals, hence the case.
  static constexpr std::array<std::string_view, 6> kWide{
      "haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"};
  std::string lower(kernels);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (!avx2_fma || std::find(kWide.begin(), kWide.end(), lower) != kWide.end()) return std::nullopt;
  return "OpenBLAS runs its " + std::string(kernels) +
         " kernels on this CPU, which has AVX2 and FMA: dense matmuls run slower than the CPU "
         "allows. " +
         (selectable ? "OPENBLAS_CORETYPE=Haswell in the environment selects OpenBLAS's AVX2 "
                       "kernels; `gnnrt selfcheck` then checks matmul against a float64 loop"
                     : "This OpenBLAS is built for that one kernel set (no DYNAMIC_ARCH): one "
                       "built for this CPU is faster");
}

std::optional<std::string> blas_kernels_warning() {
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx2_fma = false;
#endif
  const bool selectable = blas_config().find("DYNAMIC_ARCH") != std::string::npos;
  return blas_kernels_warning(blas_kernels(), avx2_fma, selectable);
}

#define GNNRT_INSTANTIATE_T(T)                                                                  \
  template void matmul<T>(std::span<const T>, std::span<const T>, std::span<T>, int64_t,        \
                          int64_t, int64_t, bool, bool, bool);                                  \
  template void head_matmul<T>(std::span<const T>, std::span<const T>, std::span<T>, int64_t,   \
                               int64_t, int64_t, int64_t, bool);                                \
  template void head_outer<T>(std::span<const T>, std::span<const T>, std::span<T>, int64_t,    \
                              int64_t, int64_t, int64_t);                                       \
  template void bias_add_forward<T>(std::span<const T>, std::span<const T>, std::span<T>,       \
                                    int64_t, int64_t);                                          \
  template void bias_add_backward<T>(std::span<const T>, int64_t, int64_t, std::span<T>);       \
  template void relu_forward<T>(std::span<const T>, std::span<T>);                              \
  template void relu_backward<T>(std::span<const T>, std::span<const T>, std::span<T>);         \
  template void leaky_relu_forward<T>(std::span<const T>, T, std::span<T>);                     \
  template void leaky_relu_backward<T>(std::span<const T>, T, std::span<const T>,               \
                                       std::span<T>);                                           \
  template void elu_forward<T>(std::span<const T>, T, std::span<T>);                            \
  template void elu_backward<T>(std::span<const T>, T, std::span<const T>, std::span<T>);       \
  template void concat_cols<T>(std::span<const std::span<const T>>, std::span<const int64_t>,   \
                               int64_t, std::span<T>);                                          \
  template void slice_cols<T>(std::span<const T>, int64_t, int64_t, int64_t, int64_t,           \
                              std::span<T>);                                                    \
  template void activation_forward<T>(Activation, std::span<const T>, std::span<T>, T);         \
  template void activation_backward<T>(Activation, std::span<const T>, std::span<const T>,      \
                                       std::span<T>, T);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE_T)

}  // namespace gnnrt::ops
