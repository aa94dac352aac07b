#include "launch/info.h"

#include <omp.h>

#include <fstream>
#include <string>

#include "ops/dense.h"
#include "runtime/core.h"
#include "runtime/device.h"
#include "runtime/program_cache.h"

namespace gnnrt::launch {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "unknown" : line;
}

// Each device profile's figures per core (docs/runtime.md has the sources).
nlohmann::json profiles() {
  nlohmann::json all = nlohmann::json::object();
  for (const char* name : {"trn1", "trn2"}) {
    const auto p = runtime::DeviceProfile::named(name);
    all[name] = {{"hbm_gib", static_cast<double>(p.hbm_bytes) / (1 << 30)},
                 {"fp32_tflops", p.peak_flops / 1e12},
                 {"hbm_gb_per_s", p.hbm_bandwidth / 1e9},
                 {"launch_us", p.launch_seconds * 1e6}};
  }
  return all;
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
      {"openblas", ops::blas_config()},
      {"blas_kernels", ops::blas_kernels()},
      {"transparent_hugepages", first_line("/sys/kernel/mm/transparent_hugepage/enabled")},
      {"compiler_version", std::string(runtime::compiler_version())},
      {"program_cache", runtime::default_cache_dir().string()},
      {"profiles", profiles()},
  };
}

}  // namespace gnnrt::launch
