// NumPy .npy files: read and write arrays so Python users can load results
// with numpy.load and hand us inputs from numpy.save. Supports format
// versions 1.0, 2.0 and 3.0, little-endian float32/float64/int32/int64/bool,
// C order. Anything else (big-endian, Fortran order, other dtypes, a short
// or malformed file) throws NpyError naming the file and the problem.
// Writes go to a temporary file renamed into place, so a reader never sees a
// half-written array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gnnrt {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { kF32, kF64, kI32, kI64, kBool };

std::string_view to_string(DType dtype);
// The inverse of to_string ("float32", ...); throws NpyError on another name.
DType parse_dtype(std::string_view name);
std::size_t item_size(DType dtype);
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kBool; }  // numpy bool is 1 byte

// An n-dimensional array in C order with its bytes in host (little-endian) order.
class NpyArray {
 public:
  NpyArray() = default;
  NpyArray(DType dtype, std::vector<int64_t> shape);  // zero-filled

  template <typename T>
  static NpyArray from(std::span<const T> values, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const;  // number of elements
  std::span<const std::byte> bytes() const { return data_; }
  std::span<std::byte> bytes() { return data_; }

  // Typed views; throw NpyError if T is not the array's dtype.
  template <typename T>
  std::span<const T> values() const;
  template <typename T>
  std::span<T> values();

  // Elements converted to T (any numeric dtype).
  template <typename T>
  std::vector<T> to_vector() const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> data_;
};

// `source` names the input in errors (a path, usually).
NpyArray parse_npy(std::span<const std::byte> file, std::string_view source);
NpyArray read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const NpyArray& array);

template <typename T>
void write_npy(const std::filesystem::path& path, std::span<const T> values,
               std::vector<int64_t> shape) {
  write_npy(path, NpyArray::from(values, std::move(shape)));
}

}  // namespace gnnrt
