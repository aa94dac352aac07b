// The deadline in its default mode: rank 1 skips a collective that every
// other rank enters. The others must not hang: after the deadline
// (GNNRT_COLLECTIVE_TIMEOUT, set short by ctest) they log the operation, the
// peer and the time waited, and abort the job. ctest passes this test when
// that message appears (and fails it if the job hangs past its own timeout).
#include <unistd.h>

#include <vector>

#include "collectives/communicator.h"
#include "collectives/environment.h"

int main(int argc, char** argv) {
  gnnrt::collectives::Environment mpi(&argc, &argv);
  auto comm = gnnrt::collectives::Communicator::world();
  std::vector<float> data(1024, 1.0f);
  if (comm.rank() != 1) {
    comm.allreduce<float>(data);
  } else {
    sleep(60);  // never joins; killed by the abort
  }
  return 0;  // not reached on any rank
}
