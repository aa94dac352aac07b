#include "launch/info.h"

#include <cblas.h>
#include <omp.h>

#include <fstream>
#include <string>

namespace gnnrt::launch {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "unknown" : line;
}

}  // namespace

nlohmann::json build_info() {
  return {
      {"version", GNNRT_VERSION},
      {"build_type", GNNRT_BUILD_TYPE},
      {"compiler", std::string("g++ ") + __VERSION__},
      {"sanitizers", GNNRT_SANITIZERS},
      {"openmp_max_threads", omp_get_max_threads()},
      {"openmp_procs", omp_get_num_procs()},
      {"openblas", openblas_get_config()},
      {"transparent_hugepages", first_line("/sys/kernel/mm/transparent_hugepage/enabled")},
  };
}

}  // namespace gnnrt::launch
