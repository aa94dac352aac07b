// The hosts of a launch: this host's name and addresses, which hosts of
// --hosts are this one, and the address the control server listens on.
#pragma once

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <string>
#include <vector>

#include "launch/launcher.h"

namespace gnnrt::launch {

// This host's name (gethostname), "?" when it has none.
std::string this_host();

// This host's IPv4 addresses (every interface's, loopback included).
std::vector<boost::asio::ip::address> local_addresses();

// The network (CIDR) of this host's interface that has `address`, e.g.
// "198.18.0.0/24"; "" when no interface has it.
std::string network_of(const boost::asio::ip::address& address);

// With --hosts and no --control-address: the address of this host's
// interface that routes to the first host that is not this one (loopback
// when all are this one). Throws std::invalid_argument naming a host that
// does not resolve or cannot be reached.
std::string control_address_for(const std::vector<HostSlots>& hosts);

// Whether every host of --hosts is this one (resolves to loopback or to an
// address of this host's); an empty list is this host, a host that does
// not resolve is not.
bool every_host_is_this_one(const std::vector<HostSlots>& hosts);

}  // namespace gnnrt::launch
