// What the launcher knows of a job's ranks while an attempt runs: each
// rank's state as the control server hears it (Supervisor, shared with the
// server's thread), the failures it detects, the job's event log
// (RUN/events.jsonl) and what mpirun's own output says of a rank's end.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/control.pb.h"
#include "launch/control_server.h"
#include "runtime/record_file.h"

namespace gnnrt::launch {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The local time now, ISO 8601 with milliseconds.
std::string now_iso();

// What one rank of the current attempt has said.
struct RankState {
  bool registered = false;
  std::string host;
  int pid = 0;
  Clock::time_point last_heard{}, last_progress{};
  int64_t epoch = 0;
  std::optional<proto::Done> done;
  std::optional<std::string> closed;  // the connection ended (why)
};

struct Failure {
  Failure(std::string k, std::string why, int r = -1, std::string h = "", int p = 0)
      : kind(std::move(k)), reason(std::move(why)), rank(r), host(std::move(h)), pid(p) {}
  std::string kind;    // exit, killed, heartbeat, progress, start, bad_input, launch
  std::string reason;  // one line
  int rank = -1;
  std::string host;
  int pid = 0;
  std::string detected;  // when (ISO time), set by Supervisor::fail
};

// State shared between the control server's thread and the supervisor.
class Supervisor : public ControlServer::Handler {
 public:
  std::mutex mutex;
  int attempt = 0, size = 0;
  std::map<ControlServer::SessionId, int> session_rank;
  std::vector<RankState> ranks;
  proto::Progress latest;  // rank 0's newest epoch
  bool has_latest = false;
  int64_t start_epoch = -1;  // the first epoch rank 0 reported in this attempt, minus one
  std::string first_progress;  // when it arrived (ISO time)
  Clock::time_point attempt_start{};
  std::optional<Failure> failure;  // the first failure of this attempt
  std::vector<std::pair<int64_t, double>> epoch_times;  // for the ETA
  struct Notice {
    int rank;
    proto::Notice notice;
  };
  std::vector<Notice> notices;  // not yet shown

  // What mpirun's output (this attempt's part of its log, from `offset`)
  // says of `failure`, after every process of the attempt is gone: the rank
  // a signal ended when none was blamed (one killed after it reported its
  // work done, in MPI_Finalize, leaves no other trace), and a rank that
  // ended with status 2 before it could say so is bad input. Returns
  // mpirun's verdict (mpirun_verdict).
  std::string attribute(Failure& failure, const std::filesystem::path& log, uintmax_t offset);

  void begin(int a, int n) {
    std::lock_guard lock(mutex);
    attempt = a;
    size = n;
    session_rank.clear();
    ranks.assign(static_cast<size_t>(n), RankState{});
    has_latest = false;
    start_epoch = -1;
    attempt_start = Clock::now();
    failure.reset();
    epoch_times.clear();
  }
  void fail(Failure f) {  // caller holds the lock
    if (failure) return;
    f.detected = now_iso();
    failure = std::move(f);
  }

