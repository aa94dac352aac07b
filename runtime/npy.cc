#include "runtime/npy.h"

#include "runtime/atomic_file.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gnnrt {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kAlign = 64;

struct DTypeInfo {
  DType dtype;
  std::string_view descr;  // as numpy writes it: byte order, kind, size
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "<f4", 4}, {DType::kF64, "<f8", 8}, {DType::kI32, "<i4", 4},
    {DType::kI64, "<i8", 8}, {DType::kBool, "|b1", 1},
};

// Finds the dtype of a descr such as '<f4', '=i8', '|b1' or '?'; null if unsupported.
const DTypeInfo* find_dtype(std::string_view descr) {
  if (descr == "?") descr = "|b1";
  if (descr.size() != 3) return nullptr;
  const char order = descr[0];
  for (const auto& d : kDTypes) {
    if (d.descr.substr(1) != descr.substr(1)) continue;
    // One-byte types have no byte order; wider ones must be little-endian.
    if (d.size == 1 || order == '<' || order == '=') return &d;
  }
  return nullptr;
}

const DTypeInfo& info(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d;
  }
  throw NpyError("unknown dtype");
}

[[noreturn]] void fail(std::string_view source, std::string_view what) {
  throw NpyError(fmt::format("{}: {}", source, what));
}

// The element count of a shape read from `source`.
int64_t elements_of(const std::vector<int64_t>& shape, std::string_view source) {
  try {
    return element_count(shape, "");
  } catch (const TensorError& e) {
    fail(source, e.what());
  }
}

// The value text after 'key': in the header dict, up to the next top-level ',' or '}'.
std::string_view dict_value(std::string_view header, std::string_view key, std::string_view source) {
  const std::string quoted = fmt::format("'{}'", key);
  const std::size_t k = header.find(quoted);
  if (k == std::string_view::npos) fail(source, fmt::format("header has no {} key", quoted));
  std::size_t i = header.find(':', k + quoted.size());
  if (i == std::string_view::npos) fail(source, fmt::format("header key {} has no value", quoted));
  ++i;
  while (i < header.size() && header[i] == ' ') ++i;
  std::size_t end = i;
  int depth = 0;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  if (end == header.size() || depth != 0) fail(source, fmt::format("header value of {} is not terminated", quoted));
  return header.substr(i, end - i);
}

std::vector<int64_t> parse_shape(std::string_view text, std::string_view source) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    fail(source, fmt::format("shape '{}' is not a tuple", text));
  }
  std::vector<int64_t> shape;
  std::string_view rest = text.substr(1, text.size() - 2);
  while (!rest.empty()) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (rest.empty()) break;
    if (rest.front() == '-') {
      fail(source, fmt::format("shape '{}' has a negative dimension", text));
    }
    int64_t dim = 0;
    std::size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') {
      if (dim > (std::numeric_limits<int64_t>::max() - 9) / 10) fail(source, "shape dimension overflows");
      dim = dim * 10 + (rest[digits] - '0');
      ++digits;
    }
    if (digits == 0) fail(source, fmt::format("shape '{}' has a non-numeric dimension", text));
    shape.push_back(dim);
    rest.remove_prefix(digits);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.empty()) {
      if (rest.front() != ',') fail(source, fmt::format("shape '{}' is malformed", text));
      rest.remove_prefix(1);
    }
  }
  return shape;
}

}  // namespace

