// The fused row loops behind scatter, gather, spmm and sddmm (internal to
// ops/; include only from kernel .cc files).
//
// Every loop walks the rows of a Csr. Row r owns positions p in
// rowptr[r] .. rowptr[r+1]-1, visited in ascending edge id; a thread owns a
// whole row, so there are no atomics and the result does not depend on the
// number of threads. Nothing is allocated; outputs are overwritten.
//
// Layout: row-major matrices. F = features = heads * D. Per-edge arrays
// (weight, scores) are indexed by original edge id: weight[edge[p] * heads + h].
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

#include <omp.h>

#include "ops/csr.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/reduce.h"
#include "ops/row_walk.h"
#include "ops/vector_math.h"

namespace gnnrt::ops::detail {

template <typename T, typename I>
struct SegmentReduce {
  const Csr<I>* csr;
  const I* source;     // [E] by position: the row of x each message reads
  const T* x;          // [x_rows, F]
  int64_t features;
  int64_t x_rows = -1;                     // rows of x; -1: unknown (taken as large)
  const T* weight = nullptr;               // [E, heads] or null (weight 1)
  int64_t heads = 1;
  const int64_t* source_rowptr = nullptr;  // if set: message scaled by 1 / its degree there
  const I* winner = nullptr;               // if set: [*, F]; element f of message p counts
                                           // only where winner[source[p], f] == edge[p]
  T* out;                                  // [rows, F]
  I* arg = nullptr;                        // [rows, F], max/min only
  bool transposed_out = false;             // sum only: out is [F, rows] instead
  // A second operand of x's shape summed by the same walk into out2 (the
  // same messages and weights): two products of one sparse matrix
  // (segment_reduce_pair).
  const T* x2 = nullptr;
  T* out2 = nullptr;
};

template <Reduce R, typename T>
inline bool improves(T candidate, T current) {
  // (c != c) is isnan(c), spelled so that the compiler vectorises it; & and |
  // rather than && and ||, which GCC kept as branches (mispredicted about
  // once per element on random scores).
  const bool nan_wins = (candidate != candidate) & (current == current);
  if constexpr (R == Reduce::kMax) {
    return (candidate > current) | nan_wins;
  } else {
    return (candidate < current) | nan_wins;
  }
}

// ---- sum and mean with the sums in registers ----
//
// The walk below keeps a row's running sums in out[r] and adds each message
// to memory, so every edge waits on the previous edge's store of the same
// columns, which is what costs on small graphs whose messages sit in cache
// (docs/kernels.md). Here a block of columns (64, 16, or the last
// 1-15) is summed in registers over the whole row and stored once; a row
// wider than a block walks its edges once per block. Weighted rows of
// several narrow heads (GAT: 8 heads of 8) take a group of heads per block,
// each head's weight broadcast over its columns, instead of one walk per
// head. Each column still adds its messages in ascending position with the
// same products, so the bits are the walk's. Used for rows of at most 16
// columns (per head when weighted) and for any x small enough to stay in
// cache; wide rows of a large x keep the walk, whose two-step prefetch is
// tuned for DRAM (docs/kernels.md).
inline constexpr int64_t kBlockCols = 16;
inline constexpr int64_t kWideBlockCols = 64;
inline constexpr int64_t kCachedBytes = int64_t{1} << 20;

// True when a [rows, width] matrix of T stays in cache (rows < 0: unknown,
// taken as large), where its rows need no prefetch.
template <typename T>
bool fits_in_cache(int64_t rows, int64_t width) {
  return rows >= 0 && rows * width * static_cast<int64_t>(sizeof(T)) <= kCachedBytes;
}

// Where the blocked sum stores row r's column f: out[r * F + f], or
// out[f * rows + r] when transposed_out (a weight gradient Xᵀ G stored as
// torch.nn.Linear's [out, in]).
template <typename T, typename I>
[[gnu::always_inline]] inline T* out_at(const SegmentReduce<T, I>& a, T* out, int64_t r, int64_t f) {
  return a.transposed_out ? out + f * a.csr->num_rows() + r : out + r * a.features + f;
}
template <typename T, typename I>
[[gnu::always_inline]] inline T* out_at(const SegmentReduce<T, I>& a, int64_t r, int64_t f) {
  return out_at(a, a.out, r, f);
}

// kV sums of T: a GCC vector, or a plain T for one (GCC compiles one-lane
// vectors worse than scalars).
template <typename T, int kV>
struct LanesOf {
  using type [[gnu::vector_size(kV * sizeof(T))]] = T;
};
template <typename T>
struct LanesOf<T, 1> {
  using type = T;
};

// Columns [lo, lo + kN) of rows [r, r + kRows), heads [h0, h0 + kG) of kN
// / kG columns each when weighted (kG = 1 when not); with kPair the same
// columns of x2 into out2 as well. Two rows (kRows = 2) walk their edges in
// step, so a block of at most 16 columns (one or two registers of sums) has two
// independent chains of additions instead of one: a row of GCN's 16-column
// product waited 4 cycles per stored value on the previous addition
// (bench/README.md). Each row still adds its own messages in ascending
// position, so the bits are those of one row at a time.
//
// With `staged` (transposed_out, one operand), row r + j's kN sums go to
// staged + j * kN instead, for transposed_rows to store.
template <int kN, int kG, bool kWeighted, bool kScaled, bool kPrefetch, bool kPair = false,
          int kRows = 1, typename T, typename I>
[[gnu::always_inline]] inline void sum_block(const SegmentReduce<T, I>& a, int64_t r, int64_t h0,
                                             int64_t lo, Prefetch plan, T* staged = nullptr) {
  static_assert(kRows == 1 || kRows == 2);
  constexpr int kD = kN / kG;  // columns per head
  // Lanes: a head's columns as GCC vectors of at most one register
  // (kVectorBytes: 16 floats with AVX-512, 8 with AVX2), kept in registers
  // (a plain array became lane permutations when several heads shared a
  // block, and one 64-lane vector was spilled). Other widths: scalars.
  constexpr bool kVector = kD >= 2 && (kD & (kD - 1)) == 0;
  constexpr int kV = !kVector ? 1 : std::min(kD, kRegisterLanes<T>);
  constexpr int kPerHead = kD / kV;
  using Lanes = typename LanesOf<T, kV>::type;
  // Widths 3..15 that are not powers of two (one group: such widths are not
  // grouped): the block read as one vector of the next power of two, whose
  // lanes past kD take the next columns and are never stored (each of the
  // first kD lanes adds the same products as a scalar would). A 7-class
  // aggregation over Cora's graph walked 7 scalars an edge. The last row of
  // x, where those lanes would read past x, is read column by column.
  // Only where that vector is one register: a wider one is split through
  // the stack, slower than scalars (docs/kernels.md).
  constexpr int kPad = static_cast<int>(std::bit_ceil(static_cast<unsigned>(kD)));
  constexpr bool kPadded = !kVector && kG == 1 && kD > 2 && kD < 16 &&
                           kPad * static_cast<int>(sizeof(T)) <= kVectorBytes;
  using Padded = typename LanesOf<T, kPadded ? kPad : 1>::type;
  // Everything the loop reads, in locals (read through `a` it was reloaded
  // from the stack every edge).
  const int64_t F = a.features, H = a.heads;
  const I* __restrict source = a.source;
  const I* __restrict edge = a.csr->edge().data();
  const T* __restrict x = a.x + lo;
  const T* __restrict x2 = kPair ? a.x2 + lo : nullptr;
  const T* __restrict weight = a.weight + h0;
  const int64_t* __restrict degree_ptr = a.source_rowptr;
  const int64_t* __restrict rowptr = a.csr->rowptr().data();
  const int64_t positions = a.csr->num_edges();
  Lanes acc[kRows][kG * kPerHead] = {};
  Lanes acc2[kRows][kPair ? kG * kPerHead : 1] = {};
  Padded wide[kRows] = {}, wide2[kRows] = {};
  // Rows of x whose kPad columns from lo lie inside x (all but the last
  // when they reach past its row; none when x's size is unknown).
  const int64_t padded_rows = !kPadded || a.x_rows < 0 ? 0 : a.x_rows - (lo + kPad > F ? 1 : 0);
  // Row j's message at position p.
  const auto add = [&](int j, int64_t p) [[gnu::always_inline]] {
    if constexpr (kPrefetch) {
      prefetch_ahead(a.x, source, p, positions, F, plan);
      if constexpr (kPair) prefetch_ahead(a.x2, source, p, positions, F, plan);
      // Edge ids are scattered within a row: their weights too.
      if (kWeighted && p + plan.far < positions) {
        __builtin_prefetch(a.weight + static_cast<int64_t>(edge[p + plan.far]) * H);
      }
    }
    const int64_t s = source[p];
    T scale = T(1);
    if constexpr (kScaled) scale = T(1) / T(degree_ptr[s + 1] - degree_ptr[s]);
    const T* xr = x + s * F;
    if constexpr (kPadded) {
      T c = scale;
      if constexpr (kWeighted) c *= weight[static_cast<int64_t>(edge[p]) * H];
      const auto load = [&](const T* row) {
        Padded v{};
        if (s < padded_rows) {
          std::memcpy(&v, row, sizeof(Padded));
        } else {
          for (int k = 0; k < kD; ++k) v[k] = row[k];
        }
        return v;
      };
      if constexpr (kWeighted || kScaled) {
        wide[j] += c * load(xr);
        if constexpr (kPair) wide2[j] += c * load(x2 + s * F);
      } else {
        wide[j] += load(xr);
        if constexpr (kPair) wide2[j] += load(x2 + s * F);
      }
    } else {
      for (int g = 0; g < kG; ++g) {
        T c = scale;
        if constexpr (kWeighted) c *= weight[static_cast<int64_t>(edge[p]) * H + g];
        for (int q = 0; q < kPerHead; ++q) {
          Lanes xv;
          std::memcpy(&xv, xr + g * kD + q * kV, sizeof(Lanes));
          if constexpr (kWeighted || kScaled) {
            acc[j][g * kPerHead + q] += c * xv;
          } else {
            acc[j][g * kPerHead + q] += xv;
          }
          if constexpr (kPair) {
            Lanes xv2;
            std::memcpy(&xv2, x2 + s * F + g * kD + q * kV, sizeof(Lanes));
            if constexpr (kWeighted || kScaled) {
              acc2[j][g * kPerHead + q] += c * xv2;
            } else {
              acc2[j][g * kPerHead + q] += xv2;
            }
          }
        }
      }
    }
  };
  int64_t p0 = rowptr[r];
  const int64_t end0 = rowptr[r + 1];
  if constexpr (kRows == 2) {
    int64_t p1 = end0;
    const int64_t end1 = rowptr[r + 2];
    for (; p0 < end0 && p1 < end1; ++p0, ++p1) {
      add(0, p0);
      add(1, p1);
    }
    for (; p1 < end1; ++p1) add(1, p1);
  }
  for (; p0 < end0; ++p0) add(0, p0);
  // Where row r + j's sum of column lo + k goes: staged + j * kN + k when
  // staged (transposed_rows stores them), else its place in out.
  const auto to = [&](T* out, int j, int k) [[gnu::always_inline]] {
    return staged != nullptr ? staged + j * kN + k : out_at(a, out, r + j, lo + k);
  };
  const auto store = [&](T* out, int j, const Lanes* sums_of) {
    if constexpr (kVector) {
      if (staged != nullptr || !a.transposed_out) {
        std::memcpy(to(out, j, 0), sums_of, sizeof(acc[0]));
        return;
      }
      const T* sums = reinterpret_cast<const T*>(sums_of);  // GCC vectors are arrays of T in memory
      for (int k = 0; k < kN; ++k) *to(out, j, k) = sums[k];
    } else {
      // Element by element, so the sums stay scalars in registers (copying
      // the array whole kept it in memory).
      for (int k = 0; k < kN; ++k) *to(out, j, k) = sums_of[k];
    }
  };
  for (int j = 0; j < kRows; ++j) {
    if constexpr (kPadded) {
      // Lane by lane from the register (a copy through memory stored the
      // sums on the stack every edge).
      for (int k = 0; k < kD; ++k) *to(a.out, j, k) = wide[j][k];
      if constexpr (kPair) {
        for (int k = 0; k < kD; ++k) *to(a.out2, j, k) = wide2[j][k];
      }
    } else {
      store(a.out, j, acc[j]);
      if constexpr (kPair) store(a.out2, j, acc2[j]);
    }
  }
}

// Rows [begin, end) one block at a time: two rows in step while at least
// two are left, when the block has at most kBlockCols columns (one or two
// registers of sums per row). With `staged`, row r's sums go to
// staged + (r - begin) * kN (sum_block).
template <int kN, int kG, bool kWeighted, bool kScaled, bool kPrefetch, typename T, typename I>
[[gnu::always_inline]] inline void sum_rows(const SegmentReduce<T, I>& a, int64_t begin,
                                            int64_t end, int64_t h0, int64_t lo, Prefetch plan,
                                            T* staged = nullptr) {
  const auto staged_at = [&](int64_t r) {
    return staged != nullptr ? staged + (r - begin) * kN : nullptr;
  };
  int64_t r = begin;
  if constexpr (kN <= kBlockCols) {
    for (; r + 2 <= end; r += 2) {
      sum_block<kN, kG, kWeighted, kScaled, kPrefetch, false, 2>(a, r, h0, lo, plan, staged_at(r));
    }
  }
  for (; r < end; ++r) {
    sum_block<kN, kG, kWeighted, kScaled, kPrefetch>(a, r, h0, lo, plan, staged_at(r));
  }
}

// Rows [begin, end) of a transposed_out sum, eight at a time: their sums
// staged as rows of a small block in L1, then stored as its 8 x 8
// transposes, eight consecutive rows per column. Stored element by element,
// each of a row's sums went to another cache line (column f of out is row f
// of the [F, rows] result; docs/kernels.md). The sums and their bits are
// sum_block's.
template <int kN, int kG, bool kWeighted, bool kScaled, bool kPrefetch, typename T, typename I>
void transposed_rows(const SegmentReduce<T, I>& a, int64_t begin, int64_t end, int64_t h0,
                     int64_t lo, Prefetch plan) {
  constexpr int kRowsPerBlock = 8;
  const int64_t rows = a.csr->num_rows();
  alignas(64) T staged[kRowsPerBlock * kN];
  for (int64_t r0 = begin; r0 < end; r0 += kRowsPerBlock) {
    const int64_t n = std::min<int64_t>(kRowsPerBlock, end - r0);
    sum_rows<kN, kG, kWeighted, kScaled, kPrefetch>(a, r0, r0 + n, h0, lo, plan, staged);
    int64_t f = 0;
    if (n == kRowsPerBlock) {
      for (; f + 8 <= kN; f += 8) {
        transpose_block8(staged + f, kN, a.out + (lo + f) * rows + r0, rows);
      }
    }
    for (; f < kN; ++f) {
      for (int64_t q = 0; q < n; ++q) a.out[(lo + f) * rows + r0 + q] = staged[q * kN + f];
    }
  }
}

// Every row, columns [lo, lo + kN) of heads [h0, h0 + kG) (sum_rows, or
// transposed_rows for a transposed sum of one operand). A function of its
// own, not a lambda of sum_rows_blocked, so each block shape is compiled
// once and not again for each of the 16 tail widths (docs/kernels.md). The
// only transposed sum is sparse_matmul's weight gradient (weighted, one
// head, no degree scale), so the staged store is compiled for those shapes
// only; any other transposed sum would be stored element by element
// (sum_block), with the same bits.
template <int kN, int kG, bool kWeighted, bool kScaled, bool kPrefetch, typename T, typename I>
void block_rows(const SegmentReduce<T, I>& a, int64_t h0, int64_t lo, Prefetch plan,
                std::initializer_list<Pull> pulls) {
  parallel_row_ranges(*a.csr, kN, [&](int64_t begin, int64_t end) {
    if constexpr (kWeighted && kG == 1 && !kScaled) {
      if (a.transposed_out && a.out2 == nullptr) {
        transposed_rows<kN, kG, kWeighted, kScaled, kPrefetch>(a, begin, end, h0, lo, plan);
        return;
      }
    }
    sum_rows<kN, kG, kWeighted, kScaled, kPrefetch>(a, begin, end, h0, lo, plan);
  }, pulls);
}

// Every row, one block of columns at a time: per weight group (a head when
// weighted, else the whole row), blocks of 64 and 16 columns and a last
// block of the rest (fewer than 16). Each block is its own loop over the
// rows (one loop that chose among every block shape per row grew so large
// that GCC spilled the loop's pointers and reloaded them every edge). Rows
// are independent, so any thread may take any row.
template <bool kWeighted, bool kScaled, typename T, typename I>
void sum_rows_blocked(const SegmentReduce<T, I>& a, bool mean, bool prefetch) {
  const Csr<I>& csr = *a.csr;
  const int64_t F = a.features;
  const int64_t groups = kWeighted ? a.heads : 1;
  const int64_t width = F / groups;
  const Prefetch plan = prefetch_plan<T>(F);
  const Pull x_pull = pull_of(a.x, a.x_rows, F);
  const Pull weight_pull = kWeighted ? pull_of(a.weight, csr.num_edges(), a.heads) : Pull{};
  const auto block = [&]<int kN, int kG>(int64_t h0, int64_t lo) {
    if (prefetch) {
      block_rows<kN, kG, kWeighted, kScaled, true>(a, h0, lo, plan, {x_pull, weight_pull});
    } else {
      block_rows<kN, kG, kWeighted, kScaled, false>(a, h0, lo, plan, {x_pull, weight_pull});
    }
  };
  int64_t g = 0;
  if constexpr (kWeighted) {
    // Groups of heads that fill a wide block, when a head is a power of two
    // of at most 16 columns.
    const auto grouped = [&]<int kD>() {
      constexpr int kG = static_cast<int>(kWideBlockCols) / kD;
      if (width != kD) return;
      for (; g + kG <= groups; g += kG) block.template operator()<kWideBlockCols, kG>(g, g * kD);
    };
    grouped.template operator()<2>();
    grouped.template operator()<4>();
    grouped.template operator()<8>();
    grouped.template operator()<16>();
  }
  for (; g < groups; ++g) {
    int64_t lo = g * width;
    const int64_t hi = lo + width;
    for (; lo + kWideBlockCols <= hi; lo += kWideBlockCols) block.template operator()<kWideBlockCols, 1>(g, lo);
    for (; lo + kBlockCols <= hi; lo += kBlockCols) block.template operator()<kBlockCols, 1>(g, lo);
    with_constant<1, kBlockCols - 1>(hi - lo, [&]<int kTail>() {
      block.template operator()<kTail, 1>(g, lo);
    });
  }
  if (mean) {
    const int64_t* rp = csr.rowptr().data();
    parallel_rows(csr, F, [&](int64_t r) {
      if (rp[r + 1] == rp[r]) return;
      const T count = static_cast<T>(rp[r + 1] - rp[r]);
      for (int64_t f = 0; f < F; ++f) *out_at(a, r, f) /= count;
    });
  }
}

// True when the blocked sum took the call (always when transposed_out).
template <bool kWeighted, bool kScaled, typename T, typename I>
bool try_sum_rows_blocked(const SegmentReduce<T, I>& a, bool mean) {
  const int64_t F = a.features;
  const int64_t width = kWeighted ? F / a.heads : F;
  const bool cached = fits_in_cache<T>(a.x_rows, F);
  if (F == 0 || width == 0 || (width > kBlockCols && !cached && !a.transposed_out)) return false;
  sum_rows_blocked<kWeighted, kScaled>(a, mean, /*prefetch=*/!cached);
  return true;
}

template <Reduce R, bool kWeighted, bool kScaled, bool kMasked, typename T, typename I>
void segment_reduce_impl(const SegmentReduce<T, I>& a) {
  const Csr<I>& csr = *a.csr;
  const int64_t F = a.features;
  const int64_t H = a.heads;
  const int64_t D = H > 0 ? F / H : F;
  const int64_t* rp = csr.rowptr().data();
  const I* edge = csr.edge().data();
  const I* source = a.source;
  const T* x = a.x;
  const I num_edges = static_cast<I>(csr.num_edges());
  const int64_t num_positions = csr.num_edges();
  const Prefetch plan = prefetch_plan<T>(F);

  if constexpr ((R == Reduce::kSum || R == Reduce::kMean) && !kMasked) {
    if (try_sum_rows_blocked<kWeighted, kScaled>(a, R == Reduce::kMean)) return;
  }
  parallel_rows(csr, F, [&](int64_t r) {
    T* __restrict o = a.out + r * F;
    const int64_t begin = rp[r];
    const int64_t end = rp[r + 1];
    if constexpr (R == Reduce::kSum || R == Reduce::kMean) {
      std::fill(o, o + F, T(0));
      for (int64_t p = begin; p < end; ++p) {
        prefetch_ahead(x, source, p, num_positions, F, plan);
        if constexpr (kWeighted) {
          if (p + plan.far < num_positions) {
            __builtin_prefetch(a.weight + static_cast<int64_t>(edge[p + plan.far]) * H);
          }
        }
        const int64_t s = source[p];
        const T* __restrict xr = x + s * F;
        T scale = T(1);
        if constexpr (kScaled) scale = T(1) / T(a.source_rowptr[s + 1] - a.source_rowptr[s]);
        const I* win = nullptr;
        if constexpr (kMasked) win = a.winner + s * F;
        const I e = edge[p];
        for (int64_t h = 0; h < H; ++h) {
          T c = scale;
          if constexpr (kWeighted) c *= a.weight[static_cast<int64_t>(e) * H + h];
          const int64_t lo = h * D;
          if constexpr (kMasked) {
            for (int64_t f = lo; f < lo + D; ++f) o[f] += win[f] == e ? c * xr[f] : T(0);
          } else if constexpr (kWeighted || kScaled) {
#pragma omp simd
            for (int64_t f = lo; f < lo + D; ++f) o[f] += c * xr[f];
          } else {
#pragma omp simd
            for (int64_t f = lo; f < lo + D; ++f) o[f] += xr[f];
          }
        }
      }
      if constexpr (R == Reduce::kMean) {
        if (end > begin) {
          const T count = static_cast<T>(end - begin);
          for (int64_t f = 0; f < F; ++f) o[f] /= count;
        }
      }
    } else {
      I* __restrict g = a.arg + r * F;
      if (begin == end) {
        std::fill(o, o + F, T(0));
        std::fill(g, g + F, num_edges);
        return;
      }
      for (int64_t p = begin; p < end; ++p) {
        prefetch_ahead(x, source, p, num_positions, F, plan);
        const T* __restrict xr = x + static_cast<int64_t>(source[p]) * F;
        const I e = edge[p];
        for (int64_t h = 0; h < H; ++h) {
          T c = T(1);
          if constexpr (kWeighted) c = a.weight[static_cast<int64_t>(e) * H + h];
          const int64_t lo = h * D;
          if (p == begin) {
            for (int64_t f = lo; f < lo + D; ++f) {
              o[f] = kWeighted ? c * xr[f] : xr[f];
              g[f] = e;
            }
            continue;
          }
          // Branch-free so that it vectorises: strict improvement keeps the
          // lowest edge id on ties; NaN replaces a number, never the reverse.
#pragma omp simd
          for (int64_t f = lo; f < lo + D; ++f) {
            const T m = kWeighted ? c * xr[f] : xr[f];
            const bool better = improves<R>(m, o[f]);
            o[f] = better ? m : o[f];
            g[f] = better ? e : g[f];
          }
        }
      }
    }
  }, {pull_of(x, a.x_rows, F), kWeighted ? pull_of(a.weight, num_positions, H) : Pull{},
      kMasked ? pull_of(a.winner, a.x_rows, F) : Pull{}});
}

template <Reduce R, bool kWeighted, bool kScaled, typename T, typename I>
void segment_reduce_masked(const SegmentReduce<T, I>& a) {
  a.winner ? segment_reduce_impl<R, kWeighted, kScaled, true>(a)
           : segment_reduce_impl<R, kWeighted, kScaled, false>(a);
}

template <Reduce R, bool kWeighted, typename T, typename I>
void segment_reduce_scaled(const SegmentReduce<T, I>& a) {
  a.source_rowptr ? segment_reduce_masked<R, kWeighted, true>(a)
                  : segment_reduce_masked<R, kWeighted, false>(a);
}

template <Reduce R, typename T, typename I>
void segment_reduce_as(const SegmentReduce<T, I>& a) {
  a.weight ? segment_reduce_scaled<R, true>(a) : segment_reduce_scaled<R, false>(a);
}

// out[r] = reduce over the row's messages. Max/min ignore source_rowptr and
// winner.
template <typename T, typename I>
void segment_reduce(Reduce reduce, const SegmentReduce<T, I>& a) {
  switch (reduce) {
    case Reduce::kSum: return segment_reduce_as<Reduce::kSum>(a);
    case Reduce::kMean: return segment_reduce_as<Reduce::kMean>(a);
    case Reduce::kMax: return segment_reduce_as<Reduce::kMax>(a);
    case Reduce::kMin: return segment_reduce_as<Reduce::kMin>(a);
  }
}

// out = the weighted sum of x's messages and out2 = that of x2's (x2 of
// x's shape), in one walk of the rows per block of 16 columns: each
// message's weight and row index are read once for both (SAGE's two linear
// maps of one sparse input, ops/sparse_matmul.h). Every column adds the
// same products in the same order as segment_reduce, so both results have
// its bits. True when it took the call: a weighted sum of one head, no
// degree scale or mask, 16 or 32 columns; false when the caller must make
// two segment_reduce calls. Only those widths gained from one walk, so other
// widths run as two walks, and one block shape keeps the instantiations (and
// the sanitizer build's compile time) small (docs/kernels.md has the
// measurements).
inline constexpr int64_t kPairMaxCols = 2 * kBlockCols;

template <typename T, typename I>
bool segment_reduce_pair(const SegmentReduce<T, I>& a) {
  const int64_t F = a.features;
  if (F == 0 || F % kBlockCols != 0 || F > kPairMaxCols || a.heads != 1 || a.weight == nullptr ||
      a.source_rowptr != nullptr || a.winner != nullptr || a.x2 == nullptr || a.out2 == nullptr) {
    return false;
  }
  // Where segment_reduce itself would take another walk than the blocked
  // sum (32 columns of an x out of cache, stored plainly).
  const bool cached = fits_in_cache<T>(a.x_rows, 2 * F);
  if (F > kBlockCols && !fits_in_cache<T>(a.x_rows, F) && !a.transposed_out) return false;
  const Prefetch plan = prefetch_plan<T>(F);
  const std::initializer_list<Pull> pulls = {pull_of(a.x, a.x_rows, F),
                                             pull_of(a.weight, a.csr->num_edges(), 1),
                                             pull_of(a.x2, a.x_rows, F)};
  for (int64_t lo = 0; lo < F; lo += kBlockCols) {
    if (cached) {
      parallel_rows(*a.csr, kBlockCols, [&](int64_t r) {
        sum_block<kBlockCols, 1, true, false, false, true>(a, r, 0, lo, plan);
      }, pulls);
    } else {
      parallel_rows(*a.csr, kBlockCols, [&](int64_t r) {
        sum_block<kBlockCols, 1, true, false, true, true>(a, r, 0, lo, plan);
      }, pulls);
    }
  }
  return true;
}

// scatter (sum or mean) of narrow rows on the calling thread, streaming the
// edges in id order: out[row_of_edge[e]] += src[e]. The walk reads one random
// row of src [E, F] per edge; streaming reads src in order and moves the
// random access to a row of out, which is E/N times smaller and more often
// cached. It wins for rows of at most a cache line (kStreamMaxRowBytes);
// for wider rows the walk with its two-step prefetch wins on large graphs,
// where it matters (docs/kernels.md has the measurements). Every row still
// adds its edges in ascending id, so the values equal the CSR walk's (a NaN's
// sign may differ: tests/ops/determinism_test.cc, ScatterPaths).
inline constexpr int64_t kStreamMaxRowBytes = 64;

template <Reduce R, typename T, typename I>
void scatter_streaming(const Csr<I>& csr, int64_t features, const T* src, T* out) {
  static_assert(R == Reduce::kSum || R == Reduce::kMean, "sum and mean only");
  const int64_t rows = csr.num_rows();
  const int64_t E = csr.num_edges();
  const int64_t F = features;
  const I* row_of = csr.row_of_edge().data();
  const int64_t ahead = prefetch_distance<T>(F);
  std::fill(out, out + rows * F, T(0));
  for (int64_t e = 0; e < E; ++e) {
    if (e + ahead < E) prefetch_row(out + static_cast<int64_t>(row_of[e + ahead]) * F, F);
    T* __restrict o = out + static_cast<int64_t>(row_of[e]) * F;
    const T* __restrict x = src + e * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) o[f] += x[f];
  }
  if constexpr (R == Reduce::kMean) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t count = csr.degree(r);
      if (count == 0) continue;
      for (int64_t f = 0; f < F; ++f) out[r * F + f] /= static_cast<T>(count);
    }
  }
}

