// A rank's side of the launcher's control protocol (docs/launcher.md).
// Started when the launcher's variables are in the environment
// (GNNRT_LAUNCH_ADDR, GNNRT_LAUNCH_TOKEN): a thread of its own connects,
// registers (rank, host, pid), sends a heartbeat every second, forwards the
// progress the trainer reports, and listens for the launcher's pings and
// stop request. A rank that loses its launcher (the connection closes, or
// no ping for the lost-launcher timeout) ends itself at once, so no rank
// outlives its launcher on any host.
//
// Fault injection from outside, for bench/chaos.py (GNNRT_CHAOS=1): SIGUSR1
// makes the rank hang at its next epoch boundary (heartbeats go on), SIGUSR2
// makes it exit with status 3 there; kill and stop are SIGKILL and SIGSTOP.
//
// Fault injection for the tests (GNNRT_FAULT=KIND:RANK:EPOCH): after epoch
// EPOCH, rank RANK crashes (kill: SIGKILL itself; exit: exit status 3),
// hangs (hang: the training thread sleeps, heartbeats go on) or goes silent
// (silent: SIGSTOP itself, so neither heartbeats nor progress come);
// KIND noregister makes rank RANK never connect (EPOCH ignored); flip makes
// it flip a bit of its parameters after epoch EPOCH's step (0: of its
// initial parameters), a silent corruption the ranks' parameter checksums
// must catch (model::TrainOptions::corrupt_after_epoch; also without the
// launcher, under plain mpirun).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace gnnrt::launch {

namespace proto {
class Progress;
}

struct Fault {
  enum class Kind { kKill, kExit, kHang, kSilent, kNoRegister, kFlip, kKillDone };
  Kind kind = Kind::kKill;
  int rank = 0;
  int64_t epoch = 0;
  // Parses KIND:RANK:EPOCH; throws std::invalid_argument naming the text.
  static Fault parse(const std::string& text);
};

class ControlClient {
 public:
  // Null when this process was not started by `gnnrt launch`.
  static std::unique_ptr<ControlClient> from_environment(int rank, int size);
  ~ControlClient();

  void progress(const proto::Progress& p);
  // A line for the launcher's console and events.jsonl (level: warning or info).
  void notice(const std::string& level, const std::string& text);
  // The command ended (status 0: done or stopped); sent and flushed before
  // the process exits, so the launcher knows the end was intended.
  void done(int status, const std::string& error, bool stopped, int64_t resumed_after = 0);
  // The launcher asked the job to stop at the next step boundary.
  bool stop_requested() const;
  // Applies GNNRT_FAULT after `epoch` if it names this rank.
  void inject_fault(int64_t epoch);

  struct State;

 private:
  explicit ControlClient(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace gnnrt::launch
