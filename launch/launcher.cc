#include "launch/launcher.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <sys/types.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/process.hpp>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "launch/console.h"
#include "launch/control_server.h"
#include "launch/hosts.h"
#include "launch/mpirun_command.h"
#include "launch/network_namespace.h"
#include "launch/supervisor.h"
#include "launch/tokens.h"
#include "model/job.h"
#include "runtime/atomic_file.h"

namespace gnnrt::launch {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace fs = std::filesystem;

namespace {

// Whether `child` exits within `seconds`; polled, since Boost 1.74's
// child::wait_for can oversleep its timeout.
bool exited_within(bp::child& child, double seconds) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (child.running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !child.running();
}


// A file of the run directory, replaced atomically (an old one stays whole
// on a full disk); a failure is a warning on the console, the job goes on.
void write_or_warn(const fs::path& path, const std::string& text) {
  try {
    write_file_atomically(path, text);
  } catch (const std::exception& e) {
    std::cerr << "gnnrt launch: warning: " << e.what() << "\n";
    spdlog::warn("{}", e.what());
  }
}

std::vector<std::string> last_lines(const fs::path& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  return {lines.begin(), lines.end()};
}



class Launcher {
 public:
  explicit Launcher(LaunchCommand& c) : c_(c) {}
  int run();

 private:
  MpirunCommand command_for(int ranks, const std::vector<HostSlots>& hosts, int attempt) const {
    return mpirun_command(c_, run_dir_, local_, address_, ranks, hosts, attempt);
  }
  void prepare_run_dir();
  void choose_network();
  void start_control_server();
  void export_rank_environment();
  int run_attempts(std::vector<HostSlots> hosts);
  bool keep_answering_hosts(std::vector<HostSlots>& hosts, int& ranks);
  void report_failure();
  // Runs one attempt; returns true when the job finished (or stopped on request).
  bool attempt(int index, int ranks, const std::vector<HostSlots>& hosts);
  bool stopped_by_signal(int index, bp::child& mpirun, bp::group& group);
  void check_ranks(Supervisor& s, int ranks, const fs::path& appfile, bool& appfile_gone);
  void record_failure(int index, Failure failure, const fs::path& mpirun_log, uintmax_t log_offset);
  void stop_job(bp::child& mpirun, bp::group& group, bool rank_ended = false);
  void kill_job_processes() const;
  bool host_answers(const HostSlots& h) const;
  void show_progress(bool final);
  // The ranks' notices not yet shown: one line each on the console, and an
  // event (events.jsonl).
  void show_notices(int attempt);
  // The checkpoint folder the ranks write (the job's, or RUN/checkpoints).
  fs::path effective_checkpoint_dir() const {
    return c_.job.checkpoint().dir().empty() ? run_dir_ / "checkpoints" : fs::path(c_.job.checkpoint().dir());
  }

