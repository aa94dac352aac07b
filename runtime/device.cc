#include "runtime/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "runtime/op_defs.h"

namespace gnnrt::runtime {

DeviceProfile DeviceProfile::named(std::string_view name) {
  // Per NeuronCore: a chip's published figures divided by its cores
  // (docs/runtime.md lists the sources). The launch overhead is our
  // assumption, not a published number; so are the link latency and the
  // link bandwidth per core (the last two values below): AWS publishes no
  // per-core NeuronLink figures.
  if (name == "trn1") {
    // Trainium: 2 cores, 32 GiB HBM, 820 GB/s, 47.5 TFLOPS fp32 per chip.
    return {"trn1", int64_t{16} << 30, 47.5e12 / 2, 820e9 / 2, 2e-6, 5e-6, 50e9};
  }
  if (name == "trn2") {
    // Trainium2: 8 cores, 96 GiB HBM, 2.9 TB/s, 181 TFLOPS fp32 per chip.
    return {"trn2", int64_t{12} << 30, 181e12 / 8, 2.9e12 / 8, 2e-6, 5e-6, 50e9};
  }
  throw std::invalid_argument(fmt::format("unknown device profile '{}' (trn1, trn2)", name));
}

std::string DeviceProfile::to_text() const {
  return fmt::format("{} hbm={} flops={} bw={} launch={} link={}/{}", name, hbm_bytes, peak_flops,
                     hbm_bandwidth, launch_seconds, link_seconds, link_bandwidth);
}

OpCost op_cost(const Program& p, const Op& op) {
  OpCost c;
  if (is_graph_constant(op)) return c;  // computed once per graph binding, not per run
  for (ValueId v : op.inputs) {
    if (v != kNoValue) c.bytes += static_cast<double>(p.value(v).bytes());
  }
  for (ValueId v : op.outputs) c.bytes += static_cast<double>(p.value(v).bytes());
  const double out = op.outputs.empty() ? 0 : static_cast<double>(p.value(op.outputs[0]).elements());
  c.flops = out;
  if (op.attrs.has_graph()) {
    const double edges = static_cast<double>(p.graphs[static_cast<size_t>(op.attrs.graph())].num_edges);
    // Index arrays (4 bytes per edge and endpoint) are read by every graph op.
    c.bytes += 8 * edges;
    c.flops = std::max(out, edges);
  }
  // The op's own estimate where the generic one is wrong for it (runtime/defs/<family>.cc).
  if (const auto cost = op_def(op.kind).cost) cost(p, op, c);
  return c;
}

double allreduce_seconds(const DeviceProfile& profile, double bytes, int ranks) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  return 2 * (p - 1) * profile.link_seconds + 2 * (p - 1) / p * bytes / profile.link_bandwidth;
}

double halo_seconds(const DeviceProfile& profile, double bytes, int peers) {
  if (peers <= 0) return 0;
  return profile.link_seconds + bytes / profile.link_bandwidth;
}

double op_seconds(const DeviceProfile& profile, const OpCost& cost) {
  return std::max(cost.flops / profile.peak_flops, cost.bytes / profile.hbm_bandwidth) +
         profile.launch_seconds;
}

}  // namespace gnnrt::runtime
