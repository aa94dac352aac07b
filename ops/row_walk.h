// How the fused row loops (ops/segment_reduce.h) walk a Csr's rows: which
// rows each thread owns, when to stay on the calling thread, and what to
// prefetch or pull into cache ahead of an out-of-order read (internal to
// ops/; include only from kernel .cc files).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

#include <omp.h>

#include "ops/csr.h"

namespace gnnrt::ops::detail {

// Rows smaller than this much work run on the calling thread.
inline constexpr int64_t kParallelWork = 1 << 15;

// Message rows are read in an order the hardware prefetcher cannot guess
// (x[source[p]]), so each loop asks for rows ahead of time, in two steps: the
// first cache line of the row `far` positions ahead, the rest of the row
// `near` = far / 2 positions ahead. A likely reason it helps: the head starts
// the DRAM access and its page walk early, and the tail's lines then find
// the page translated. It beat asking for the whole row at one distance
// (docs/kernels.md). `far` keeps about kPrefetchBytes of row heads in
// flight: 64 rows of 64 B, 16 of 256 B, 8 of 512 B.
inline constexpr int64_t kPrefetchBytes = 4096;

struct Prefetch {
  int64_t far;   // positions ahead for a row's first line
  int64_t near;  // positions ahead for the rest of the row
};

template <typename T>
inline Prefetch prefetch_plan(int64_t features) {
  const int64_t row = std::max<int64_t>(1, features * static_cast<int64_t>(sizeof(T)));
  const int64_t far = std::clamp<int64_t>(kPrefetchBytes / row, 8, 64);
  return {far, far / 2};
}

// One distance, for loops that prefetch whole short rows (softmax scores,
// the out rows of scatter_streaming).
template <typename T>
inline int64_t prefetch_distance(int64_t features) {
  return prefetch_plan<T>(features).far;
}

// Lines of [p, p + bytes) from the one after p's line to the last. The
// prefetch helpers are always inlined: GCC 12 judges a function that only
// prefetches to have no effect and deletes calls to it that it has not inlined.
[[gnu::always_inline]] inline void prefetch_tail(const void* p, int64_t bytes) {
  if (bytes <= 0) return;  // F = 0: p may be null, and p + bytes - 1 would wrap
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes) - 1;
  for (uintptr_t line = first + 64; line <= last; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

template <typename T>
[[gnu::always_inline]] inline void prefetch_row(const T* row, int64_t features) {
  __builtin_prefetch(row, 0, 3);
  prefetch_tail(row, features * static_cast<int64_t>(sizeof(T)));
}

// The two-step prefetch of x[source[p + ...]] for the walk at position p of
// n: the head of the row plan.far ahead, its tail plan.near ahead.
template <typename T, typename I>
[[gnu::always_inline]] inline void prefetch_ahead(const T* x, const I* source, int64_t p, int64_t n,
                                                  int64_t features, Prefetch plan) {
  if (p + plan.far < n) {
    __builtin_prefetch(x + static_cast<int64_t>(source[p + plan.far]) * features, 0, 3);
  }
  if (p + plan.near < n) {
    prefetch_tail(x + static_cast<int64_t>(source[p + plan.near]) * features,
                  features * static_cast<int64_t>(sizeof(T)));
  }
}

// Operands a row loop reads out of address order (x[source[p]], a weight
// per edge id) are "pulled" by each thread first when the loop runs on
// several: one byte of every cache line, in address order. The rows came
// from the ops before, written by both threads, and a line the other core
// wrote costs far more when first touched out of order than in address
// order, which the hardware prefetcher follows (docs/kernels.md). Only
// operands of at most kPullBytes are pulled (they stay in the core's L2 and
// L3); larger ones are asked for ahead instead (Prefetch).
struct Pull {
  const void* data = nullptr;
  int64_t bytes = 0;
};
inline constexpr int64_t kPullBytes = int64_t{2} << 20;

inline void pull(Pull p) {
  if (p.data == nullptr || p.bytes <= 0 || p.bytes > kPullBytes) return;
  // Loads, which the compiler keeps (volatile) and the core cannot drop (a
  // prefetch may be dropped when the miss buffers are full).
  const auto touch = [](uintptr_t at) { (void)*reinterpret_cast<const volatile char*>(at); };
  const auto begin = reinterpret_cast<uintptr_t>(p.data);
  const auto end = begin + static_cast<uintptr_t>(p.bytes);
  touch(begin);
  for (uintptr_t line = (begin & ~uintptr_t{63}) + 64; line < end; line += 64) touch(line);
}

// Pulls each of `pulls` when called in an OpenMP team of several threads
// (one thread reads nothing extra).
inline void pull_shared(std::initializer_list<Pull> pulls) {
  if (omp_get_num_threads() <= 1) return;
  for (const Pull& p : pulls) pull(p);
}

// The rows [begin, end) of thread t of `threads` over csr: consecutive
// rows, each thread about an equal share of edges + rows. The ranges depend
// only on the row pointers and the thread count, so the ops of a step over
// the same rows give each thread the same rows, whose values stay in its
// cache (a dynamic schedule moves them between cores, a costly transfer per
// cache line: docs/kernels.md).
template <typename I>
std::pair<int64_t, int64_t> thread_rows(const Csr<I>& csr, int64_t threads, int64_t t) {
  const int64_t rows = csr.num_rows();
  const int64_t edges = csr.num_edges();
  const int64_t* rowptr = csr.rowptr().data();
  // The first row r whose cost before it, rowptr[r] + r, reaches share i.
  const auto first_row = [&](int64_t i) {
    if (i == threads) return rows;
    const int64_t target = (edges + rows) * i / threads;
    int64_t lo = 0, hi = rows;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (rowptr[mid] + mid < target) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  };
  return {first_row(t), first_row(t + 1)};
}

// The calling OpenMP thread's rows of csr (thread_rows).
template <typename I>
std::pair<int64_t, int64_t> my_rows(const Csr<I>& csr) {
  return thread_rows(csr, omp_get_num_threads(), omp_get_thread_num());
}

// Calls fn(begin, end) for the rows of csr: all on the calling thread when
// the work (edges + rows) * width is small, else each OpenMP thread its
// my_rows range, after it has pulled `pulls` (above).
template <typename I, typename RangeFn>
void parallel_row_ranges(const Csr<I>& csr, int64_t width, RangeFn&& fn,
                         std::initializer_list<Pull> pulls = {}) {
  if ((csr.num_edges() + csr.num_rows()) * width <= kParallelWork) {
    fn(int64_t{0}, csr.num_rows());
    return;
  }
#pragma omp parallel
  {
    pull_shared(pulls);
    const auto [begin, end] = my_rows(csr);
    fn(begin, end);
  }
}

template <typename I, typename Fn>
void parallel_rows(const Csr<I>& csr, int64_t width, Fn&& fn, std::initializer_list<Pull> pulls = {}) {
  parallel_row_ranges(csr, width, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  }, pulls);
}

// A [rows, width] matrix of T to pull (nothing when rows is unknown, < 0).
template <typename T>
Pull pull_of(const T* data, int64_t rows, int64_t width) {
  return rows < 0 ? Pull{} : Pull{data, rows * width * static_cast<int64_t>(sizeof(T))};
}

}  // namespace gnnrt::ops::detail
