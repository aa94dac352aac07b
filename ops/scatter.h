// scatter: reduce the rows of src into N output rows by an index,
//   out[n] = reduce_{e : index[e] = n} src[e]
// with exactly the semantics of PyG's torch_geometric.utils.scatter /
// torch_scatter (dim 0):
//   - an empty segment gives 0, for every reduce;
//   - mean divides the sum by the segment's count;
//   - max/min record arg[n, f], the edge whose value won. On ties the lowest
//     edge id wins (torch_scatter's CPU rule; fixed). NaN beats any number, so
//     it propagates. An empty segment has arg = E. The backward sends
//     grad_out[n, f] to src[arg[n, f], f] only; every other entry gets 0.
//
// Layout (row-major): src [E, F], out [N, F], arg [N, F] (max/min only,
// otherwise empty). seg = Csr::build(index, N). Outputs are overwritten.
// Blocking; OpenMP threads inside; the same bits run to run and for any number
// of threads, except that a NaN's sign may differ between up to two threads
// and more (narrow sum/mean rows change loop there; see ScatterPath).
// Bad sizes throw OpError before anything is written.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"
#include "ops/reduce.h"

namespace gnnrt::ops {

// Which loop computes a scatter. Both add a row's edges in ascending id, so
// they give the same bits, except the sign of a NaN (x86 returns either
// operand's NaN from NaN + NaN, and the compiler orders the operands of a sum
// freely). kCsrWalk reads each row's messages through the CSR. kStreaming
// (sum and mean; max/min walk) reads src in edge order on the calling thread
// and adds into out. kAuto streams when a row is at most 64 bytes and at most
// two threads are available, and walks otherwise. Tests and benchmarks force
// a path; callers leave it at kAuto.
enum class ScatterPath { kAuto, kCsrWalk, kStreaming };

template <typename T, typename I>
void scatter_forward(Reduce reduce, const Csr<I>& seg, int64_t features, std::span<const T> src,
                     std::span<T> out, std::span<I> arg, ScatterPath path = ScatterPath::kAuto);

// grad_src [E, F] is overwritten. arg is the forward's (max/min only).
template <typename T, typename I>
void scatter_backward(Reduce reduce, const Csr<I>& seg, int64_t features,
                      std::span<const T> grad_out, std::span<const I> arg, std::span<T> grad_src);

}  // namespace gnnrt::ops
