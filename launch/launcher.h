// `gnnrt launch`: starts a multi-core job under mpirun, watches it through
// the control protocol, and restarts it from its newest checkpoint when a
// rank fails (docs/launcher.md).
//
// The launcher builds the mpirun command (ranks, hosts, oversubscription,
// binding, the environment the ranks need), prints it, and runs it as a
// child in a process group of its own (Boost.Process). A control server
// (Boost.Asio) on a free port takes each rank's registration, heartbeats,
// progress and end. A rank that exits non-zero, is killed, misses its
// heartbeats, or a job that makes no progress, stops the job: SIGTERM to
// mpirun (which stops every rank on every host), SIGKILL to its group after
// the grace period, every rank's control connection closed (a rank that
// loses its launcher ends itself), and SIGKILL to whatever process of this
// host still carries the job's token (ranks have process groups of their
// own). Then it restarts, up to --max-restarts times, with
// fewer ranks on the hosts that still answer when --min-ranks allows.
#pragma once

#include <string>
#include <vector>

#include "model/job.pb.h"

namespace gnnrt::launch {

struct HostSlots {
  std::string host;
  int slots = 0;
};

struct LaunchCommand {
  int ranks = 0;                       // -n
  std::vector<HostSlots> hosts;        // --hosts H1:S1,...; empty: this host
  std::string run_dir;                 // --run-dir (default runs/<job name>-<time>)
  int max_restarts = 3;
  int min_ranks = 0;                   // 0: -n (never fewer ranks)
  double heartbeat_timeout = 30;       // s without a heartbeat: the rank is lost
  double progress_timeout = 1800;      // s without a finished epoch (train): the job is stuck
  double start_timeout = 300;          // s for every rank to register
  double grace = 5;                    // s between SIGTERM and SIGKILL
  double restart_delay = 0;            // s to wait before each restart
  std::vector<std::string> mpirun_args;  // --mpirun-arg, appended to mpirun's options
  std::string control_address;         // --control-address (default: loopback, or this host's with --hosts)
  std::string fault;                   // hidden --inject-fault KIND:RANK:EPOCH (first attempt only)
  bool dry_run = false;                // print the mpirun command and exit
  // After `--`: the gnnrt command the ranks run (train ... or bench ...).
  std::vector<std::string> command;
  // For train: the resolved job (the ranks' overrides applied) and whether
  // the user named the outputs the launcher sets.
  bool is_train = false;
  model::proto::Job job;
};

// "h1:2,h2:2" -> hosts; throws std::invalid_argument naming the bad part.
std::vector<HostSlots> parse_hosts(const std::string& text);

// Runs the job to its end; returns the exit status (0 done, 1 failed after
// the restarts, 2 bad usage, 128 + signal when stopped by SIGINT/SIGTERM).
int run_launch(LaunchCommand& command);

}  // namespace gnnrt::launch
