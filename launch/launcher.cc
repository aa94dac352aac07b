#include "launch/launcher.h"

#include <fmt/format.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/process.hpp>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "launch/console.h"
#include "launch/control_server.h"
#include "launch/network_namespace.h"
#include "launch/tokens.h"
#include "model/checkpoint.h"
#include "model/job.h"
#include "runtime/atomic_file.h"
#include "runtime/record_file.h"

namespace gnnrt::launch {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string now_iso() {
  const auto t = std::chrono::system_clock::now();
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::string this_host() {
  char buffer[256] = {};
  return gethostname(buffer, sizeof buffer - 1) == 0 ? buffer : "?";
}

// Whether `child` exits within `seconds`; polled, since Boost 1.74's
// child::wait_for can oversleep its timeout.
bool exited_within(bp::child& child, double seconds) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (child.running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !child.running();
}


// This host's IPv4 addresses (every interface's, loopback included).
std::vector<asio::ip::address> local_addresses() {
  std::vector<asio::ip::address> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    found.push_back(asio::ip::address_v4(ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr)));
  }
  freeifaddrs(list);
  return found;
}

// The network (CIDR) of this host's interface that has `address`, e.g.
// "198.18.0.0/24"; "" when no interface has it.
std::string network_of(const asio::ip::address& address) {
  std::string found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_netmask == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    if (asio::ip::address_v4(ip) != address) continue;
    const uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
    found = fmt::format("{}/{}", asio::ip::address_v4(ip & mask).to_string(), __builtin_popcount(mask));
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

namespace {

// A host's first IPv4 endpoint (port 9: only the address counts); throws
// std::invalid_argument naming the host when it does not resolve.
asio::ip::udp::endpoint resolve_ipv4(asio::ip::udp::resolver& resolver, const std::string& host) {
  boost::system::error_code ec;
  const auto found = resolver.resolve(asio::ip::udp::v4(), host, "9", ec);
  if (ec || found.empty()) {
    throw std::invalid_argument(fmt::format("launch: cannot resolve host '{}' ({}) to choose the control server's "
                                            "address; name one with --control-address",
                                            host, ec ? ec.message() : "no IPv4 address"));
  }
  return found.begin()->endpoint();
}

bool is_this_host(const asio::ip::address& address, const std::vector<asio::ip::address>& mine) {
  return address.is_loopback() || std::find(mine.begin(), mine.end(), address) != mine.end();
}

}  // namespace

// With --hosts: the address of this host's interface that routes to the
// first host that is not this one (the kernel's choice for a UDP socket
// connected there; nothing is sent), so that the remote ranks reach the
// control server on the network they share with this host, whatever other
// interfaces it has. Loopback when every host is this one.
std::string control_address_for(const std::vector<HostSlots>& hosts) {
  asio::io_context io;
  asio::ip::udp::resolver resolver(io);
  const auto mine = local_addresses();
  for (const auto& h : hosts) {
    const auto peer = resolve_ipv4(resolver, h.host);
    if (is_this_host(peer.address(), mine)) continue;
    boost::system::error_code ec;
    asio::ip::udp::socket probe(io);
    probe.open(asio::ip::udp::v4(), ec);
    if (!ec) probe.connect(peer, ec);
    if (ec) {
      throw std::invalid_argument(fmt::format("launch: no route from this host to '{}' ({}): {}; name the control "
                                              "server's address with --control-address",
                                              h.host, peer.address().to_string(), ec.message()));
    }
    return probe.local_endpoint().address().to_string();
  }
  return "127.0.0.1";
}

namespace {

// Whether every host of --hosts is this one (resolves to loopback or to an
// address of this host's); an empty list is this host, a host that does
// not resolve is not.
bool every_host_is_this_one(const std::vector<HostSlots>& hosts) {
  asio::io_context io;
  asio::ip::udp::resolver resolver(io);
  const auto mine = local_addresses();
  for (const auto& h : hosts) {
    try {
      if (!is_this_host(resolve_ipv4(resolver, h.host).address(), mine)) return false;
    } catch (const std::invalid_argument&) {
      return false;
    }
  }
  return true;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,@%+") ==
                        std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + shell_quote(a);
  return s;
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
  explicit Events(const fs::path& path) : file_(path, RecordFile::Mode::kAppend) {
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

// The ranks mpirun says ended on a signal, in its order, each with the
// signal as it names it ("9 (Killed)"), from its lines "process rank K with
// PID P on node H exited on signal S (Name)."; rank -1 where K is unreadable.
std::vector<std::pair<int, std::string>> mpirun_signals(const std::string& output) {
  std::vector<std::pair<int, std::string>> signals;
  for (size_t at = output.find("process rank "); at != std::string::npos;
       at = output.find("process rank ", at + 1)) {
    const size_t eol = output.find('\n', at);
    const std::string line = output.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    const size_t on = line.find(" exited on signal ");
    if (on == std::string::npos) continue;
    const std::string signal = line.substr(on + 18);  // "9 (Killed)."
    const size_t close = signal.find(')');
    int who = -1;
    try {
      who = std::stoi(line.substr(13));
    } catch (const std::logic_error&) {
    }
    signals.emplace_back(who, signal.substr(0, close == std::string::npos ? signal.size() : close + 1));
  }
  return signals;
}

// The exit code or signal mpirun reported for a rank, from its own words:
// a signal (mpirun_signals), or "Exit code:    N" in its report of the
// first process that failed.
std::string mpirun_verdict(const std::string& output, const std::vector<std::pair<int, std::string>>& signals,
                           int rank) {
  for (const auto& [who, what] : signals) {
    if (who == rank) return "signal " + what;
  }
  if (!signals.empty()) return fmt::format("signal {} on rank {}", signals[0].second, signals[0].first);
  const size_t code = output.find("Exit code:");
  if (code != std::string::npos) {
    const size_t digits = output.find_first_of("0123456789", code);
    if (digits != std::string::npos) {
      return "exit code " + output.substr(digits, output.find_first_not_of("0123456789", digits) - digits);
    }
  }
  return "";
}

class Launcher {
 public:
  explicit Launcher(LaunchCommand& c) : c_(c) {}
  int run();

 private:
  // mpirun and its options, and the command each rank runs (gnnrt and its
  // arguments). By hand: options, -np N, command; the launcher runs
  // options, --app FILE, with one line per rank giving it its own token.
  struct MpirunCommand {
    std::vector<std::string> options, command;
    std::vector<std::string> by_hand(int ranks) const;
  };
  MpirunCommand mpirun_command(int ranks, const std::vector<HostSlots>& hosts, int attempt) const;
  // Writes RUN/launch/appfile-<attempt> (mode 0600): rank r's line passes
  // its token, the command itself travels in GNNRT_LAUNCH_ARGV (an appfile
  // cannot quote an argument).
  // With hosts, each line also names its rank's host: ranks fill the hosts'
  // slots in order, as mpirun maps one app context.
  fs::path write_appfile(int ranks, int attempt, const std::vector<HostSlots>& hosts,
                         const std::vector<std::string>& command) const;
  // Runs one attempt; returns true when the job finished (or stopped on request).
  bool attempt(int index, int ranks, const std::vector<HostSlots>& hosts);
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

std::vector<std::string> Launcher::MpirunCommand::by_hand(int ranks) const {
  std::vector<std::string> a = options;
  a.insert(a.end(), {"-np", std::to_string(ranks)});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

fs::path Launcher::write_appfile(int ranks, int attempt, const std::vector<HostSlots>& hosts,
                                 const std::vector<std::string>& command) const {
  const std::string exe = command.front();
  if (exe.find_first_of(" \t\n'\"\\") != std::string::npos) {
    throw std::invalid_argument(fmt::format("launch: the path of gnnrt ({}) has a space or quote, which an Open MPI "
                                         "appfile cannot hold; run it from another folder",
                                         exe));
  }
  const fs::path dir = run_dir_ / "launch";
  fs::create_directories(dir);
  const fs::path path = dir / fmt::format("appfile-{}", attempt);
  std::error_code stale;
  fs::remove(path, stale);  // a killed launcher's; the file is made anew, 0600, never through a link
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error(fmt::format("launch: cannot write {}: {}", path.string(), std::strerror(errno)));
  std::string text;
  size_t host = 0;
  int used = 0;
  for (int r = 0; r < ranks; ++r) {
    std::string where;
    if (!hosts.empty()) {
      while (host + 1 < hosts.size() && used >= hosts[host].slots) {
        ++host;
        used = 0;
      }
      ++used;
      where = fmt::format("-host {} ", hosts[host].host);
    }
    text += fmt::format("-np 1 {}-x GNNRT_LAUNCH_TOKEN={} {}\n", where, secret_->token(r, attempt), exe);
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!written) {
    ::unlink(path.c_str());
    throw std::runtime_error(fmt::format("launch: cannot write {}: {}", path.string(), std::strerror(err)));
  }
  // The ranks' command, argument for argument.
  setenv("GNNRT_LAUNCH_ARGV", nlohmann::json(std::vector<std::string>(command.begin() + 1, command.end())).dump().c_str(), 1);
  return path;
}

Launcher::MpirunCommand Launcher::mpirun_command(int ranks, const std::vector<HostSlots>& hosts, int attempt) const {
  MpirunCommand m;
  std::vector<std::string>& a = m.options;
  a.push_back("mpirun");
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool oversubscribed = false;
  // An MCA parameter may be named once on mpirun's command line: the
  // user's --mpirun-arg settings win over the launcher's.
  const auto mca = [&](const std::string& name, const std::string& value) {
    for (size_t i = 0; i + 1 < c_.mpirun_args.size(); ++i) {
      const std::string& o = c_.mpirun_args[i];
      if ((o == "--mca" || o == "-mca") && c_.mpirun_args[i + 1] == name) return;
    }
    a.insert(a.end(), {"--mca", name, value});
  };
  if (local_) {
    // Every rank here: shared memory between the ranks (no TCP transport,
    // so no rank listens at all), Open MPI's out-of-band channel on
    // loopback (its listener is in the launcher's loopback-only network
    // namespace, network_namespace.h).
    mca("btl", "self,vader");
    mca("oob_tcp_if_include", "lo");
  } else {
    // Across hosts: TCP between hosts, shared memory within one, both on
    // the network of the control address only; Open MPI's daemons notice
    // a host that vanished within seconds (TCP keepalive after 5 s idle, 3
    // probes 1 s apart; the default is 8 minutes), so a cut link leaves no
    // daemon or rank behind on either side.
    mca("btl", "tcp,vader,self");
    boost::system::error_code ec;
    const auto control = asio::ip::make_address(address_, ec);  // empty in a dry run
    if (const std::string network = ec ? "" : network_of(control); !network.empty()) {
      mca("oob_tcp_if_include", network);
      mca("btl_tcp_if_include", network);
    }
    mca("oob_tcp_keepalive_time", "5");
    mca("oob_tcp_keepalive_intvl", "1");
    mca("oob_tcp_keepalive_probes", "3");
  }
  if (!hosts.empty()) {
    std::string list;
    for (const auto& h : hosts) {
      list += (list.empty() ? "" : ",") + fmt::format("{}:{}", h.host, h.slots);
      oversubscribed = oversubscribed || h.slots > cores;
    }
    a.insert(a.end(), {"--host", list});
  } else {
    oversubscribed = ranks > cores;
  }
  if (oversubscribed) {
    // More ranks than cores: ranks must yield when they wait, or small
    // messages take milliseconds.
    a.push_back("--oversubscribe");
    mca("mpi_yield_when_idle", "1");
  }
  // One core per rank when they fit one each, else no binding: a rank's
  // OpenMP threads must not be pinned to one core.
  const bool one_core_each = hosts.empty() && !oversubscribed && cores / std::max(1, ranks) == 1;
  a.insert(a.end(), {"--bind-to", one_core_each ? "core" : "none"});
  // The launcher's variables, and every GNNRT_* and OMP_* variable of the
  // launcher's environment (collective deadline and tuning, OpenMP
  // settings): -x passes them to remote ranks too, which over ssh would
  // not inherit them.
  // GNNRT_LAUNCH_TOKEN is not among them: each rank's own comes with its
  // line of the appfile.
  std::vector<std::string> names{"GNNRT_LAUNCH_ADDR", "GNNRT_LAUNCH_JOB", "GNNRT_LAUNCH_ATTEMPT", "GNNRT_LOG_DIR",
                                 "GNNRT_LAUNCH_LOST_TIMEOUT", "GNNRT_LAUNCH_ARGV"};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v(*e);
    const std::string name = v.substr(0, v.find('='));
    if ((name.rfind("GNNRT_", 0) == 0 || name.rfind("OMP_", 0) == 0) && name != "GNNRT_FAULT" &&
        name != "GNNRT_LAUNCH_TOKEN" && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
    }
  }
  if (attempt == 0 && !c_.fault.empty()) names.push_back("GNNRT_FAULT");
  for (const auto& name : names) a.insert(a.end(), {"-x", name});
  for (const auto& o : c_.mpirun_args) a.push_back(o);
  std::vector<std::string>& cmd = m.command;
  cmd.push_back(fs::read_symlink("/proc/self/exe").string());
  for (const auto& arg : c_.command) cmd.push_back(arg);
  if (c_.is_train) {
    cmd.insert(cmd.end(), {"--metrics", (run_dir_ / "metrics.jsonl").string()});
    if (c_.job.checkpoint().dir().empty()) {
      cmd.insert(cmd.end(), {"--set", "checkpoint.dir=" + (run_dir_ / "checkpoints").string()});
    }
    if (c_.job.checkpoint().every() == 0) cmd.insert(cmd.end(), {"--set", "checkpoint.every=1"});
    if (c_.job.partition().parts() != 0 && c_.job.partition().parts() != ranks) {
      cmd.insert(cmd.end(), {"--set", fmt::format("partition.parts={}", ranks)});
    }
  }
  return m;
}

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
  const MpirunCommand command = mpirun_command(ranks, hosts, index);
  // The command as one would type it (without the launcher's tokens), and
  // what runs: the same options with an appfile of one line per rank.
  const std::string line = join_command(command.by_hand(ranks));
  spdlog::info("attempt {}: {}", index, line);
  if (index == 0) std::cerr << "gnnrt launch: " << line << "\n";
  events_->write({{"event", index == 0 ? "start" : "restart"}, {"attempt", index}, {"ranks", ranks},
                  {"command", line}});
  const fs::path appfile = write_appfile(ranks, index, hosts, command.command);
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
      if (!c_.is_train) {  // nothing to checkpoint: stop now
        stop_job(mpirun, group);
        break;
      }
    }
    if (signals >= 2) {
      stop_job(mpirun, group);
      break;
    }
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
    // Registration, heartbeats, progress.
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

// The failed attempt's record (events.jsonl, the console), after every
// process of it is gone: the rank and mpirun's verdict from mpirun's output
// (this attempt's part of its log), and the checkpoint a restart resumes from.
void Launcher::record_failure(int index, Failure failure, const fs::path& mpirun_log, uintmax_t log_offset) {
  std::string output;
  {
    std::ifstream in(mpirun_log);
    in.seekg(static_cast<std::streamoff>(log_offset));
    output.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto signals = mpirun_signals(output);
  // No rank blamed (one killed after it reported its work done, in
  // MPI_Finalize, leaves no other trace): the first that mpirun says a signal ended.
  if (failure.kind == "exit" && failure.rank < 0) {
    std::lock_guard lock(supervisor_.mutex);
    for (const auto& [who, what] : signals) {
      if (who < 0 || who >= static_cast<int>(supervisor_.ranks.size())) continue;
      const auto& r = supervisor_.ranks[static_cast<size_t>(who)];
      failure.rank = who;
      failure.host = r.host;
      failure.pid = r.pid;
      break;
    }
  }
  const std::string verdict = mpirun_verdict(output, signals, failure.rank);
  // A rank that ended with status 2 before it could say so (a file its
  // host lacks, refused before MPI started): bad input, as if it had.
  if (failure.kind == "exit" && failure.rank < 0 && verdict == "exit code 2") {
    failure.kind = "bad_input";
    failure.reason += " (a rank ended with status 2, bad input, before it registered)";
  }
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
  if (c_.is_train) {
    const fs::path dir = effective_checkpoint_dir();
    try {
      if (const auto newest = model::load_newest_checkpoint(dir, /*set_aside=*/false)) {
        record["checkpoint"] = {{"file", newest->path.string()}, {"epoch", newest->state.epoch()},
                                {"step", newest->state.step()}};
      } else {
        record["checkpoint"] = {{"file", nullptr}, {"epoch", 0}};
      }
    } catch (const std::exception& e) {
      record["checkpoint"] = {{"error", e.what()}};
    }
  }
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
    std::cout << join_command(mpirun_command(c_.ranks, named_hosts, 0).by_hand(c_.ranks)) << "\n";
    return 0;
  }
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
  if (bp::search_path("mpirun").empty()) {
    throw std::runtime_error("launch: mpirun is not on PATH (Debian: apt-get install openmpi-bin)");
  }
  secret_ = JobSecret::draw();
  job_id_ = random_job_id();
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

  std::vector<HostSlots> hosts = named_hosts;
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
    if (!hosts.empty() && c_.min_ranks < c_.ranks) {
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
        break;
      }
      hosts = alive;
      ranks = std::min(c_.ranks, slots);
    }
    std::cerr << fmt::format("gnnrt launch: restart {}/{} on {} rank(s), from the newest checkpoint\n", restarts_,
                             c_.max_restarts, ranks);
  }
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
  if (status != 0 && first_failure_) {
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
  return status;
}

}  // namespace

std::vector<HostSlots> parse_hosts(const std::string& text) {
  std::vector<HostSlots> hosts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const size_t colon = item.rfind(':');
    HostSlots h;
    h.host = item.substr(0, colon);
    try {
      size_t used = 0;
      h.slots = colon == std::string::npos ? -1 : std::stoi(item.substr(colon + 1), &used);
      if (colon != std::string::npos && used != item.size() - colon - 1) h.slots = -1;
    } catch (const std::logic_error&) {
      h.slots = -1;
    }
    if (h.host.empty() || h.slots < 1) {
      throw std::invalid_argument(fmt::format("--hosts: '{}' is not HOST:SLOTS with SLOTS >= 1", item));
    }
    hosts.push_back(h);
    start = end + 1;
  }
  return hosts;
}

int run_launch(LaunchCommand& command) {
  Launcher launcher(command);
  return launcher.run();
}

}  // namespace gnnrt::launch
