// The simulated NeuronCore's device profile and cost model. A profile gives
// a core's HBM capacity (the memory plan must fit in it), its fp32 peak, its
// HBM bandwidth and a per-op launch overhead; an op is charged
//   max(flops / peak, bytes / bandwidth) + launch
// to the core's simulated clock. Figures and their sources: docs/runtime.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/program.h"

namespace gnnrt::runtime {

struct DeviceProfile {
  std::string name;
  int64_t hbm_bytes = 0;
  double peak_flops = 0;      // fp32 per second, per core
  double hbm_bandwidth = 0;   // bytes per second, per core
  double launch_seconds = 0;  // fixed cost of one op
  double link_seconds = 0;    // latency of one collective step between cores
  double link_bandwidth = 0;  // bytes per second one core sends to another

  // "trn1" | "trn2"; throws std::invalid_argument naming the choices.
  static DeviceProfile named(std::string_view name);
  // Everything the compiled program depends on (part of the cache key).
  std::string to_text() const;
};

struct OpCost {
  double flops = 0;
  double bytes = 0;  // read + written, gathered rows counted per edge
};

OpCost op_cost(const Program& p, const Op& op);
double op_seconds(const DeviceProfile& profile, const OpCost& cost);
// A ring all-reduce of `bytes` over `ranks` cores: 2 (p - 1) steps of
// link latency plus 2 (p - 1) / p of the bytes over the link; 0 on one core.
double allreduce_seconds(const DeviceProfile& profile, double bytes, int ranks);
// A halo exchange sending `bytes` in all to `peers` cores at once: one step
// of link latency plus the bytes over the core's link; 0 without peers.
double halo_seconds(const DeviceProfile& profile, double bytes, int peers);

}  // namespace gnnrt::runtime
