#include "runtime/device.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "ops/sparse_matmul.h"

namespace gnnrt::runtime {

DeviceProfile DeviceProfile::named(std::string_view name) {
  // Per NeuronCore: a chip's published figures divided by its cores
  // (docs/runtime.md lists the sources). The launch overhead is our
  // assumption, not a published number; so are the link latency (5 us) and
  // the link bandwidth per core (50 GB/s): AWS publishes no per-core
  // NeuronLink figures.
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
    const GraphInfo& g = p.graphs[static_cast<size_t>(op.attrs.graph())];
    const double edges = static_cast<double>(g.num_edges);
    // Index arrays (4 bytes per edge and endpoint) are read by every graph op.
    c.bytes += 8 * edges;
    const auto& first = p.value(op.inputs.empty() ? op.outputs[0] : op.inputs[0]);
    const double f = first.shape.size() > 1 ? static_cast<double>(first.shape[1]) : 1;
    switch (op.kind) {
      case OpKind::kSpmm:
      case OpKind::kSpmmGradX:
        // Each edge gathers a source row instead of reading x once.
        c.bytes += edges * f * 4 - static_cast<double>(first.bytes());
        c.flops = 2 * edges * f;
        break;
      case OpKind::kSpmmGradW:
        c.bytes += 2 * edges * f * 4;
        c.flops = 2 * edges * f;
        break;
      case OpKind::kSparseMatMul:
      case OpKind::kSparseMatMulGradB: {
        // A sparse matrix's stored entry (its value, 4 bytes, and its
        // indices above) meets one row of the dense operand (b, or the
        // gradient): 2 flops and 4 bytes per element of that row, for each
        // product of a pair (pair_sparse_products: inputs values, b, b2).
        const ValueId dense = op.inputs[1];
        const double products = static_cast<double>(op.inputs.size() - 1);
        const double m = op.kind == OpKind::kSparseMatMul
                             ? static_cast<double>(p.value(op.outputs[0]).shape[1])
                             : static_cast<double>(p.value(dense).shape[1]);
        c.flops = 2 * edges * m * products;
        if (op.kind == OpKind::kSparseMatMulGradB &&
            ops::sparse_matmul_backward_b_by_rows(g.num_dst, static_cast<int64_t>(m),
                                                  item_size(p.float_type))) {
          // Walked by rows (ops/sparse_matmul.h): G is read once and the
          // accumulator rows each entry updates stay in cache: the operands
          // and results counted above are what moves.
          break;
        }
        c.bytes += (edges * m * 4 - static_cast<double>(p.value(dense).bytes())) * products;
        break;
      }
      case OpKind::kGather:
      case OpKind::kScatter:
      case OpKind::kGatherGrad:
      case OpKind::kScatterGrad:
        c.flops = edges * f;
        break;
      case OpKind::kSegmentSoftmax:
      case OpKind::kSegmentSoftmaxGrad:
        c.flops = 5 * edges * f;
        break;
      case OpKind::kAttentionSoftmax:
      case OpKind::kAttentionSoftmaxGrad:
        // The softmax's and, per logit, sddmm_add's addition and the leaky
        // ReLU's select; each edge reads its source's row of a.
        c.flops = 7 * edges * f;
        c.bytes += edges * f * 4;
        break;
      default:
        c.flops = std::max(out, edges);
    }
  }
  if (op.kind == OpKind::kMatMul) {
    const auto& a = p.value(op.inputs[0]).shape;
    const auto& o = p.value(op.outputs[0]).shape;
    const double k = static_cast<double>(op.attrs.trans_a() ? a[0] : a[1]);
    c.flops = 2 * static_cast<double>(o[0]) * static_cast<double>(o[1]) * k;
  }
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