  LaunchCommand& c_;
  fs::path run_dir_;
  std::optional<JobSecret> secret_;
  std::string job_id_, address_;
  bool local_ = true;  // every rank on this host
  bool isolated_ = false;  // in a loopback-only network namespace (network_namespace.h)
  asio::io_context io_;
  Supervisor supervisor_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<Events> events_;
  std::atomic<int> signals_{0};
  std::atomic<int> last_signal_{0};
  std::atomic<bool> stop_sent_{false};
  int restarts_ = 0;
  bool tty_ = false;
  Clock::time_point last_line_{};
  std::string last_progress_line_;
  std::optional<Failure> first_failure_, last_failure_;
  fs::path first_failure_log_;
  std::string first_failure_verdict_;
};

void Launcher::show_progress(bool final) {
  std::string line;
  {
    std::lock_guard lock(supervisor_.mutex);
    if (!supervisor_.has_latest) return;
    const auto& p = supervisor_.latest;
    double ms = 0;
    const auto& times = supervisor_.epoch_times;
    const size_t k = std::min<size_t>(times.size(), 10);
    for (size_t i = times.size() - k; i < times.size(); ++i) ms += times[i].second;
    ms = k ? ms / static_cast<double>(k) : 0;
    const double eta = ms * static_cast<double>(std::max<int64_t>(0, p.epochs() - p.epoch())) / 1e3;
    line = fmt::format("epoch {}/{}{} loss {:.4f} train {:.4f} val {:.4f} | {:.1f} ms/epoch | ETA {:.1f} s | "
                       "restarts {}/{}",
                       p.epoch(), p.epochs(), p.has_step() ? fmt::format(" step {}", p.step()) : std::string(),
                       p.loss(), p.train_acc(), p.val_acc(), ms, eta, restarts_, c_.max_restarts);
  }
  if (line == last_progress_line_ && !(tty_ && final)) return;
  if (tty_) {
    std::cout << "\r\033[K" << line << (final ? "\n" : "") << std::flush;
    last_progress_line_ = line;
  } else if (final || since(last_line_) >= 1.0) {
    last_progress_line_ = line;
    std::cout << line << '\n' << std::flush;
    last_line_ = Clock::now();
  }
}

void Launcher::show_notices(int attempt) {
  std::vector<Supervisor::Notice> notices;
  {
    std::lock_guard lock(supervisor_.mutex);
    notices.swap(supervisor_.notices);
  }
  for (const auto& n : notices) {
    const bool warning = n.notice.level() == "warning";
    std::cerr << (tty_ ? "\r\033[K" : "") << "gnnrt launch: rank " << n.rank << ": " << (warning ? "warning: " : "")
              << n.notice.text() << "\n";
    events_->write({{"event", "notice"}, {"attempt", attempt}, {"rank", n.rank}, {"level", n.notice.level()},
                    {"message", n.notice.text()}});
  }
}

bool Launcher::host_answers(const HostSlots& h) const {
  std::vector<std::string> a{"mpirun"};
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"--host", h.host + ":1", "-np", "1"});
  for (const auto& m : c_.mpirun_args) a.push_back(m);
  a.push_back("true");
  try {
    bp::group g;
    bp::child probe(bp::search_path("mpirun"), std::vector<std::string>(a.begin() + 1, a.end()), g,
                    bp::std_out > bp::null, bp::std_err > bp::null, bp::std_in < bp::null);
    if (exited_within(probe, 15)) return probe.exit_code() == 0;
    ::kill(probe.id(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::error_code ec;
    g.terminate(ec);
    probe.wait(ec);
  } catch (const std::exception& e) {
    spdlog::warn("probing host {}: {}", h.host, e.what());
  }
  return false;
}

void Launcher::stop_job(bp::child& mpirun, bp::group& group, bool rank_ended) {
  // When a rank ended, mpirun aborts the job itself: let it (a SIGTERM in
  // the middle of its abort can crash it before it reports the rank).
  if (rank_ended) exited_within(mpirun, c_.grace);
  if (mpirun.running()) {
    ::kill(mpirun.id(), SIGTERM);  // mpirun stops every rank on every host
    if (!exited_within(mpirun, c_.grace)) {
      spdlog::warn("mpirun did not stop within {:.1f} s of SIGTERM: SIGKILL to its process group", c_.grace);
      std::error_code ec;
      group.terminate(ec);
    }
  }
  // Ranks whose connection is closed end themselves (on every host). On
  // this host, any process of the job still alive (a SIGSTOPped rank, one
  // that never registered) is killed: found by the job's token in its
  // environment, which Open MPI passes to every rank it starts (the ranks
  // are in process groups of their own, out of reach of mpirun's).
  asio::post(io_, [this] { server_->close_all(); });
  kill_job_processes();
  std::error_code ec;
  mpirun.wait(ec);
}

void Launcher::kill_job_processes() const {
  const std::string marker = "GNNRT_LAUNCH_JOB=" + job_id_;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int pid = std::stoi(name);
    if (pid == getpid()) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string variable;
    while (std::getline(in, variable, '\0')) {
      if (variable == marker) {
        ::kill(pid, SIGKILL);
        break;
      }
    }
  }
}

bool Launcher::attempt(int index, int ranks, const std::vector<HostSlots>& hosts) {
  supervisor_.begin(index, ranks);
  setenv("GNNRT_LAUNCH_ATTEMPT", std::to_string(index).c_str(), 1);
  // The injected fault is for the first attempt only (local ranks inherit
  // mpirun's whole environment, so it must leave the environment too).
  if (index == 0 && !c_.fault.empty()) {
    setenv("GNNRT_FAULT", c_.fault.c_str(), 1);
  } else {
    unsetenv("GNNRT_FAULT");
  }
  const MpirunCommand command = command_for(ranks, hosts, index);
  // The command as one would type it (without the launcher's tokens), and
  // what runs: the same options with an appfile of one line per rank.
  const std::string line = join_command(command.by_hand(ranks));
  spdlog::info("attempt {}: {}", index, line);
  if (index == 0) std::cerr << "gnnrt launch: " << line << "\n";
  events_->write({{"event", index == 0 ? "start" : "restart"}, {"attempt", index}, {"ranks", ranks},
                  {"command", line}});
  const fs::path appfile = write_appfile(run_dir_, *secret_, ranks, index, hosts, command.command);
  std::vector<std::string> argv = command.options;
  argv.insert(argv.end(), {"--app", appfile.string()});
  spdlog::info("attempt {}: runs {} (each rank's token in its line of the appfile; its arguments in "
               "GNNRT_LAUNCH_ARGV)", index, join_command(argv));
  // mpirun's output (the ranks' stdout and stderr) goes to logs/mpirun.log
  // for train (the terminal shows the progress line), and to the terminal
  // for commands that print results (bench).
  const fs::path mpirun_log = run_dir_ / "logs" / "mpirun.log";
  const auto log_offset = fs::exists(mpirun_log) ? fs::file_size(mpirun_log) : 0;
  std::FILE* log_file = std::fopen(mpirun_log.c_str(), "a");
  if (log_file == nullptr) throw std::runtime_error("cannot write " + mpirun_log.string());
  std::fprintf(log_file, "== attempt %d: %s\n", index, line.c_str());
  std::fflush(log_file);
  bp::group group;
  bp::child mpirun = c_.is_train
                         ? bp::child(bp::search_path("mpirun"), std::vector<std::string>(argv.begin() + 1, argv.end()),
                                     group, (bp::std_out & bp::std_err) > log_file, bp::std_in < bp::null)
                         : bp::child(bp::search_path("mpirun"), std::vector<std::string>(argv.begin() + 1, argv.end()),
                                     group, bp::std_in < bp::null);
  std::fclose(log_file);
  bool finished = false, resumed = false;
  // A restart from the final checkpoint has no epoch left to report: its
  // resume point comes with rank 0's end (caller holds the lock).
  const auto resumed_without_epochs = [&](const Supervisor& s) {
    if (!c_.is_train || resumed || s.has_latest || s.ranks.empty() || !s.ranks[0].done || s.ranks[0].done->status() != 0) return;
    const int64_t after = s.ranks[0].done->resumed_after();
    if (index == 0 && after == 0) return;
    resumed = true;
    events_->write({{"event", "training"}, {"attempt", index}, {"epoch", after + 1}, {"resumed_after", after},
                    {"at", now_iso()}});
  };
  std::optional<Clock::time_point> all_done_since;
  bool appfile_gone = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stopped_by_signal(index, mpirun, group)) break;
    show_notices(index);
    if (c_.is_train) show_progress(false);
    std::lock_guard lock(supervisor_.mutex);
    auto& s = supervisor_;
    if (s.has_latest && !resumed && (index > 0 || s.start_epoch > 0)) {
      resumed = true;  // training again: the first epoch of a restart
      events_->write({{"event", "training"}, {"attempt", index}, {"epoch", s.start_epoch + 1},
                      {"resumed_after", s.start_epoch}, {"at", s.first_progress}});
    }
    resumed_without_epochs(s);
    bool all_done = true;
    for (const auto& r : s.ranks) all_done = all_done && r.done && r.done->status() == 0;
    if (!mpirun.running()) {
      // The ranks' last frames may still be on their way to the io thread:
      // wait (1 s at most) until every registered rank's connection ended.
      const auto deadline = Clock::now() + std::chrono::seconds(1);
      for (;;) {
        bool settled = true;
        for (const auto& r : s.ranks) settled = settled && (!r.registered || r.closed || r.done);
        if (settled || Clock::now() > deadline) break;
        supervisor_.mutex.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        supervisor_.mutex.lock();
      }
      all_done = true;
      for (const auto& r : s.ranks) all_done = all_done && r.done && r.done->status() == 0;
      if (mpirun.exit_code() == 0 && all_done) {
        resumed_without_epochs(s);
        finished = true;
        break;
      }
      s.fail({"exit", fmt::format("mpirun exited with status {}", mpirun.exit_code())});
      break;
    }
    if (s.failure) break;
    if (all_done) {
      // Every rank finished its command; mpirun and the ranks only have to
      // exit. Whatever hangs in that (MPI_Finalize, a daemon), the job's
      // work is done: stopped after the grace period plus 10 s.
      if (!all_done_since) all_done_since = Clock::now();
      if (since(*all_done_since) > c_.grace + 10) {
        spdlog::warn("every rank finished, but mpirun did not exit within {:.0f} s: stopping it", c_.grace + 10);
        events_->write({{"event", "warning"}, {"attempt", index},
                        {"reason", "every rank finished, but mpirun did not exit: stopped"}});
        finished = true;
        break;
      }
      continue;
    }
    check_ranks(s, ranks, appfile, appfile_gone);
    if (s.failure) break;
  }
  std::optional<Failure> failure;
  {
    std::lock_guard lock(supervisor_.mutex);
    failure = supervisor_.failure;
  }
  if (!finished && failure) {
    spdlog::error("attempt {} failed: {}", index, failure->reason);
  }
  // A silent or stuck rank of this host goes first, by SIGKILL: mpirun
  // wakes stopped ranks (SIGCONT) before it terminates them, and a woken
  // rank would train on (and checkpoint) while the job is being stopped.
  bool rank_ended = failure && (failure->kind == "killed" || failure->kind == "exit");
  if (!finished && failure && (failure->kind == "heartbeat" || failure->kind == "progress") && failure->pid > 0 &&
      failure->host == this_host()) {
    ::kill(failure->pid, SIGKILL);
    rank_ended = true;  // mpirun now aborts the job itself, as for a rank that died
  }
  // Stopping twice is harmless (mpirun has been waited for); a finished
  // job's mpirun has exited, or is stopped here after the finish deadline.
  stop_job(mpirun, group, rank_ended);
  show_notices(index);
  std::error_code gone;
  fs::remove(appfile, gone);  // when not every rank registered
  if (c_.is_train) show_progress(true);
  if (finished) {
    bool stopped = false;
    {
      std::lock_guard lock(supervisor_.mutex);
      for (const auto& r : supervisor_.ranks) stopped = stopped || (r.done && r.done->stopped());
    }
    events_->write({{"event", stopped ? "stopped" : "finish"}, {"attempt", index}, {"status", 0}});
    return true;
  }
  if (!failure) return false;  // stopped at once by a second signal
  record_failure(index, *failure, mpirun_log, log_offset);
  return false;
}

