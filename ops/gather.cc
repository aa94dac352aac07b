#include "ops/gather.h"

#include <algorithm>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/scatter.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {

template <typename T, typename I>
void gather_forward(const Csr<I>& seg, int64_t features, std::span<const T> x, std::span<T> out) {
  constexpr std::string_view op = "gather";
  expect_non_negative(op, "features", features);
  expect_size(op, "x", x.size(), seg.num_rows() * features, "N*F");
  expect_size(op, "out", out.size(), seg.num_edges() * features, "E*F");
  // In edge order: sequential writes of out, random reads of x (asked for
  // ahead). Walking x's rows instead and copying each to its edges' rows
  // scattered the writes, which lost to torch's index_select
  // (docs/kernels.md).
  const int64_t E = seg.num_edges(), F = features;
  const I* row = seg.row_of_edge().data();
  const T* xp = x.data();
  T* o = out.data();
  const detail::Prefetch plan = detail::prefetch_plan<T>(F);
#pragma omp parallel for schedule(static, 1024) if (E * F > detail::kParallelWork)
  for (int64_t e = 0; e < E; ++e) {
    detail::prefetch_ahead(xp, row, e, E, F, plan);
    std::copy_n(xp + static_cast<int64_t>(row[e]) * F, F, o + e * F);
  }
}

template <typename T, typename I>
void gather_backward(const Csr<I>& seg, int64_t features, std::span<const T> grad_out,
                     std::span<T> grad_x) {
  constexpr std::string_view op = "gather_backward";
  expect_non_negative(op, "features", features);
  expect_size(op, "grad_out", grad_out.size(), seg.num_edges() * features, "E*F");
  expect_size(op, "grad_x", grad_x.size(), seg.num_rows() * features, "N*F");
  scatter_forward<T, I>(Reduce::kSum, seg, features, grad_out, grad_x, {});
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void gather_forward<T, I>(const Csr<I>&, int64_t, std::span<const T>,             \
                                     std::span<T>);                                          \
  template void gather_backward<T, I>(const Csr<I>&, int64_t, std::span<const T>,            \
                                      std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