  bool on_hello(ControlServer::SessionId id, const proto::Hello& h) override {
    std::lock_guard lock(mutex);
    if (h.attempt() != attempt || h.rank() < 0 || h.rank() >= size || h.size() != size ||
        ranks[static_cast<size_t>(h.rank())].registered) {
      spdlog::warn("control: refused a hello from rank {} of {} (attempt {}, pid {} on {}): not of attempt {} "
                   "with {} ranks, or registered twice",
                   h.rank(), h.size(), h.attempt(), h.pid(), h.host(), attempt, size);
      return false;
    }
    auto& r = ranks[static_cast<size_t>(h.rank())];
    r.registered = true;
    r.host = h.host();
    r.pid = h.pid();
    r.last_heard = r.last_progress = Clock::now();
    session_rank[id] = h.rank();
    spdlog::info("rank {} registered: host {}, pid {}", h.rank(), h.host(), h.pid());
    return true;
  }
  void on_message(ControlServer::SessionId id, const proto::RankMessage& m) override {
    std::lock_guard lock(mutex);
    const auto it = session_rank.find(id);
    if (it == session_rank.end()) return;
    auto& r = ranks[static_cast<size_t>(it->second)];
    r.last_heard = Clock::now();
    if (m.has_progress() && m.progress().within_epoch()) {
      // A batch job's step inside an epoch: progress, not a finished epoch.
      r.epoch = m.progress().epoch();
      r.last_progress = Clock::now();
      if (it->second == 0) {
        if (!has_latest) latest = m.progress();
        has_latest = true;
        latest.set_step(m.progress().step());
      }
    } else if (m.has_progress()) {
      r.epoch = m.progress().epoch();
      r.last_progress = Clock::now();
      if (it->second == 0) {
        if (start_epoch < 0) {
          start_epoch = m.progress().epoch() - 1;
          first_progress = now_iso();
        }
        // An epoch's end keeps the last step reported within it.
        const std::optional<int64_t> step =
            latest.has_step() ? std::optional<int64_t>(latest.step()) : std::nullopt;
        latest = m.progress();
        if (step && !latest.has_step()) latest.set_step(*step);
        has_latest = true;
        epoch_times.emplace_back(m.progress().epoch(), m.progress().ms());
      }
    } else if (m.has_notice()) {
      notices.push_back({it->second, m.notice()});
    } else if (m.has_done()) {
      r.done = m.done();
      if (m.done().status() != 0) {
        // Status 2 is bad input (a job, dataset, checkpoint): the same on a restart.
        fail({m.done().status() == 2 ? "bad_input" : "exit", fmt::format("rank {} on {} (pid {}) stopped with status {}: {}", it->second, r.host, r.pid,
                                  m.done().status(), m.done().error()),
              it->second, r.host, r.pid});
      }
    }
  }
  void on_closed(ControlServer::SessionId id, const std::string& reason) override {
    std::lock_guard lock(mutex);
    const auto it = session_rank.find(id);
    if (it == session_rank.end()) return;
    auto& r = ranks[static_cast<size_t>(it->second)];
    r.closed = reason;
    if (!r.done) {
      fail({"killed", fmt::format("rank {} on {} (pid {}) ended without finishing ({})", it->second, r.host,
                                  r.pid, reason),
            it->second, r.host, r.pid});
    }
  }
};

// RUN/events.jsonl: one whole record per event (runtime/record_file.h: a
// full disk or a crash leaves the whole line or nothing). A record that
// cannot be written is said on the console instead, with its text, so its
// absence is explained and nothing of it is lost.
class Events {
 public:
  explicit Events(const std::filesystem::path& path) : file_(path, RecordFile::Mode::kAppend) {
    if (file_.torn_bytes() > 0) {
      std::cerr << fmt::format("gnnrt launch: {}: cut back a torn last record ({} bytes without a newline)\n",
                               path.string(), file_.torn_bytes());
    }
    if (file_.dropped_lines() > 0) {
      std::cerr << fmt::format("gnnrt launch: {}: dropped {} line(s) that are not whole records (written by an "
                               "older gnnrt)\n", path.string(), file_.dropped_lines());
    }
  }
  void write(nlohmann::json record) {
    record["time"] = now_iso();
    const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    try {
      file_.append(line);
    } catch (const std::runtime_error& e) {
      std::cerr << fmt::format("gnnrt launch: the {} record is not in events.jsonl ({}): {}\n",
                               record.value("event", "?"), e.what(), line);
      spdlog::error("events.jsonl: {}: {}", e.what(), line);
    }
  }

 private:
  RecordFile file_;
};

// Where a restart will resume, for the failure record: the newest
// checkpoint in `dir` that loads, read (and only read: rank 0 sets a bad
// one aside and says so) after every process of the attempt is gone. With
// --hosts this is the folder as this host sees it (rank 0's when it runs
// here or the folder is shared).
nlohmann::json newest_checkpoint_record(const std::filesystem::path& dir);

// The ranks mpirun says ended on a signal, in its order, each with the
// signal as it names it ("9 (Killed)"), from its lines "process rank K with
// PID P on node H exited on signal S (Name)."; rank -1 where K is unreadable.
std::vector<std::pair<int, std::string>> mpirun_signals(const std::string& output);

// The exit code or signal mpirun reported for a rank, from its own words:
// a signal (mpirun_signals), or "Exit code:    N" in its report of the
// first process that failed.
std::string mpirun_verdict(const std::string& output, const std::vector<std::pair<int, std::string>>& signals,
                           int rank);

}  // namespace gnnrt::launch