// The user's signals: the first asks the ranks to stop at the next step
// boundary (a checkpoint is written; a bench, with nothing to checkpoint,
// stops now), a second stops the job at once. True when the job was stopped.
bool Launcher::stopped_by_signal(int index, bp::child& mpirun, bp::group& group) {
  const int signals = signals_.load();
  if (signals == 1 && !stop_sent_) {
    stop_sent_ = true;
    std::cerr << (tty_ ? "\n" : "")
              << "gnnrt launch: stopping at the next step boundary (a checkpoint is written); "
                 "signal again to stop at once\n";
    events_->write({{"event", "stop_requested"}, {"attempt", index}, {"signal", last_signal_.load()}});
    proto::LauncherMessage stop;
    stop.set_stop(true);
    asio::post(io_, [this, stop] { server_->broadcast(stop); });
    if (!c_.is_train) {
      stop_job(mpirun, group);
      return true;
    }
  }
  if (signals >= 2) {
    stop_job(mpirun, group);
    return true;
  }
  return false;
}

// The attempt's ranks against their deadlines: registration (the appfile
// removed once every rank has), heartbeats, and the slowest rank's
// progress; a rank past one fails the attempt (caller holds the lock).
void Launcher::check_ranks(Supervisor& s, int ranks, const fs::path& appfile, bool& appfile_gone) {
  int registered = 0;
  for (size_t k = 0; k < s.ranks.size(); ++k) {
    const auto& r = s.ranks[k];
    if (!r.registered) continue;
    ++registered;
    if (!r.done && !r.closed && since(r.last_heard) > c_.heartbeat_timeout) {
      s.fail({"heartbeat", fmt::format("rank {} on {} (pid {}) sent no heartbeat for {:.1f} s", k, r.host, r.pid,
                                       since(r.last_heard)),
              static_cast<int>(k), r.host, r.pid});
    }
  }
  if (registered == ranks && !appfile_gone) {
    // Its tokens are of no use once every rank has registered.
    std::error_code gone;
    fs::remove(appfile, gone);
    appfile_gone = true;
  }
  if (!s.failure && registered < ranks && since(s.attempt_start) > c_.start_timeout) {
    std::string missing;
    for (size_t k = 0; k < s.ranks.size(); ++k) {
      if (!s.ranks[k].registered) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    }
    s.fail({"start", fmt::format("rank(s) {} did not register within {:.0f} s", missing, c_.start_timeout)});
  }
  if (!s.failure && c_.is_train && registered == ranks) {
    // The job's progress is its slowest rank's. In a job that moves in
    // lock step every rank waits at the same epoch; a rank behind the
    // others is the suspect.
    std::optional<size_t> slowest;
    int64_t lo = s.ranks[0].epoch, hi = s.ranks[0].epoch;
    for (size_t k = 0; k < s.ranks.size(); ++k) {
      lo = std::min(lo, s.ranks[k].epoch);
      hi = std::max(hi, s.ranks[k].epoch);
      if (s.ranks[k].done) continue;
      if (!slowest || s.ranks[k].last_progress < s.ranks[*slowest].last_progress) slowest = k;
    }
    if (slowest && since(s.ranks[*slowest].last_progress) > c_.progress_timeout) {
      const auto& r = s.ranks[*slowest];
      if (lo == hi) {
        s.fail({"progress", fmt::format("no progress for {:.1f} s: every rank is at epoch {}",
                                        since(r.last_progress), lo)});
      } else {
        s.fail({"progress", fmt::format("no progress for {:.1f} s: rank {} on {} (pid {}) is at epoch {}, others at {}",
                                        since(r.last_progress), *slowest, r.host, r.pid, r.epoch, hi),
                static_cast<int>(*slowest), r.host, r.pid});
      }
    }
  }
}

