#include "launch/hosts.h"

#include <fmt/format.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

namespace gnnrt::launch {

namespace asio = boost::asio;

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

std::string this_host() {
  char buffer[256] = {};
  return gethostname(buffer, sizeof buffer - 1) == 0 ? buffer : "?";
}

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

// The kernel's choice of source address for a UDP socket connected to the
// first other host (nothing is sent): the network that host shares with this one.
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

}  // namespace gnnrt::launch
