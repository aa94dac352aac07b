// segment_reduce and edge_dot for double values (segment_reduce.cc has
// the float ones).
#include "ops/segment_reduce.h"

namespace gnnrt::ops::detail {

GNNRT_FOR_EACH_INDEX_OF(GNNRT_INSTANTIATE_SEGMENT_REDUCE, double)

}  // namespace gnnrt::ops::detail