// The failed attempt's record (events.jsonl, the console), after every
// process of it is gone: the rank and mpirun's verdict from mpirun's output
// (this attempt's part of its log), and the checkpoint a restart resumes from.
void Launcher::record_failure(int index, Failure failure, const fs::path& mpirun_log, uintmax_t log_offset) {
  const std::string verdict = supervisor_.attribute(failure, mpirun_log, log_offset);
  const fs::path log = failure.rank >= 0 ? run_dir_ / "logs" / fmt::format("rank-{}.log", failure.rank)
                                          : run_dir_ / "logs" / "mpirun.log";
  nlohmann::json record{{"event", "failure"}, {"attempt", index}, {"kind", failure.kind},
                        {"reason", failure.reason}, {"detected", failure.detected}};
  if (failure.rank >= 0) {
    record["rank"] = failure.rank;
    record["host"] = failure.host;
    record["pid"] = failure.pid;
  }
  // Where a restart will resume: the newest checkpoint that loads, read
  // (and only read: rank 0 sets a bad one aside and says so) after every
  // process of the attempt is gone. With --hosts this is the folder as
  // this host sees it (rank 0's when it runs here or the folder is shared).
  if (c_.is_train) record["checkpoint"] = newest_checkpoint_record(effective_checkpoint_dir());
  if (!verdict.empty()) record["mpirun"] = verdict;
  events_->write(record);
  std::cerr << (tty_ ? "\n" : "") << "gnnrt launch: attempt " << index << " failed: " << failure.reason
            << (verdict.empty() ? "" : " [mpirun: " + verdict + "]") << "\n";
  last_failure_ = failure;
  if (!first_failure_) {
    first_failure_ = failure;
    first_failure_log_ = log;
    first_failure_verdict_ = verdict;
  }
}

