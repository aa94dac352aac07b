// Kernels are templates over the value type T (float for training, double
// for finite-difference checks) and the index type I; each kernel .cc file
// instantiates them all with this list.
#pragma once

#include <cstdint>

#define GNNRT_FOR_EACH_INDEX_OF(X, T) \
  X(T, int32_t)                       \
  X(T, int64_t)

#define GNNRT_FOR_EACH_VALUE_INDEX(X) \
  GNNRT_FOR_EACH_INDEX_OF(X, float)   \
  GNNRT_FOR_EACH_INDEX_OF(X, double)

#define GNNRT_FOR_EACH_VALUE(X) \
  X(float)                      \
  X(double)
