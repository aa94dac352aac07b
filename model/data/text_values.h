// Reading values from text (the CSV dataset's cells, the synthetic spec's
// values): inside the data room.
#pragma once

#include <charconv>
#include <string_view>
#include <system_error>

namespace gnnrt::model {

// s without leading blanks and tabs, and without trailing blanks, tabs and
// a carriage return.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The whole of `text` as a number of T (from_chars), or false.
template <typename T>
bool parse_number(std::string_view text, T& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

}  // namespace gnnrt::model