int Launcher::run() {
  tty_ = isatty(1) != 0;
  run_dir_ = fs::absolute(c_.run_dir);
  local_ = every_host_is_this_one(c_.hosts);
  // Hosts that are all this one: a single-host job (no --host: inside the
  // job's loopback-only namespace this host's other addresses are gone).
  const std::vector<HostSlots> named_hosts = local_ ? std::vector<HostSlots>{} : c_.hosts;
  if (c_.dry_run) {
    std::cout << join_command(command_for(c_.ranks, named_hosts, 0).by_hand(c_.ranks)) << "\n";
    return 0;
  }
  prepare_run_dir();
  if (bp::search_path("mpirun").empty()) {
    throw std::runtime_error("launch: mpirun is not on PATH (Debian: apt-get install openmpi-bin)");
  }
  secret_ = JobSecret::draw();
  job_id_ = random_job_id();
  choose_network();
  start_control_server();
  export_rank_environment();
  asio::signal_set signals(io_, SIGINT, SIGTERM);
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
    if (ec) return;
    last_signal_ = sig;
    ++signals_;
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);
  // The control server's pings: a rank that hears nothing ends itself.
  asio::steady_timer ping(io_);
  std::function<void(boost::system::error_code)> on_ping = [&](boost::system::error_code ec) {
    if (ec) return;
    proto::LauncherMessage m;
    m.set_ping(true);
    server_->broadcast(m);
    if (stop_sent_) {  // again every second: ranks that registered since hear it too
      proto::LauncherMessage stop;
      stop.set_stop(true);
      server_->broadcast(stop);
    }
    ping.expires_after(std::chrono::seconds(1));
    ping.async_wait(on_ping);
  };
  ping.expires_after(std::chrono::seconds(1));
  ping.async_wait(on_ping);
  std::thread io_thread([this] { io_.run(); });
  // Whatever ends this function (an exception too), the io thread stops and
  // is joined first.
  struct JoinIo {
    asio::io_context& io;
    std::thread& thread;
    ~JoinIo() {
      io.stop();
      if (thread.joinable()) thread.join();
    }
  } join_io{io_, io_thread};

  const int status = run_attempts(named_hosts);
  std::promise<void> closed;
  asio::post(io_, [&] {
    signals.cancel();
    ping.cancel();
    server_->close_all();
    closed.set_value();
  });
  closed.get_future().wait_for(std::chrono::seconds(2));
  io_.stop();
  io_thread.join();
  if (status != 0) report_failure();
  return status;
}