// out[edge[p]] = x[r] (divided by the row's degree if divide_by_degree): each edge
// gets its row's value. Gather's forward and scatter's sum/mean backward.
template <typename T, typename I>
void broadcast_rows(const Csr<I>& csr, int64_t features, const T* x, bool divide_by_degree,
                    T* out) {
  const int64_t F = features;
  const int64_t* rp = csr.rowptr().data();
  const I* edge = csr.edge().data();
  parallel_rows(csr, F, [&](int64_t r) {
    const T* __restrict xr = x + r * F;
    const T count = static_cast<T>(rp[r + 1] - rp[r]);
    for (int64_t p = rp[r]; p < rp[r + 1]; ++p) {
      T* __restrict o = out + static_cast<int64_t>(edge[p]) * F;
      if (divide_by_degree) {
        for (int64_t f = 0; f < F; ++f) o[f] = xr[f] / count;
      } else {
        std::copy(xr, xr + F, o);
      }
    }
  });
}

// out[edge[p], h] = scale(r) * sum_{d} a[col[p], h, d] * b[r, h, d], where
// scale(r) = 1 / degree(r) if divide_by_degree, and, with winner set, only the
// elements f with winner[r, f] == edge[p] count. sddmm's dot product and the
// weight gradient of spmm. Each dot adds its products in ascending d.
template <int kD, bool kPrefetch, typename T, typename I>
void edge_dot_fixed(const Csr<I>& csr, int64_t heads, const T* a, const T* b,
                    bool divide_by_degree, T* out) {
  // Heads of kD <= 16 channels with no winner mask: the dot is unrolled
  // (a runtime-length loop tested the mask per element). a's rows are
  // prefetched when they do not stay in cache (docs/kernels.md).
  const int64_t H = heads, F = kD * heads;
  const int64_t* rp = csr.rowptr().data();
  const I* edge = csr.edge().data();
  const I* col = csr.col().data();
  const int64_t positions = csr.num_edges();
  const Prefetch plan = prefetch_plan<T>(F);
  parallel_rows(csr, F, [&](int64_t r) {
    const T* __restrict br = b + r * F;
    const T scale = divide_by_degree ? T(1) / T(rp[r + 1] - rp[r]) : T(1);
    for (int64_t p = rp[r]; p < rp[r + 1]; ++p) {
      if constexpr (kPrefetch) prefetch_ahead(a, col, p, positions, F, plan);
      const T* __restrict ar = a + static_cast<int64_t>(col[p]) * F;
      T* __restrict o = out + static_cast<int64_t>(edge[p]) * H;
      for (int64_t h = 0; h < H; ++h) {
        T acc = T(0);
        for (int d = 0; d < kD; ++d) acc += ar[h * kD + d] * br[h * kD + d];
        o[h] = scale * acc;
      }
    }
  }, {pull_of(a, csr.num_cols(), F)});
}

