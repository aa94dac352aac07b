// Generator specs as text, "name" or "name:key=value,key=value,...": the
// synthetic dataset's (model/data/dataset.h) and the products-like graph's
// (model/data/products.h). A spec struct lists its keys once, as a table of
// member pointers; parsing and printing walk that table.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "model/data/dataset.h"
#include "model/data/text_values.h"

namespace gnnrt::model {

template <typename Spec>
struct SpecKey {
  std::string_view name;
  std::variant<int64_t Spec::*, uint64_t Spec::*, double Spec::*> field;
};

// Fills `s` (holding the defaults) from `spec`. An unknown or repeated key
// or a malformed value throws DatasetError(where, ...) naming the key and
// value; range checks are the caller's.
template <typename Spec, size_t N>
void parse_spec(std::string_view spec, std::string_view prefix, const std::array<SpecKey<Spec>, N>& keys,
                const std::string& where, Spec& s) {
  if (!spec.starts_with(prefix) || (spec.size() > prefix.size() && spec[prefix.size()] != ':')) {
    throw DatasetError(where, fmt::format("expected {0} or {0}:key=value,...", prefix));
  }
  std::string_view rest = spec.substr(std::min(spec.size(), prefix.size() + 1));
  std::vector<std::string_view> seen;
  for (bool more = !rest.empty(); more;) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    more = comma != std::string_view::npos;
    if (more) rest.remove_prefix(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw DatasetError(where, fmt::format("'{}' is not key=value", item));
    const std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    const auto found = std::find_if(keys.begin(), keys.end(), [&](const SpecKey<Spec>& k) { return k.name == key; });
    if (found == keys.end()) {
      std::vector<std::string_view> names;
      for (const SpecKey<Spec>& k : keys) names.push_back(k.name);
      throw DatasetError(where, fmt::format("unknown key '{}' (keys: {})", key, fmt::join(names, ", ")));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw DatasetError(where, fmt::format("key '{}' is given twice", key));
    }
    seen.push_back(key);
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(s.*member)>;
          if (!parse_number(value, s.*member)) {
            const std::string_view kind = std::is_floating_point_v<T> ? "a number"
                                          : std::is_signed_v<T>       ? "an integer"
                                                                      : "a non-negative integer";
            throw DatasetError(where, fmt::format("{}='{}' is not {}", key, value, kind));
          }
        },
        found->field);
  }
}

// "prefix:key=value,..." with every key: parse_spec reads it back as `s`.
template <typename Spec, size_t N>
std::string spec_string(std::string_view prefix, const std::array<SpecKey<Spec>, N>& keys, const Spec& s) {
  std::string out(prefix);
  char sep = ':';
  for (const SpecKey<Spec>& k : keys) {
    std::visit([&](auto member) { out += fmt::format("{}{}={}", sep, k.name, s.*member); }, k.field);
    sep = ',';
  }
  return out;
}

}  // namespace gnnrt::model