// The run directory: logs (the launcher's own log), events.jsonl, no stale
// appfiles, the job the ranks train.
void Launcher::prepare_run_dir() {
  fs::create_directories(run_dir_ / "logs");
  {
    // The launcher's own log: every line in logs/launcher.log, errors on the terminal.
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((run_dir_ / "logs" / "launcher.log").string());
    auto console = console_sink(2);
    // The terminal gets the launcher's own lines (std::cerr) and the
    // progress line; only a critical log line goes there too.
    console->set_level(spdlog::level::critical);
    auto logger = std::make_shared<spdlog::logger>("launch", spdlog::sinks_init_list{file, console});
    logger->set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [launcher host {}] [%^%l%$] %v", this_host()));
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  events_ = std::make_unique<Events>(run_dir_ / "events.jsonl");
  {
    // A killed launcher's appfiles (ranks' tokens of attempts long gone).
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(run_dir_ / "launch", ec)) {
      if (entry.path().filename().string().rfind("appfile-", 0) == 0) fs::remove(entry.path(), ec);
    }
  }
  if (c_.is_train) {
    // The job the ranks train: the user's overrides and the launcher's.
    model::proto::Job job = c_.job;
    if (job.checkpoint().dir().empty()) job.mutable_checkpoint()->set_dir((run_dir_ / "checkpoints").string());
    if (job.checkpoint().every() == 0) job.mutable_checkpoint()->set_every(1);
    write_or_warn(run_dir_ / "job.pbtxt", model::to_text(job));
  }
}

// A single-host job in a loopback-only network namespace when it can be;
// the control address.
void Launcher::choose_network() {
  boost::system::error_code named_ec;
  const bool loopback_control =
      c_.control_address.empty() || asio::ip::make_address(c_.control_address, named_ec).is_loopback();
  if (local_ && loopback_control) {
    // Before any thread and socket of the launcher's: the whole job in a
    // network of loopback only. (A --control-address off loopback is the
    // user's wish to be reached: the job then keeps this host's network.)
    if (const std::string why = enter_loopback_only_network(); !why.empty()) {
      std::cerr << "gnnrt launch: warning: the job keeps this host's network (" << why
                << "): Open MPI's out-of-band listener is open on every address of this host\n";
      spdlog::warn("no network namespace of the job's own ({}): Open MPI's out-of-band listener is open on every "
                   "address of this host", why);
    } else {
      isolated_ = true;
      spdlog::info("the job runs in a network namespace of its own with loopback only");
    }
  }
  address_ = !c_.control_address.empty() ? c_.control_address
             : c_.hosts.empty() || local_  ? "127.0.0.1"
                                           : control_address_for(c_.hosts);
  if (!local_) {
    boost::system::error_code ec;
    const auto control = asio::ip::make_address(address_, ec);
    const bool named = std::find(c_.mpirun_args.begin(), c_.mpirun_args.end(), "oob_tcp_if_include") != c_.mpirun_args.end();
    if (!named && (ec || network_of(control).empty())) {
      std::cerr << "gnnrt launch: warning: the control address " << address_ << " is on no interface of this host: "
                << "Open MPI's channels are not kept to one network (--mpirun-arg=--mca "
                   "--mpirun-arg=oob_tcp_if_include --mpirun-arg=NET does it)\n";
    }
  }
}