template <typename T, typename I>
void edge_dot(const Csr<I>& csr, int64_t features, int64_t heads, const T* a, const T* b,
              bool divide_by_degree, const I* winner, T* out) {
  const int64_t F = features;
  const int64_t H = heads;
  const int64_t D = F / H;
  const bool cached = fits_in_cache<T>(csr.num_cols(), F);
  if (winner == nullptr && with_constant<1, kBlockCols>(D, [&]<int kD>() {
        cached ? edge_dot_fixed<kD, false>(csr, H, a, b, divide_by_degree, out)
               : edge_dot_fixed<kD, true>(csr, H, a, b, divide_by_degree, out);
      })) {
    return;
  }
  const int64_t* rp = csr.rowptr().data();
  const I* edge = csr.edge().data();
  const I* col = csr.col().data();
  const Prefetch plan = prefetch_plan<T>(F);
  parallel_rows(csr, F, [&](int64_t r) {
    const T* __restrict br = b + r * F;
    const T scale = divide_by_degree ? T(1) / T(rp[r + 1] - rp[r]) : T(1);
    for (int64_t p = rp[r]; p < rp[r + 1]; ++p) {
      prefetch_ahead(a, col, p, csr.num_edges(), F, plan);
      const T* __restrict ar = a + static_cast<int64_t>(col[p]) * F;
      const I e = edge[p];
      for (int64_t h = 0; h < H; ++h) {
        T acc = T(0);
        if (winner != nullptr) {
          const I* win = winner + r * F;
          for (int64_t f = h * D; f < (h + 1) * D; ++f) acc += win[f] == e ? ar[f] * br[f] : T(0);
        } else {
          for (int64_t f = h * D; f < (h + 1) * D; ++f) acc += ar[f] * br[f];
        }
        out[static_cast<int64_t>(e) * H + h] = scale * acc;
      }
    }
  }, {pull_of(a, csr.num_cols(), F)});
}

// segment_reduce and edge_dot are compiled once, in segment_reduce.cc and
// segment_reduce_double.cc, for the kernels' value and index types; the
// kernel files that call them only link to them. Compiled in each of the
// four that called segment_reduce, they were most of a build's time
// (docs/kernels.md).
#define GNNRT_SEGMENT_REDUCE(prefix, T, I)                                            \
  prefix template void segment_reduce<T, I>(Reduce, const SegmentReduce<T, I>&);      \
  prefix template void edge_dot<T, I>(const Csr<I>&, int64_t, int64_t, const T*, const T*, \
                                      bool, const I*, T*);
#define GNNRT_DECLARE_SEGMENT_REDUCE(T, I) GNNRT_SEGMENT_REDUCE(extern, T, I)
#define GNNRT_INSTANTIATE_SEGMENT_REDUCE(T, I) GNNRT_SEGMENT_REDUCE(, T, I)
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_DECLARE_SEGMENT_REDUCE)

}  // namespace gnnrt::ops::detail
