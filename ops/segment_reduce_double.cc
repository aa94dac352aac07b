// segment_reduce and edge_dot for double values (segment_reduce.cc has
// the float ones).
#include "ops/segment_reduce.h"

namespace gnnrt::ops::detail {

GNNRT_INSTANTIATE_SEGMENT_REDUCE(double, int32_t)
GNNRT_INSTANTIATE_SEGMENT_REDUCE(double, int64_t)

}  // namespace gnnrt::ops::detail
