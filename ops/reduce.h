// The reductions an aggregation can use, named as PyG names them.
#pragma once

#include <string_view>

namespace gnnrt::ops {

enum class Reduce { kSum, kMean, kMax, kMin };

std::string_view to_string(Reduce reduce);
Reduce parse_reduce(std::string_view name);  // "sum" | "mean" | "max" | "min"; throws OpError

inline bool has_arg(Reduce reduce) { return reduce == Reduce::kMax || reduce == Reduce::kMin; }

}  // namespace gnnrt::ops
