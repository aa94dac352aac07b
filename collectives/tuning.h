// TuningTable: picks the algorithm for a collective from (operation, bytes,
// ranks). Rules are tried in order; the first whose op, byte range and rank
// count match wins. A rule for the exact rank count beats one for any count
// (ranks = 0). When nothing matches, `native` runs. The built-in table
// (defaults()) holds rules measured on this project's reference machine
// (docs/collectives.md); `gnnrt bench collectives --tune FILE` measures a
// machine and writes its own. Immutable after loading; thread-safe to read.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collectives/algorithm.h"

namespace gnnrt::collectives {

struct TuningRule {
  Collective op = Collective::allreduce;
  std::size_t min_bytes = 0, max_bytes = 0;  // max 0: unbounded
  int ranks = 0;                             // 0: any
  Algorithm algorithm = Algorithm::native;
};

class TuningTable {
 public:
  TuningTable() = default;
  explicit TuningTable(std::vector<TuningRule> rules, std::string measured_on = {});

  static const TuningTable& defaults();
  // Throws std::runtime_error naming the file and line of a parse error, or
  // the rule with an unknown op or algorithm or one the op lacks.
  static TuningTable load(const std::string& path);
  static TuningTable parse(const std::string& text, const std::string& origin);
  std::string text() const;
  void save(const std::string& path) const;  // atomically (temporary + rename)

  Algorithm choose(Collective op, std::size_t bytes, int ranks) const;
  // Replaces the rules for (op, ranks) by `rules`.
  void replace(Collective op, int ranks, const std::vector<TuningRule>& rules);
  const std::vector<TuningRule>& rules() const { return rules_; }
  const std::string& measured_on() const { return measured_on_; }
  void set_measured_on(std::string text) { measured_on_ = std::move(text); }

 private:
  std::vector<TuningRule> rules_;
  std::string measured_on_;
};

}  // namespace gnnrt::collectives
