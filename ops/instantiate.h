// Kernels are templates over the value type T (float for training, double
// for finite-difference checks) and the index type I; each kernel .cc file
// instantiates them all with this list.
#pragma once

#include <cstdint>

#define GNNRT_FOR_EACH_VALUE_INDEX(X) \
  X(float, int32_t)                   \
  X(float, int64_t)                   \
  X(double, int32_t)                  \
  X(double, int64_t)

#define GNNRT_FOR_EACH_VALUE(X) \
  X(float)                      \
  X(double)
