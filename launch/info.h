// `gnnrt info`: what this build is and what it will run on (version,
// compiler, flags, OpenMP threads, OpenBLAS configuration, huge pages).
#pragma once

#include <nlohmann/json.hpp>

namespace gnnrt::launch {

nlohmann::json build_info();

}  // namespace gnnrt::launch
