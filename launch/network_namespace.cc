#include "launch/network_namespace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace gnnrt::launch {
namespace {

std::string write_proc(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("{}: {}", path, std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  return ok ? "" : fmt::format("{}: {}", path, std::strerror(err));
}

// The new namespace's loopback starts down.
std::string loopback_up() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fmt::format("socket: {}", std::strerror(errno));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  std::string why;
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    why = fmt::format("reading lo's flags: {}", std::strerror(errno));
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) why = fmt::format("bringing lo up: {}", std::strerror(errno));
  }
  ::close(fd);
  return why;
}

}  // namespace

std::string enter_loopback_only_network() {
  const int before = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const auto done = [&](std::string why) {
    if (before >= 0) ::close(before);
    return why;
  };
  // Past unshare, a failure that cannot be undone leaves the process
  // without a network it can use: an error, not a fallback.
  const auto stuck = [&](const std::string& why) {
    if (before >= 0) ::close(before);
    throw std::runtime_error(fmt::format("launch: the job's network namespace has no working loopback ({}), and this "
                                         "process cannot return to the host's network",
                                         why));
  };
  bool user_namespace = false;
  if (::unshare(CLONE_NEWNET) != 0) {
    if (errno != EPERM) return done(fmt::format("unshare(CLONE_NEWNET): {}", std::strerror(errno)));
    // Not privileged: a user namespace first, in which this user may make
    // one; its ids map to themselves.
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
      return done(fmt::format("unshare(CLONE_NEWUSER | CLONE_NEWNET): {}", std::strerror(errno)));
    }
    user_namespace = true;
    for (const auto& [file, text] : {std::pair<const char*, std::string>{"/proc/self/setgroups", "deny"},
                                     {"/proc/self/uid_map", fmt::format("{} {} 1", uid, uid)},
                                     {"/proc/self/gid_map", fmt::format("{} {} 1", gid, gid)}}) {
      if (std::string why = write_proc(file, text); !why.empty()) stuck(why);
    }
  }
  if (std::string why = loopback_up(); !why.empty()) {
    // Root's namespace can be left again; a user namespace cannot.
    if (user_namespace || before < 0 || ::setns(before, CLONE_NEWNET) != 0) stuck(why);
    return done(why);
  }
  return done("");
}

}  // namespace gnnrt::launch
