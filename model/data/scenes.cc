#include "model/data/scenes.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <vector>

#include "model/data/dataset.h"
#include "ops/rng.h"

namespace gnnrt::model {
namespace {

// Philox keyed by (seed, scene): each scene drawn alone, the same bytes on
// any machine and in any order.
class SceneRng {
 public:
  SceneRng(uint64_t seed, int64_t scene) : seed_(seed), scene_(static_cast<uint64_t>(scene)) {}
  double unit() {
    if (used_ == 4) {
      words_ = ops::philox(seed_, scene_, {counter_++, 0, 0, 0});
      used_ = 0;
    }
    return ops::unit(words_[used_++]);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  int64_t below(int64_t n) { return std::min<int64_t>(n - 1, static_cast<int64_t>(unit() * static_cast<double>(n))); }
  int64_t between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }

 private:
  uint64_t seed_, scene_, counter_ = 0;
  ops::RngWords words_{};
  int used_ = 4;
};

// Where a lane sits in its layout: road, lane across the road, segment along it.
struct LaneSlot {
  int64_t road, across, along;
};

enum Connection { kPred, kSucc, kLeft, kRight, kSelf, kNone };

Connection connection(const LaneSlot& a, const LaneSlot& b, bool same) {
  if (same) return kSelf;
  if (a.road != b.road) return kNone;
  if (a.across == b.across && b.along == a.along + 1) return kSucc;
  if (a.across == b.across && b.along == a.along - 1) return kPred;
  if (a.along == b.along && b.across == a.across + 1) return kLeft;
  if (a.along == b.along && b.across == a.across - 1) return kRight;
  return kNone;
}

constexpr double kSegment = 30;    // m along a lane
constexpr double kLaneGap = 3.5;   // m between neighbouring lanes
constexpr double kScale = 100;     // coordinates / 100 m
constexpr int64_t kSegmentsPerRoad = 6;

}  // namespace

SceneSpec parse_scene_spec(std::string_view spec) {
  const std::string where = fmt::format("scenes spec '{}'", spec);
  SceneSpec s;
  for (const auto& [key, value] : spec_pairs(spec, "scenes", where)) {
    bool ok = false;
    if (key == "scenes") ok = parse_number(value, s.scenes);
    else if (key == "min_lanes") ok = parse_number(value, s.min_lanes);
    else if (key == "max_lanes") ok = parse_number(value, s.max_lanes);
    else if (key == "min_agents") ok = parse_number(value, s.min_agents);
    else if (key == "max_agents") ok = parse_number(value, s.max_agents);
    else if (key == "seed") ok = parse_number(value, s.seed);
    else throw DatasetError(where, fmt::format("unknown key '{}' (keys: scenes, min_lanes, max_lanes, min_agents, "
                                               "max_agents, seed)", key));
    if (!ok) throw DatasetError(where, fmt::format("{}='{}' is not a number", key, value));
  }
  // The lane-to-lane edges of every scene together stay within int32 rows.
  const bool sizes = s.scenes >= 1 && s.min_lanes >= 1 && s.max_lanes >= s.min_lanes && s.min_agents >= 1 &&
                     s.max_agents >= s.min_agents && s.max_lanes <= 4096 && s.max_agents <= 4096;
  if (!sizes || s.max_lanes * s.max_lanes > ((int64_t{1} << 31) - 1) / s.scenes) {
    throw DatasetError(where, "needs scenes >= 1, 1 <= min_lanes <= max_lanes <= 4096, 1 <= min_agents <= "
                              "max_agents <= 4096, scenes * max_lanes^2 < 2^31");
  }
  return s;
}

BatchDataset make_scenes(const SceneSpec& spec) {
  BatchDataset d;
  d.name = "scenes";
  d.num_graphs = spec.scenes;
  NodeSet lane{"lane", kLaneWidth, {}, {0}, {}};
  NodeSet agent{"agent", kAgentWidth, {}, {0}, {}};
  NodeSet query{"query", 1, {}, {0}, {}};
  lane.y.width = kLaneWidth;
  agent.y.width = kAgentWidth;
  EdgeSet l2l{"l2l", 0, 0, {}, {}, {0}, kConnectionTypes, {}};
  EdgeSet a2a{"a2a", 1, 1, {}, {}, {0}, 0, {}};
  EdgeSet l2a{"l2a", 0, 1, {}, {}, {0}, 0, {}};
  EdgeSet l2q{"l2q", 0, 2, {}, {}, {0}, 0, {}};
  d.graph_y.classes = true;
  for (int64_t g = 0; g < spec.scenes; ++g) {
    SceneRng rng(spec.seed, g);
    const int64_t lanes = rng.between(spec.min_lanes, spec.max_lanes);
    const int64_t agents = rng.between(spec.min_agents, spec.max_agents);
    // Roads of 1-3 lanes across, in segments; each road its own heading,
    // origin and gentle curve.
    const int64_t across = rng.between(1, 3);
    std::vector<LaneSlot> slots;
    std::vector<std::array<double, 2 * kLanePoints>> points;
    std::array<double, 4> road{};  // x, y, heading, curvature of the current road
    for (int64_t i = 0; i < lanes; ++i) {
      const LaneSlot slot{i / (across * kSegmentsPerRoad), i % across, (i / across) % kSegmentsPerRoad};
      if (i % (across * kSegmentsPerRoad) == 0) {
        road = {rng.uniform(-60, 60), rng.uniform(-60, 60), rng.uniform(0, 2 * std::numbers::pi),
                rng.uniform(-0.004, 0.004)};
      }
      std::array<double, 2 * kLanePoints> p{};
      for (int64_t k = 0; k < kLanePoints; ++k) {
        const double s = (static_cast<double>(slot.along) + static_cast<double>(k) / (kLanePoints - 1)) * kSegment;
        const double heading = road[2] + road[3] * s;
        const double lateral = static_cast<double>(slot.across) * kLaneGap;
        // Along the curved centre line, offset to the lane's side.
        p[2 * k] = road[0] + s * std::cos(heading) - lateral * std::sin(heading);
        p[2 * k + 1] = road[1] + s * std::sin(heading) + lateral * std::cos(heading);
      }
      slots.push_back(slot);
      points.push_back(p);
    }
    const int64_t lane_base = lane.rows(), agent_base = agent.rows();
    for (const auto& p : points) {
      for (const double v : p) lane.x.push_back(static_cast<float>(v / kScale));
    }
    // Agents on lanes: position and heading from the polyline, a speed, a
    // constant-velocity history of 6 past positions, a type (vehicle,
    // pedestrian, cyclist) with its size.
    for (int64_t a = 0; a < agents; ++a) {
      const auto& p = points[static_cast<size_t>(rng.below(lanes))];
      const int64_t k = rng.below(kLanePoints - 1);
      const double t = rng.unit();
      const double x = p[2 * k] + t * (p[2 * k + 2] - p[2 * k]);
      const double y = p[2 * k + 1] + t * (p[2 * k + 3] - p[2 * k + 1]);
      const double heading = std::atan2(p[2 * k + 3] - p[2 * k + 1], p[2 * k + 2] - p[2 * k]);
      const int64_t type = rng.unit() < 0.8 ? 0 : rng.between(1, 2);
      const double speed = type == 0 ? rng.uniform(0, 15) : type == 1 ? rng.uniform(0, 2) : rng.uniform(2, 7);
      const double length = type == 0 ? rng.uniform(4, 5.5) : type == 1 ? 0.6 : 1.8;
      const double width = type == 0 ? rng.uniform(1.8, 2.2) : type == 1 ? 0.6 : 0.7;
      const std::array<double, 7> state{x / kScale, y / kScale, speed / 15, std::cos(heading), std::sin(heading),
                                        length / 5, width / 2};
      for (const double v : state) agent.x.push_back(static_cast<float>(v));
      for (int64_t h = 1; h <= 6; ++h) {  // 0.1 s apart, relative to now, / 10 m
        agent.x.push_back(static_cast<float>(-speed * 0.1 * static_cast<double>(h) * std::cos(heading) / 10));
        agent.x.push_back(static_cast<float>(-speed * 0.1 * static_cast<double>(h) * std::sin(heading) / 10));
      }
      for (int64_t c = 0; c < 3; ++c) agent.x.push_back(c == type ? 1.0f : 0.0f);
    }
    query.x.push_back(0.0f);
    // VectorWorld's default connectivity: every pair within the scene.
    for (int64_t i = 0; i < lanes; ++i) {
      for (int64_t j = 0; j < lanes; ++j) {
        l2l.src.push_back(lane_base + i);
        l2l.dst.push_back(lane_base + j);
        const Connection c = connection(slots[static_cast<size_t>(i)], slots[static_cast<size_t>(j)], i == j);
        for (int64_t t = 0; t < kConnectionTypes; ++t) l2l.x.push_back(t == c ? 1.0f : 0.0f);
      }
      for (int64_t a = 0; a < agents; ++a) {
        l2a.src.push_back(lane_base + i);
        l2a.dst.push_back(agent_base + a);
      }
      l2q.src.push_back(lane_base + i);
      l2q.dst.push_back(g);
    }
    for (int64_t a = 0; a < agents; ++a) {
      for (int64_t b = 0; b < agents; ++b) {
        a2a.src.push_back(agent_base + a);
        a2a.dst.push_back(agent_base + b);
      }
    }
    lane.ptr.push_back(lane_base + lanes);
    agent.ptr.push_back(agent_base + agents);
    query.ptr.push_back(g + 1);
    for (EdgeSet* e : {&l2l, &a2a, &l2a, &l2q}) e->ptr.push_back(e->count());
    d.graph_y.labels.push_back(lanes);
  }
  // Reconstruction targets: the features themselves.
  lane.y.values = lane.x;
  agent.y.values = agent.x;
  d.graph_y.num_classes = spec.max_lanes + 1;
  d.node_sets = {std::move(lane), std::move(agent), std::move(query)};
  d.edge_sets = {std::move(l2l), std::move(a2a), std::move(l2a), std::move(l2q)};
  validate(d, "scenes");
  return d;
}

}  // namespace gnnrt::model
