// Liveness-based memory planning: every temp gets a byte offset in one
// arena, reused once the value is dead, so the core's peak memory is known
// before anything runs. A temp lives from the op that defines it to its last
// reader (program outputs: to the end); two temps share bytes only if their
// lives do not overlap, so no op's output aliases one of its inputs.
// Placement is greedy (largest first, lowest free offset), 64-byte aligned.
// Persistent values (inputs, parameters, state, and the results of graph
// constants: is_graph_constant) and the graphs' index arrays live outside
// the arena and count fully toward the peak.
#pragma once

#include <cstdint>

#include "runtime/device.h"
#include "runtime/program.h"

namespace gnnrt::runtime {

struct MemoryPlan {
  int64_t arena_bytes = 0;
  int64_t persistent_bytes = 0;
  int64_t graph_bytes = 0;  // the bound graphs' CSR arrays (both groupings)
  int64_t peak_bytes = 0;   // persistent + graphs + arena
  int64_t peak_op = -1;     // the op during which the most temp bytes are live
  int64_t peak_live_bytes = 0;
};

// Sets ValueInfo::offset of every temp an op defines; returns the plan.
MemoryPlan plan_memory(Program& p);

// Throws CapacityError if the plan does not fit the profile's HBM, naming the
// peak op, the planned bytes and the capacity.
void check_capacity(const Program& p, const MemoryPlan& plan, const DeviceProfile& profile);

}  // namespace gnnrt::runtime
