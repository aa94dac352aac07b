#include "collectives/tuning.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "collectives/tuning.pb.h"

namespace gnnrt::collectives {
namespace {

// Condensed from `gnnrt bench collectives` sweeps on the reference machine
// (`measured_on` below; docs/benchmarks.md has the runs, bench/README.md the
// sweeps). At small sizes a native call also verifies the ranks'
// signatures, which our recursive doubling, binomial tree and Rabenseifner
// carry in their tags for free, so those win there. Where the rank counts
// agreed the rule holds for any count.
// Native is MPI's blocking call.
constexpr const char* kDefaults = R"pb(
measured_on: "built-in: 2-core AMD EPYC VM, Open MPI 4.1.4, 2026-11-22 and 2026-12-02"
rule { op: "allreduce" ranks: 2 max_bytes: 786431 algorithm: "recursive_doubling" }
rule { op: "allreduce" ranks: 2 min_bytes: 786432 max_bytes: 25165823 algorithm: "native" }
rule { op: "allreduce" ranks: 2 min_bytes: 25165824 algorithm: "rabenseifner" }
rule { op: "allreduce" max_bytes: 131071 algorithm: "recursive_doubling" }
rule { op: "allreduce" min_bytes: 131072 max_bytes: 786431 algorithm: "rabenseifner" }
rule { op: "allreduce" max_bytes: 25165823 algorithm: "native" }
rule { op: "allreduce" min_bytes: 25165824 algorithm: "ring" }
rule { op: "reduce_scatter" max_bytes: 786431 algorithm: "rabenseifner" }
rule { op: "reduce_scatter" max_bytes: 25165823 algorithm: "native" }
rule { op: "reduce_scatter" min_bytes: 25165824 algorithm: "rabenseifner" }
rule { op: "allgather" max_bytes: 1048575 algorithm: "recursive_doubling" }
rule { op: "allgather" max_bytes: 50331647 algorithm: "native" }
rule { op: "allgather" min_bytes: 50331648 algorithm: "ring" }
rule { op: "broadcast" ranks: 2 algorithm: "binomial" }
rule { op: "broadcast" max_bytes: 131071 algorithm: "binomial" }
rule { op: "broadcast" algorithm: "native" }
rule { op: "alltoallv" ranks: 2 algorithm: "pairwise" }
)pb";

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = origin_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " +
               message;
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string origin_, first_;
};

}  // namespace

TuningTable::TuningTable(std::vector<TuningRule> rules, std::string measured_on)
    : rules_(std::move(rules)), measured_on_(std::move(measured_on)) {}

const TuningTable& TuningTable::defaults() {
  static const TuningTable table = parse(kDefaults, "built-in tuning table");
  return table;
}

TuningTable TuningTable::parse(const std::string& text, const std::string& origin) {
  proto::TuningTable message;
  google::protobuf::TextFormat::Parser parser;
  Collector collector(origin);
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text, &message)) {
    throw std::runtime_error("tuning table " + collector.first());
  }
  std::vector<TuningRule> rules;
  for (int i = 0; i < message.rule_size(); ++i) {
    const auto& r = message.rule(i);
    const std::string where = origin + ": rule " + std::to_string(i + 1) + ": ";
    TuningRule rule;
    try {
      rule.op = parse_collective(r.op());
      rule.algorithm = parse_algorithm(r.algorithm());
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(where + e.what());
    }
    if (rule.algorithm == Algorithm::automatic || !implements(rule.algorithm, rule.op)) {
      throw std::runtime_error(where + std::string(name(rule.op)) + " has no algorithm '" +
                               r.algorithm() + "'");
    }
    if (r.ranks() < 0) throw std::runtime_error(where + "ranks must be >= 0");
    if (r.max_bytes() != 0 && r.max_bytes() < r.min_bytes()) {
      throw std::runtime_error(where + "max_bytes < min_bytes");
    }
    rule.min_bytes = r.min_bytes();
    rule.max_bytes = r.max_bytes();
    rule.ranks = r.ranks();
    rules.push_back(rule);
  }
  return TuningTable(std::move(rules), message.measured_on());
}

TuningTable TuningTable::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read tuning table " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::string TuningTable::text() const {
  proto::TuningTable message;
  message.set_measured_on(measured_on_);
  for (const auto& rule : rules_) {
    auto* r = message.add_rule();
    r->set_op(std::string(name(rule.op)));
    r->set_min_bytes(rule.min_bytes);
    r->set_max_bytes(rule.max_bytes);
    r->set_ranks(rule.ranks);
    r->set_algorithm(std::string(name(rule.algorithm)));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(message, &text);
  return text;
}

void TuningTable::save(const std::string& path) const {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "# gnnrt collective tuning table (collectives/tuning.proto)\n" << text();
    out.flush();
    if (!out) throw std::runtime_error("cannot write tuning table " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + temporary + " to " + path);
  }
}

Algorithm TuningTable::choose(Collective op, std::size_t bytes, int ranks) const {
  const TuningRule* any_count = nullptr;
  for (const auto& rule : rules_) {
    if (rule.op != op || bytes < rule.min_bytes || (rule.max_bytes != 0 && bytes > rule.max_bytes)) {
      continue;
    }
    if (rule.ranks == ranks) return rule.algorithm;
    if (rule.ranks == 0 && any_count == nullptr) any_count = &rule;
  }
  return any_count != nullptr ? any_count->algorithm : Algorithm::native;
}

void TuningTable::replace(Collective op, int ranks, const std::vector<TuningRule>& rules) {
  std::erase_if(rules_, [&](const TuningRule& r) { return r.op == op && r.ranks == ranks; });
  rules_.insert(rules_.end(), rules.begin(), rules.end());
}

}  // namespace gnnrt::collectives
