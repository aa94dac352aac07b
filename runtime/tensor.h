// Tensor: the core's n-dimensional array — what a simulated NeuronCore holds
// in its HBM (inputs, parameters, optimizer and metric state) and what the
// host reads back. C order, little-endian bytes, one of five dtypes; owns its
// bytes (copyable, movable). Not thread-safe. Type errors (asking a float32
// tensor for int64 values, a shape that cannot hold the given values) throw
// TensorError naming both. Files: runtime/npy.h reads and writes .npy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gnnrt {

class TensorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { kF32, kF64, kI32, kI64, kBool };

std::string_view to_string(DType dtype);  // "float32", ... (numpy's names)
// The inverse of to_string; throws TensorError on another name.
DType parse_dtype(std::string_view name);
std::size_t item_size(DType dtype);
bool is_floating(DType dtype);
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kBool; }  // numpy bool is 1 byte

// Elements of a shape; throws TensorError on a negative or overflowing
// dimension, naming `what`.
int64_t element_count(const std::vector<int64_t>& shape, std::string_view what = "tensor");

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // zero-filled

  template <typename T>
  static Tensor from(std::span<const T> values, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const;  // number of elements
  std::span<const std::byte> bytes() const { return data_; }
  std::span<std::byte> bytes() { return data_; }

  // Typed views; throw TensorError if T is not the tensor's dtype.
  template <typename T>
  std::span<const T> values() const;
  template <typename T>
  std::span<T> values();

  // Elements converted to T (any numeric dtype).
  template <typename T>
  std::vector<T> to_vector() const;

  // The same elements as `dtype` (float <-> double, ints <-> floats).
  Tensor cast(DType dtype) const;

 private:
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> data_;
};

}  // namespace gnnrt
