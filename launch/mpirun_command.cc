#include "launch/mpirun_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launch/hosts.h"

extern char** environ;

namespace gnnrt::launch {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,@%+") ==
                        std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string join_command(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += shell_quote(a);
  }
  return s;
}

std::vector<std::string> MpirunCommand::by_hand(int ranks) const {
  std::vector<std::string> a = options;
  a.insert(a.end(), {"-np", std::to_string(ranks)});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

fs::path write_appfile(const fs::path& run_dir, const JobSecret& secret, int ranks, int attempt,
                       const std::vector<HostSlots>& hosts, const std::vector<std::string>& command) {
  const std::string exe = command.front();
  if (exe.find_first_of(" \t\n'\"\\") != std::string::npos) {
    throw std::invalid_argument(fmt::format("launch: the path of gnnrt ({}) has a space or quote, which an Open MPI "
                                         "appfile cannot hold; run it from another folder",
                                         exe));
  }
  const fs::path dir = run_dir / "launch";
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
    text += fmt::format("-np 1 {}-x GNNRT_LAUNCH_TOKEN={} {}\n", where, secret.token(r, attempt), exe);
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

MpirunCommand mpirun_command(const LaunchCommand& c, const fs::path& run_dir, bool local,
                             const std::string& control_address, int ranks, const std::vector<HostSlots>& hosts,
                             int attempt) {
  MpirunCommand m;
  std::vector<std::string>& a = m.options;
  a.push_back("mpirun");
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool oversubscribed = false;
  // An MCA parameter may be named once on mpirun's command line: the
  // user's --mpirun-arg settings win over the launcher's.
  const auto mca = [&](const std::string& name, const std::string& value) {
    for (size_t i = 0; i + 1 < c.mpirun_args.size(); ++i) {
      const std::string& o = c.mpirun_args[i];
      if ((o == "--mca" || o == "-mca") && c.mpirun_args[i + 1] == name) return;
    }
    a.insert(a.end(), {"--mca", name, value});
  };
  if (local) {
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
    const auto control = asio::ip::make_address(control_address, ec);  // empty in a dry run
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
      if (!list.empty()) list += ',';
      list += fmt::format("{}:{}", h.host, h.slots);
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
  if (attempt == 0 && !c.fault.empty()) names.push_back("GNNRT_FAULT");
  for (const auto& name : names) a.insert(a.end(), {"-x", name});
  for (const auto& o : c.mpirun_args) a.push_back(o);
  std::vector<std::string>& cmd = m.command;
  cmd.push_back(fs::read_symlink("/proc/self/exe").string());
  for (const auto& arg : c.command) cmd.push_back(arg);
  if (c.is_train) {
    cmd.insert(cmd.end(), {"--metrics", (run_dir / "metrics.jsonl").string()});
    if (c.job.checkpoint().dir().empty()) {
      cmd.insert(cmd.end(), {"--set", "checkpoint.dir=" + (run_dir / "checkpoints").string()});
    }
    if (c.job.checkpoint().every() == 0) cmd.insert(cmd.end(), {"--set", "checkpoint.every=1"});
    if (c.job.partition().parts() != 0 && c.job.partition().parts() != ranks) {
      cmd.insert(cmd.end(), {"--set", fmt::format("partition.parts={}", ranks)});
    }
  }
  return m;
}

}  // namespace gnnrt::launch
