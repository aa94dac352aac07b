#include "collectives/error.h"

#include <mpi.h>

namespace gnnrt::collectives {

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, length);
}

void check_mpi(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return;
  int rank = -1;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw CollectiveError("rank " + std::to_string(rank) + ": " + std::string(what) + ": " +
                        mpi_error_string(rc));
}

}  // namespace gnnrt::collectives