// The control server on the control address, and control.json naming it.
void Launcher::start_control_server() {
  ControlLimits limits;
  limits.max_registered = 4 * c_.ranks + 16;
  // Silence is the supervisor's to judge (it names the rank); the server's
  // idle limit only ends connections nobody watches any more.
  limits.idle_seconds = c_.heartbeat_timeout + 10;
  // A hello must carry the token of the rank and attempt it claims (the
  // supervisor then refuses other attempts and ranks registered twice).
  const JobSecret& secret = *secret_;
  try {
    server_ = std::make_unique<ControlServer>(
        io_, asio::ip::make_address(address_),
        [&secret](const proto::Hello& h) { return secret.accepts(h.token(), h.rank(), h.attempt()); }, limits,
        supervisor_);
  } catch (const boost::system::system_error& e) {
    throw std::invalid_argument(fmt::format("launch: the control server cannot listen on {}{}: {}", address_,
                                            c_.control_address.empty() ? "" : " (--control-address)",
                                            e.code().message()));
  }
  const auto endpoint = server_->endpoint();
  {
    // With its own network namespace, the address is reachable inside it
    // only (nsenter --net=/proc/PID/ns/net).
    nlohmann::json where{{"address", endpoint.address().to_string()}, {"port", endpoint.port()}, {"pid", getpid()},
                         {"network_namespace", isolated_ ? fmt::format("/proc/{}/ns/net", getpid()) : ""}};
    write_or_warn(run_dir_ / "control.json", where.dump() + '\n');
  }
}

// What every rank reads from its environment: the control address, the
// job, the log folder, the lost-launcher timeout, colour.
void Launcher::export_rank_environment() {
  const auto endpoint = server_->endpoint();
  setenv("GNNRT_LAUNCH_ADDR", fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port()).c_str(), 1);
  setenv("GNNRT_LAUNCH_JOB", job_id_.c_str(), 1);
  unsetenv("GNNRT_LAUNCH_TOKEN");  // a launcher started by a launcher's rank holds none of its own
  setenv("GNNRT_LOG_DIR", (run_dir_ / "logs").c_str(), 1);
  setenv("GNNRT_LAUNCH_LOST_TIMEOUT", fmt::format("{}", c_.heartbeat_timeout).c_str(), 1);
  // The ranks' colour: a rank cannot tell (its output is Open MPI's
  // pseudo-terminal), so the launcher says. A train job's ranks write to
  // logs/mpirun.log; a bench's to the launcher's own stderr.
  setenv("GNNRT_COLOR", color() == ColorWhen::kAlways ? "always"
                        : color() == ColorWhen::kNever || c_.is_train ? "never"
                        : colored(2)                  ? "always"
                                                      : "never",
         1);
}

