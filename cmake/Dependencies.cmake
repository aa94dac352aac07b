# Dependencies that ship no CMake package config on Debian 12: found here as
# imported targets so the rest of the build links them by name.

# OpenBLAS: prefer the OpenMP build, so BLAS threads follow omp_set_num_threads
# instead of fighting the kernels' OpenMP threads.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-openmp openblas REQUIRED)
find_library(OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
if(NOT OPENBLAS_LIBRARY)
  find_library(OPENBLAS_LIBRARY openblas REQUIRED)
endif()
add_library(gnnrt::openblas UNKNOWN IMPORTED)
set_target_properties(gnnrt::openblas PROPERTIES
  IMPORTED_LOCATION ${OPENBLAS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${OPENBLAS_INCLUDE_DIR})
message(STATUS "OpenBLAS: ${OPENBLAS_LIBRARY}")

# METIS
find_path(METIS_INCLUDE_DIR metis.h REQUIRED)
find_library(METIS_LIBRARY metis REQUIRED)
add_library(gnnrt::metis UNKNOWN IMPORTED)
set_target_properties(gnnrt::metis PROPERTIES
  IMPORTED_LOCATION ${METIS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${METIS_INCLUDE_DIR})

# xxHash
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
add_library(gnnrt::xxhash ALIAS PkgConfig::XXHASH)
# libsodium: the launcher's per-rank tokens (HMAC-SHA-256 of the job's
# secret) and their constant-time comparison; no home-made cryptography.
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
add_library(gnnrt::sodium ALIAS PkgConfig::SODIUM)

# Random123: header-only
find_path(RANDOM123_INCLUDE_DIR Random123/philox.h REQUIRED)
add_library(gnnrt::random123 INTERFACE IMPORTED)
set_target_properties(gnnrt::random123 PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${RANDOM123_INCLUDE_DIR})
