// Errors of the collectives layer. Every MPI call's return code is checked
// (communicators use MPI_ERRORS_RETURN), and a failure becomes a
// CollectiveError carrying the operation, the rank and MPI's own error string.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace gnnrt::collectives {

class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws CollectiveError("<what>: <MPI error string>") unless rc == MPI_SUCCESS.
void check_mpi(int rc, std::string_view what);

// MPI's text for an error code.
std::string mpi_error_string(int rc);

}  // namespace gnnrt::collectives
