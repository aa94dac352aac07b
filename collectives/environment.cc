#include "collectives/environment.h"

#include <mpi.h>

#include <atomic>

#include "collectives/error.h"

namespace gnnrt::collectives {
namespace {

// The level MPI_Init_thread provided here (-1: MPI initialised elsewhere).
// Kept, not only queried: Open MPI 4.1's MPI_T_init_thread resets the level
// MPI_Query_thread answers to the one it is asked for
// (launch/bench_common.cc asks for the current one).
std::atomic<int> provided_level{-1};

}  // namespace

bool mpi_thread_multiple() {
  int level = provided_level.load();
  if (level < 0) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return false;
    MPI_Query_thread(&level);
  }
  return level == MPI_THREAD_MULTIPLE;
}

Environment::Environment(int* argc, char*** argv, Threads threads) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int asked = threads == Threads::kMultiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    if (MPI_Init_thread(argc, argv, asked, &provided) != MPI_SUCCESS) {
      throw CollectiveError("MPI_Init_thread failed");
    }
    provided_level = provided;
    owns_ = true;
  }
  // Errors come back as codes (and become exceptions), never abort silently.
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

}  // namespace gnnrt::collectives
