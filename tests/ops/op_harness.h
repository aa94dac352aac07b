// One harness for every kernel: a golden case (a folder written by
// tests/reference/make_golden.py) names an op, its parameters and its
// arrays; run_op() runs gnnrt's kernels on it in float (golden comparison,
// determinism) or double (finite differences). Adding an op means adding one
// entry to run_op, not a new test.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/npy.h"

namespace gnnrt::testing {

struct Case {
  std::filesystem::path dir;
  std::string op;
  std::string name;  // "<op>/<case>"
  nlohmann::json meta;
  std::map<std::string, NpyArray> arrays;

  static Case load(const std::filesystem::path& dir);
  const NpyArray& array(const std::string& key) const;
  bool has(const std::string& key) const { return arrays.count(key) != 0; }
  const nlohmann::json& param(const std::string& key) const;
};

template <typename T>
using Values = std::map<std::string, std::vector<T>>;

// The case's floating-point inputs, converted to T.
template <typename T>
Values<T> float_inputs(const Case& c);

// The upstream gradients, keyed by output name ("out", not "grad_out"). A
// scalar loss with no upstream gradient gets 1.
template <typename T>
Values<T> upstream_gradients(const Case& c);

// Runs the case's op on `inputs` (replacing the case's float inputs; integer
// inputs come from the case). Returns every output (integer outputs such as
// arg converted to T) and, if `upstream` is given, "grad_<input>" for each
// gradient the case lists.
template <typename T>
Values<T> run_op(const Case& c, const Values<T>& inputs, const Values<T>* upstream);

// Every case folder under root (root/<op>/<case>/meta.json), sorted.
std::vector<std::filesystem::path> find_cases(const std::filesystem::path& root);

}  // namespace gnnrt::testing
