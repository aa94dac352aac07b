#include "ops/reduce.h"

#include <string>

#include "ops/error.h"

namespace gnnrt::ops {

std::string_view to_string(Reduce reduce) {
  switch (reduce) {
    case Reduce::kSum: return "sum";
    case Reduce::kMean: return "mean";
    case Reduce::kMax: return "max";
    case Reduce::kMin: return "min";
  }
  return "?";
}

Reduce parse_reduce(std::string_view name) {
  for (Reduce r : {Reduce::kSum, Reduce::kMean, Reduce::kMax, Reduce::kMin}) {
    if (to_string(r) == name) return r;
  }
  throw OpError("reduce", "unknown reduction '" + std::string(name) + "' (sum, mean, max, min)");
}

}  // namespace gnnrt::ops
