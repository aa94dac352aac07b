#include "ops/scatter.h"

#include <omp.h>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

namespace gnnrt::ops {
namespace {

template <typename I>
void check_common(std::string_view op, Reduce reduce, const Csr<I>& seg, int64_t features,
                  std::size_t arg_size) {
  expect_non_negative(op, "features", features);
  if (has_arg(reduce)) {
    expect_size(op, "arg", arg_size, seg.num_rows() * features, "N*F");
  }
}

}  // namespace

template <typename T, typename I>
void scatter_forward(Reduce reduce, const Csr<I>& seg, int64_t features, std::span<const T> src,
                     std::span<T> out, std::span<I> arg, ScatterPath path) {
  constexpr std::string_view op = "scatter";
  check_common(op, reduce, seg, features, arg.size());
  expect_size(op, "src", src.size(), seg.num_edges() * features, "E*F");
  expect_size(op, "out", out.size(), seg.num_rows() * features, "N*F");
  if (path == ScatterPath::kAuto) {
    // One thread streaming narrow rows beat the walk on two threads from
    // E = 1e6 (docs/kernels.md); more threads walk.
    const bool narrow = features * static_cast<int64_t>(sizeof(T)) <= detail::kStreamMaxRowBytes;
    path = narrow && omp_get_max_threads() <= 2 ? ScatterPath::kStreaming : ScatterPath::kCsrWalk;
  }
  if (path == ScatterPath::kStreaming && reduce == Reduce::kSum) {
    return detail::scatter_streaming<Reduce::kSum>(seg, features, src.data(), out.data());
  }
  if (path == ScatterPath::kStreaming && reduce == Reduce::kMean) {
    return detail::scatter_streaming<Reduce::kMean>(seg, features, src.data(), out.data());
  }
  detail::segment_reduce<T, I>(reduce, {.csr = &seg,
                                        .source = seg.edge().data(),
                                        .x = src.data(),
                                        .features = features,
                                        .x_rows = seg.num_edges(),
                                        .out = out.data(),
                                        .arg = arg.data()});
}

template <typename T, typename I>
void scatter_backward(Reduce reduce, const Csr<I>& seg, int64_t features,
                      std::span<const T> grad_out, std::span<const I> arg,
                      std::span<T> grad_src) {
  constexpr std::string_view op = "scatter_backward";
  check_common(op, reduce, seg, features, arg.size());
  expect_size(op, "grad_out", grad_out.size(), seg.num_rows() * features, "N*F");
  expect_size(op, "grad_src", grad_src.size(), seg.num_edges() * features, "E*F");
  if (!has_arg(reduce)) {
    detail::broadcast_rows(seg, features, grad_out.data(), reduce == Reduce::kMean,
                           grad_src.data());
    return;
  }
  // Each edge's row is written once, by the thread that owns its segment.
  const int64_t F = features;
  const int64_t* rp = seg.rowptr().data();
  const I* edge = seg.edge().data();
  detail::parallel_rows(seg, F, [&](int64_t r) {
    const T* g = grad_out.data() + r * F;
    const I* win = arg.data() + r * F;
    for (int64_t p = rp[r]; p < rp[r + 1]; ++p) {
      const I e = edge[p];
      T* out = grad_src.data() + static_cast<int64_t>(e) * F;
      for (int64_t f = 0; f < F; ++f) out[f] = win[f] == e ? g[f] : T(0);
    }
  });
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void scatter_forward<T, I>(Reduce, const Csr<I>&, int64_t, std::span<const T>,   \
                                      std::span<T>, std::span<I>, ScatterPath);             \
  template void scatter_backward<T, I>(Reduce, const Csr<I>&, int64_t, std::span<const T>,  \
                                       std::span<const I>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