Tensor parse_npy(std::span<const std::byte> file, std::string_view source) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(file.data());
  if (file.size() < kMagicSize + 2 || std::memcmp(bytes, kMagic, kMagicSize) != 0) {
    fail(source, "not a .npy file (bad magic string)");
  }
  const int major = bytes[kMagicSize];
  std::size_t header_len = 0;
  std::size_t offset = 0;
  if (major == 1) {
    if (file.size() < 10) fail(source, "truncated header length");
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) fail(source, "truncated header length");
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8) | (std::size_t{bytes[10]} << 16) |
                 (std::size_t{bytes[11]} << 24);
    offset = 12;
  } else {
    fail(source, fmt::format("unsupported .npy format version {}", major));
  }
  if (file.size() < offset + header_len) fail(source, "header is truncated");
  const std::string_view header(reinterpret_cast<const char*>(bytes + offset), header_len);
  if (header.find('{') == std::string_view::npos || header.find('}') == std::string_view::npos) {
    fail(source, "header is not a dict");
  }

  std::string_view descr = dict_value(header, "descr", source);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') || descr.back() != descr.front()) {
    fail(source, fmt::format("descr {} is not a string", descr));
  }
  descr = descr.substr(1, descr.size() - 2);
  const DTypeInfo* found = find_dtype(descr);
  if (found == nullptr) {
    if (!descr.empty() && descr.front() == '>') fail(source, fmt::format("big-endian dtype '{}' is not supported", descr));
    fail(source, fmt::format("dtype '{}' is not supported (float32, float64, int32, int64, bool)", descr));
  }
  const std::string_view fortran = dict_value(header, "fortran_order", source);
  if (fortran == "True") fail(source, "Fortran-order arrays are not supported");
  if (fortran != "False") fail(source, fmt::format("fortran_order '{}' is not a bool", fortran));

  std::vector<int64_t> shape = parse_shape(dict_value(header, "shape", source), source);
  const int64_t count = elements_of(shape, source);
  if (count > static_cast<int64_t>(file.size())) {  // checked before allocating
    fail(source, fmt::format("shape ({}) has {} elements, more than the file's {} bytes",
                             fmt::join(shape, ", "), count, file.size()));
  }
  Tensor array(found->dtype, std::move(shape));
  const std::size_t data_offset = offset + header_len;
  const std::size_t expected = static_cast<std::size_t>(array.size()) * found->size;
  const std::size_t actual = file.size() - data_offset;
  if (actual != expected) {
    fail(source, fmt::format("data has {} bytes, shape ({}) of {} needs {}", actual,
                             fmt::join(array.shape(), ", "), to_string(found->dtype), expected));
  }
  if (expected > 0) std::memcpy(array.bytes().data(), bytes + data_offset, expected);
  return array;
}

Tensor read_npy(const std::filesystem::path& path) {
  std::string content;
  try {
    content = read_whole_file(path);
  } catch (const std::runtime_error& e) {
    throw NpyError(e.what());  // names the path: a directory, unreadable, ...
  }
  return parse_npy(std::as_bytes(std::span(content)), path.string());
}

void write_npy(const std::filesystem::path& path, const Tensor& array) {
  std::string shape;
  for (const int64_t d : array.shape()) shape += fmt::format("{}, ", d);
  if (array.shape().size() > 1) shape.resize(shape.size() - 2);
  if (array.shape().size() == 1) shape.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   info(array.dtype()).descr, shape);
  // Version 1.0 stores the header length in 16 bits; longer headers need 2.0.
  const auto padded = [&](std::size_t prefix) {
    return header.size() + 1 + (kAlign - (prefix + header.size() + 1) % kAlign) % kAlign;
  };
  const bool v1 = padded(10) <= 0xffff;
  const std::size_t prefix = v1 ? 10 : 12;
  header.append(padded(prefix) - header.size() - 1, ' ');
  header.push_back('\n');

  std::string out(kMagic, kMagicSize);
  out.push_back(static_cast<char>(v1 ? 1 : 2));
  out.push_back(0);
  const std::size_t n = header.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  if (!v1) {
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    out.push_back(static_cast<char>((n >> 24) & 0xff));
  }
  out += header;

  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw NpyError(fmt::format("{}: cannot open for writing", tmp.string()));
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    f.write(reinterpret_cast<const char*>(array.bytes().data()),
            static_cast<std::streamsize>(array.bytes().size()));
    if (!f) throw NpyError(fmt::format("{}: write failed", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace gnnrt
