#include "model/training/state_dict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <utility>

#include "ops/rng.h"
#include "runtime/npy.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

// Uniform draws in [-bound, bound) from Philox keyed by (seed, parameter
// index): the same parameters on every machine, whatever the thread count.
void init_param(const ParamDecl& p, uint64_t seed, uint64_t index, std::span<float> out) {
  double bound = 0;
  switch (p.init) {
    case ParamDecl::Init::kZeros:
      std::fill(out.begin(), out.end(), 0.0f);
      return;
    case ParamDecl::Init::kOnes:
      std::fill(out.begin(), out.end(), 1.0f);
      return;
    case ParamDecl::Init::kConstant:
      std::fill(out.begin(), out.end(), static_cast<float>(p.constant));
      return;
    case ParamDecl::Init::kGlorot:
      bound = std::sqrt(6.0 / static_cast<double>(p.fan_in + p.fan_out));
      break;
    case ParamDecl::Init::kTorchLinear:
      bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.fan_in, 1)));
      break;
  }
  for (size_t i = 0; i < out.size(); i += 4) {
    const ops::RngWords r = ops::philox(seed, index, {i / 4, 0, 0, 0});
    for (size_t j = 0; j < 4 && i + j < out.size(); ++j) {
      const double u = ops::unit(r[j]);  // [0, 1)
      out[i + j] = static_cast<float>((2 * u - 1) * bound);
    }
  }
}

}  // namespace

void initialize_parameters(Core& core, const std::vector<ParamDecl>& params, uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor a(DType::kF32, params[i].shape);
    init_param(params[i], seed, i, a.values<float>());
    core.memory().put(params[i].name, std::move(a));
  }
}

void initialize_missing_parameters(Core& core, const std::vector<ParamDecl>& params, uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (core.memory().has(params[i].name)) continue;
    Tensor a(DType::kF32, params[i].shape);
    init_param(params[i], seed, i, a.values<float>());
    core.memory().put(params[i].name, std::move(a));
  }
}

void check_finite_parameter(const Tensor& t, const std::string& key, const std::filesystem::path& file) {
  const auto first_bad = [&](auto values) -> int64_t {
    for (size_t i = 0; i < values.size(); ++i) {
      const double v = static_cast<double>(values[i]);
      if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max()) return static_cast<int64_t>(i);
    }
    return -1;
  };
  int64_t bad = -1;
  double value = 0;
  if (t.dtype() == DType::kF32) {
    bad = first_bad(t.values<float>());
    if (bad >= 0) value = t.values<float>()[static_cast<size_t>(bad)];
  } else if (t.dtype() == DType::kF64) {
    bad = first_bad(t.values<double>());
    if (bad >= 0) value = t.values<double>()[static_cast<size_t>(bad)];
  }
  if (bad < 0) return;
  std::vector<int64_t> index(t.shape().size());
  for (size_t d = index.size(), rest = static_cast<size_t>(bad); d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<size_t>(t.shape()[d]));
    rest /= static_cast<size_t>(t.shape()[d]);
  }
  throw std::invalid_argument(fmt::format("--params-in {}: {}[{}] is {}{}", file.string(), key, fmt::join(index, ", "),
                                          value, std::isfinite(value) ? " (too large for float32)" : ""));
}

