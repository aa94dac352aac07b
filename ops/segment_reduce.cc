// The compiled row loops segment_reduce and edge_dot for float values
// (ops/segment_reduce.h declares them extern); segment_reduce_double.cc
// has the double ones, so the two halves compile on two cores at once.
#include "ops/segment_reduce.h"

namespace gnnrt::ops::detail {

GNNRT_INSTANTIATE_SEGMENT_REDUCE(float, int32_t)
GNNRT_INSTANTIATE_SEGMENT_REDUCE(float, int64_t)

}  // namespace gnnrt::ops::detail
