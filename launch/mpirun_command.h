// The mpirun command of a launch attempt: mpirun's options (transports,
// binding, the environment the ranks get), the command each rank runs, and
// the appfile that gives each rank its own token.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "launch/tokens.h"

namespace gnnrt::launch {

// mpirun and its options, and the command each rank runs (gnnrt and its
// arguments). By hand: options, -np N, command; the launcher runs
// options, --app FILE, with one line per rank giving it its own token.
struct MpirunCommand {
  std::vector<std::string> options, command;
  std::vector<std::string> by_hand(int ranks) const;
};

// `local`: every rank on this host; `control_address`: the control
// server's (its network carries Open MPI's channels across hosts; empty in
// a dry run).
MpirunCommand mpirun_command(const LaunchCommand& c, const std::filesystem::path& run_dir, bool local,
                             const std::string& control_address, int ranks, const std::vector<HostSlots>& hosts,
                             int attempt);

// Writes RUN/launch/appfile-<attempt> (mode 0600): rank r's line passes
// its token, the command itself travels in GNNRT_LAUNCH_ARGV (an appfile
// cannot quote an argument). With hosts, each line also names its rank's
// host: ranks fill the hosts' slots in order, as mpirun maps one app context.
std::filesystem::path write_appfile(const std::filesystem::path& run_dir, const JobSecret& secret, int ranks,
                                    int attempt, const std::vector<HostSlots>& hosts,
                                    const std::vector<std::string>& command);

// argv as one would type it in a shell (each argument quoted where needed).
std::string join_command(const std::vector<std::string>& argv);

}  // namespace gnnrt::launch
