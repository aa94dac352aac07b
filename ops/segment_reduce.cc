// The compiled row loops segment_reduce and edge_dot for float values
// (ops/segment_reduce.h declares them extern); segment_reduce_double.cc
// has the double ones, so the two halves compile on two cores at once.
#include "ops/segment_reduce.h"

namespace gnnrt::ops::detail {

GNNRT_FOR_EACH_INDEX_OF(GNNRT_INSTANTIATE_SEGMENT_REDUCE, float)

}  // namespace gnnrt::ops::detail
