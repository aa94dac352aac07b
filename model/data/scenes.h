// Synthetic driving scenes in the batch dataset format (the shape of
// VectorWorld's Waymo scenes, docs/scene-models.md): lanes as 20-point
// polylines on a layout of roads (parallel lanes in segments), typed lane
// connections, agents on lanes with a state and a short motion history,
// one query row a scene, and VectorWorld's default full connectivity
// within each scene. Deterministic: Philox keyed by (seed, scene).
//
//   node sets  lane   x [40]: 20 points (x, y) / 100 m     y = x (reconstruction)
//              agent  x [22]: 7 state, 12 motion, 3 type   y = x
//              query  x [1]: zero, one row a scene
//   edge sets  l2l    lane -> lane, every ordered pair (self included),
//                     features [6]: one-hot pred, succ, left, right, self, none
//              a2a    agent -> agent, every ordered pair
//              l2a    lane -> agent, every pair
//              l2q    lane -> query
//   graph target: the scene's lane count (a class in 0 .. max_lanes)
#pragma once

#include <cstdint>
#include <string_view>

#include "model/data/batch_dataset.h"

namespace gnnrt::model {

struct SceneSpec {
  int64_t scenes = 64;
  int64_t min_lanes = 20, max_lanes = 100;  // Waymo's cap: 100 lanes
  int64_t min_agents = 4, max_agents = 30;  // and 30 agents
  uint64_t seed = 0;
  bool operator==(const SceneSpec&) const = default;
};

// "scenes" or "scenes:scenes=...,max_lanes=...,seed=..." with the field names
// as keys. A scene of 1,000 lanes has a million lane-to-lane edges.
SceneSpec parse_scene_spec(std::string_view spec);
BatchDataset make_scenes(const SceneSpec& spec);

inline constexpr int64_t kLanePoints = 20;
inline constexpr int64_t kLaneWidth = 2 * kLanePoints;
inline constexpr int64_t kAgentWidth = 7 + 12 + 3;
inline constexpr int64_t kConnectionTypes = 6;

}  // namespace gnnrt::model
