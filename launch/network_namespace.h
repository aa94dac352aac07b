// A single-host job's network: the launcher moves itself into a network
// namespace of its own that holds only loopback before it starts its
// control server and mpirun, so nothing of the job (the control server,
// mpirun, its ranks) can be reached from any network. Restricting Open
// MPI's interfaces is not enough: Open MPI 4.1 binds its out-of-band
// listener to every address (INADDR_ANY; oob_tcp_if_include only picks the
// interfaces it talks on), and its TCP transport's too.
//
// Call it while the process has one thread (a user namespace, the
// unprivileged way, requires that). Root makes the network namespace
// directly; another user inside a user namespace of its own that maps its
// ids to themselves (files keep their owner).
#pragma once

#include <string>

namespace gnnrt::launch {

// Returns "" when the process now runs in a namespace whose only interface
// is loopback (up), else why it could not (the process's network is then
// as it was). Throws std::runtime_error in the rare case of a namespace
// made but left without loopback that the process cannot leave again.
std::string enter_loopback_only_network();

}  // namespace gnnrt::launch