// Attempts until one finishes, a signal stops the job, the input is bad or
// the restarts are used up; the launcher's exit status.
int Launcher::run_attempts(std::vector<HostSlots> hosts) {
  int ranks = c_.ranks;
  int status = 1;
  for (int index = 0;; ++index) {
    bool finished = false, started = true;
    try {
      finished = attempt(index, ranks, hosts);
    } catch (const std::invalid_argument& e) {
      // An attempt that can never start (bad usage): no retry.
      events_->write({{"event", "finish"}, {"status", 2}, {"attempts", index + 1}, {"reason", e.what()}});
      throw;
    } catch (const std::exception& e) {
      // The attempt could not start (its appfile on a full disk, mpirun
      // not to be run): a failure like any other, retried after a moment.
      started = false;
      Failure f("launch", fmt::format("attempt {} could not start: {}", index, e.what()));
      f.detected = now_iso();
      std::cerr << "gnnrt launch: " << f.reason << "\n";
      events_->write({{"event", "failure"}, {"attempt", index}, {"kind", f.kind}, {"reason", f.reason},
                      {"detected", f.detected}});
      last_failure_ = f;
      if (!first_failure_) {
        first_failure_ = f;
        first_failure_log_ = run_dir_ / "logs" / "launcher.log";
      }
    }
    if (finished) {
      status = signals_.load() > 0 ? 128 + last_signal_.load() : 0;
      break;
    }
    if (signals_.load() > 0) {
      status = 128 + last_signal_.load();
      events_->write({{"event", "stopped"}, {"attempt", index}, {"signal", last_signal_.load()}});
      break;
    }
    if (last_failure_ && last_failure_->kind == "bad_input") {
      events_->write({{"event", "finish"}, {"status", 1}, {"attempts", index + 1},
                      {"reason", "bad input: a restart would fail the same way"}});
      std::cerr << "gnnrt launch: bad input (exit status 2): not restarting\n";
      break;
    }
    if (restarts_ >= c_.max_restarts) {
      events_->write({{"event", "finish"}, {"status", 1}, {"attempts", index + 1},
                      {"reason", fmt::format("{} restart(s) used up", c_.max_restarts)}});
      break;
    }
    ++restarts_;
    // What kept an attempt from starting (a full disk) may need a moment.
    const double delay = started ? c_.restart_delay : std::max(c_.restart_delay, 1.0);
    if (delay > 0) {
      spdlog::info("restart {} in {:.1f} s", restarts_, delay);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
    // With --min-ranks: go on with the hosts that still answer.
    if (!hosts.empty() && c_.min_ranks < c_.ranks && !keep_answering_hosts(hosts, ranks)) break;
    std::cerr << fmt::format("gnnrt launch: restart {}/{} on {} rank(s), from the newest checkpoint\n", restarts_,
                             c_.max_restarts, ranks);
  }
  return status;
}

// The hosts that still answer, and the ranks they hold (at most --ranks);
// false when fewer than --min-ranks slots are left.
bool Launcher::keep_answering_hosts(std::vector<HostSlots>& hosts, int& ranks) {
  std::vector<HostSlots> alive;
  for (const auto& h : hosts) {
    if (host_answers(h)) {
      alive.push_back(h);
    } else {
      spdlog::error("host {} does not answer: restarting without it", h.host);
      std::cerr << "gnnrt launch: host " << h.host << " does not answer: restarting without it\n";
      events_->write({{"event", "host_lost"}, {"host", h.host}});
    }
  }
  int slots = 0;
  for (const auto& h : alive) slots += h.slots;
  if (slots < c_.min_ranks) {
    events_->write({{"event", "finish"}, {"status", 1},
                    {"reason", fmt::format("{} slot(s) left on the hosts that answer, --min-ranks {}", slots,
                                           c_.min_ranks)}});
    std::cerr << fmt::format("gnnrt launch: only {} rank slot(s) left on the hosts that answer, fewer than "
                             "--min-ranks {}\n",
                             slots, c_.min_ranks);
    return false;
  }
  hosts = alive;
  ranks = std::min(c_.ranks, slots);
  return true;
}

// The first failure on the console: its reason, mpirun's verdict, the last
// lines of its log.
void Launcher::report_failure() {
  if (!first_failure_) return;
  const auto& f = *first_failure_;
  std::cerr << "gnnrt launch: the job failed" << (restarts_ > 0 ? fmt::format(" after {} restart(s)", restarts_) : "")
            << "\n  first failure: " << f.reason
            << (first_failure_verdict_.empty() ? "" : "\n  mpirun says: " + first_failure_verdict_) << "\n";
  const auto lines = last_lines(first_failure_log_, 10);
  if (!lines.empty()) {
    std::cerr << "  last lines of " << first_failure_log_.string() << ":\n";
    for (const auto& l : lines) std::cerr << "    " << l << "\n";
  }
  std::cerr << "  run directory: " << run_dir_.string() << "\n";
}

}  // namespace

int run_launch(LaunchCommand& command) {
  Launcher launcher(command);
  return launcher.run();
}

}  // namespace gnnrt::launch