void load_state_dict(Core& core, const std::vector<ParamDecl>& params, const std::vector<ParamAlias>& aliases,
                     const std::vector<Buffer>& buffers, const std::filesystem::path& dir, bool strict,
                     const std::string& scope) {
  std::set<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() == ".npy") files.insert(p.stem().string());
  }
  if (ec) throw std::invalid_argument(fmt::format("--params-in {}: {}", dir.string(), ec.message()));
  std::vector<std::string> missing, mismatched;
  std::map<std::string, Tensor> loaded;
  // Every key the model has: its parameters', then their aliases' (checked
  // for their shape; a parameter's values come from its own key).
  std::vector<std::pair<std::string, const ParamDecl*>> keys;
  for (const ParamDecl& p : params) keys.emplace_back(p.name, &p);
  for (const ParamAlias& a : aliases) {
    const auto p = std::find_if(params.begin(), params.end(), [&](const ParamDecl& d) { return d.name == a.param; });
    if (p == params.end()) throw std::logic_error("alias " + a.key + " of no parameter " + a.param);
    keys.emplace_back(a.key, &*p);
  }
  if (!scope.empty()) {
    const auto outside = [&](const auto& k) { return !k.first.starts_with(scope + "."); };
    const auto n = std::erase_if(keys, outside);
    if (keys.empty()) throw std::invalid_argument(fmt::format("--params-scope {}: the model has no key under '{}.'", scope, scope));
    spdlog::info("--params-scope {}: {} keys under '{}.', {} others start from their initialisation", scope,
                 keys.size(), scope, n);
  }
  for (const auto& [key, p] : keys) {
    if (!files.erase(key)) {
      missing.push_back(fmt::format("{} {}", key, runtime::shape_string(p->shape)));
      continue;
    }
    const Tensor t = read_npy(dir / (key + ".npy"));
    if (t.shape() != p->shape || !is_floating(t.dtype())) {
      mismatched.push_back(fmt::format("{}: {} {} in the file, {} float32 in the model", key,
                                       runtime::shape_string(t.shape()), to_string(t.dtype()),
                                       runtime::shape_string(p->shape)));
      continue;
    }
    check_finite_parameter(t, key, dir / (key + ".npy"));
    if (key == p->name) {
      loaded.emplace(key, t.cast(DType::kF32));
    } else if (const auto it = loaded.find(p->name); it != loaded.end()) {
      // torch saves one tensor under both names: values that differ are
      // not a state_dict of this model, and one of them would be dropped.
      const Tensor alias = t.cast(DType::kF32);
      const std::span<const float> a = alias.values<float>(), v = std::as_const(it->second).values<float>();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - v[i]));
      const std::span<const std::byte> ab = alias.bytes(), vb = std::as_const(it->second).bytes();
      if (ab.size() != vb.size() || std::memcmp(ab.data(), vb.data(), ab.size()) != 0) {
        mismatched.push_back(fmt::format("{}: names the same parameter as {}, but its values differ (max |diff| {:g})",
                                         key, p->name, worst));
      }
    }
  }
  for (const Buffer& b : buffers) {
    if (!scope.empty() && !b.key.starts_with(scope + ".")) continue;
    if (!files.erase(b.key)) {
      missing.push_back(fmt::format("{} {}", b.key, runtime::shape_string(b.shape)));
      continue;
    }
    const Tensor t = read_npy(dir / (b.key + ".npy"));
    if (t.shape() != b.shape || !is_floating(t.dtype())) {
      mismatched.push_back(fmt::format("{}: {} {} in the file, {} float32 in the model", b.key,
                                       runtime::shape_string(t.shape()), to_string(t.dtype()),
                                       runtime::shape_string(b.shape)));
      continue;
    }
    check_finite_parameter(t, b.key, dir / (b.key + ".npy"));
    const std::vector<float> values = t.to_vector<float>();
    if (values != b.values) {
      mismatched.push_back(fmt::format("{}: holds [{}] in the file, the model was built with [{}] (a buffer, "
                                       "fixed by the job: set it there)",
                                       b.key, fmt::join(values, ", "), fmt::join(b.values, ", ")));
    }
  }
  const std::vector<std::string> unexpected(files.begin(), files.end());
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    const std::string what = fmt::format(
        "--params-in {}: missing keys: [{}]; unexpected keys: [{}]; mismatched: [{}]", dir.string(),
        fmt::join(missing, ", "), fmt::join(unexpected, ", "), fmt::join(mismatched, "; "));
    if (strict) throw std::invalid_argument(what + " (--params-non-strict loads the rest)");
    spdlog::warn("{}; loaded the other {} keys", what, loaded.size());
  }
  for (auto& [name, t] : loaded) core.memory().put(name, std::move(t));
}

void write_state_dict(Core& core, const std::vector<ParamDecl>& params, const std::vector<ParamAlias>& aliases,
                      const std::vector<Buffer>& buffers, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const ParamDecl& p : params) {
    const Tensor values = core.read(p.name);
    write_npy(dir / (p.name + ".npy"), values);
    for (const ParamAlias& a : aliases) {
      if (a.param == p.name) write_npy(dir / (a.key + ".npy"), values);
    }
  }
  for (const Buffer& b : buffers) write_npy(dir / (b.key + ".npy"), Tensor::from<float>(b.values, b.shape));
}

}  // namespace gnnrt::model
