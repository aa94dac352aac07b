#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "runtime/passes.h"

namespace gnnrt::runtime {
namespace {

constexpr int64_t kAlign = 64;

int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::string gib(int64_t bytes) {
  return fmt::format("{:.3f} GiB", static_cast<double>(bytes) / (1 << 30));
}

struct Interval {
  ValueId value;
  int64_t first, last;  // op indices, inclusive
  int64_t bytes;
  int64_t offset = -1;
};

}  // namespace

MemoryPlan plan_memory(Program& p) {
  MemoryPlan plan;
  const auto n_ops = static_cast<int64_t>(p.ops.size());
  std::vector<int64_t> first(p.values.size(), -1), last(p.values.size(), -1);
  std::vector<bool> graph_constant(p.values.size(), false);
  for (int64_t i = 0; i < n_ops; ++i) {
    const Op& op = p.ops[static_cast<size_t>(i)];
    for (ValueId v : op.outputs) {
      first[static_cast<size_t>(v)] = i;
      graph_constant[static_cast<size_t>(v)] = is_graph_constant(op);
    }
    for (ValueId v : p.ops[static_cast<size_t>(i)].inputs) {
      if (v != kNoValue) last[static_cast<size_t>(v)] = i;
    }
  }
  for (ValueId v : p.outputs) last[static_cast<size_t>(v)] = n_ops;
  std::vector<Interval> temps;
  for (size_t v = 0; v < p.values.size(); ++v) {
    ValueInfo& info = p.values[v];
    if (info.role != Role::kTemp) {
      plan.persistent_bytes += aligned(info.bytes());
      continue;
    }
    info.offset = -1;
    if (first[v] < 0) continue;  // no op defines it (removed by a pass)
    if (graph_constant[v]) {     // kept by the core across runs (is_graph_constant)
      plan.persistent_bytes += aligned(info.bytes());
      continue;
    }
    temps.push_back({static_cast<ValueId>(v), first[v], std::max(first[v], last[v]),
                     aligned(info.bytes())});
  }
  // Largest first; ties by definition order, so the plan is deterministic.
  std::vector<size_t> order(temps.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return temps[a].bytes > temps[b].bytes; });
  std::vector<size_t> placed;
  for (size_t t : order) {
    Interval& cur = temps[t];
    // Busy byte ranges of placed values whose lives overlap this one.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t q : placed) {
      const Interval& o = temps[q];
      if (o.first <= cur.last && cur.first <= o.last && o.bytes > 0) {
        busy.emplace_back(o.offset, o.offset + o.bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + cur.bytes <= begin) break;
      offset = std::max(offset, end);
    }
    cur.offset = offset;
    p.values[static_cast<size_t>(cur.value)].offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + cur.bytes);
    placed.push_back(t);
  }
  // Live temp bytes per op, to name where the peak is.
  std::vector<int64_t> live(static_cast<size_t>(std::max<int64_t>(n_ops, 1)), 0);
  for (const Interval& t : temps) {
    for (int64_t i = t.first; i <= std::min(t.last, n_ops - 1); ++i) live[static_cast<size_t>(i)] += t.bytes;
  }
  if (n_ops > 0) {
    const auto peak = std::max_element(live.begin(), live.end());
    plan.peak_op = peak - live.begin();
    plan.peak_live_bytes = *peak;
  }
  // ops::Adjacency<int32_t>: per grouping, rowptr (int64, rows + 1) and
  // edge, col and row_of_edge (int32, E each).
  for (const GraphInfo& g : p.graphs) {
    plan.graph_bytes += 8 * (g.num_src + g.num_dst + 2) + 24 * g.num_edges;
  }
  plan.peak_bytes = plan.persistent_bytes + plan.graph_bytes + plan.arena_bytes;
  return plan;
}

void check_capacity(const Program& p, const MemoryPlan& plan, const DeviceProfile& profile) {
  if (plan.peak_bytes <= profile.hbm_bytes) return;
  const std::string where =
      plan.peak_op >= 0 ? p.describe(static_cast<size_t>(plan.peak_op)) : std::string("no op");
  throw CapacityError(fmt::format(
      "program '{}' does not fit the device: planned peak {} bytes ({}: {} persistent + {} "
      "graphs + {} arena, most live at {}) exceeds the {} bytes ({}) of one {} core; use a "
      "smaller model or graph, more cores, or --hbm-bytes",
      p.name, plan.peak_bytes, gib(plan.peak_bytes), gib(plan.persistent_bytes),
      gib(plan.graph_bytes), gib(plan.arena_bytes), where, profile.hbm_bytes,
      gib(profile.hbm_bytes), profile.name));
}

}  // namespace gnnrt::runtime
