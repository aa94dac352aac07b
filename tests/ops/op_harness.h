// One harness for every op of the runtime: a golden case (a folder written by
// tests/reference/make_golden.py) names an op, its parameters and its
// arrays; run_op() builds that op into a Program with the runtime's Builder
// (in float for the golden and determinism checks, in double for finite
// differences), differentiates it with the runtime's autodiff (seeded with
// the case's upstream gradients), compiles and runs it on a Core, and reads
// back every output and input gradient. So what is compared with the
// reference is computed by gnnrt end to end: shape rules, backward rules,
// executor dispatch and kernels. Adding an op means adding one entry to the
// table in op_harness.cc (and its cases to make_golden.py), not a new test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
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
  std::map<std::string, Tensor> arrays;

  static Case load(const std::filesystem::path& dir);
  const Tensor& array(const std::string& key) const;
  bool has(const std::string& key) const { return arrays.count(key) != 0; }
  const nlohmann::json& param(const std::string& key) const;
  bool has_param(const std::string& key) const;
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
// gradient the case lists. Throws what the runtime throws.
template <typename T>
Values<T> run_op(const Case& c, const Values<T>& inputs, const Values<T>* upstream);

// The ops run_op knows (the runtime ops with a forward form).
std::vector<std::string> harness_ops();

// The first position where a and b differ, or -1. Values compare by their
// bits, except that any two NaNs are equal: x86 returns either operand's NaN
// from an operation on two NaNs (inf + -inf + NaN), and the compiler orders a
// sum's operands freely, so two loops may disagree on a NaN's sign.
template <typename T>
int64_t first_difference(std::span<const T> a, std::span<const T> b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::min(a.size(), b.size()));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

// Every case folder under root (root/<op>/<case>/meta.json), sorted.
std::vector<std::filesystem::path> find_cases(const std::filesystem::path& root);

}  // namespace gnnrt::testing
