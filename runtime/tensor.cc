#include "runtime/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace gnnrt {

static_assert(std::endian::native == std::endian::little, "gnnrt assumes a little-endian host");

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF64: return "float64";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBool}) {
    if (to_string(d) == name) return d;
  }
  throw TensorError(fmt::format("unknown dtype '{}' (float32, float64, int32, int64, bool)", name));
}

std::size_t item_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kBool: return 1;
  }
  throw TensorError("unknown dtype");
}

bool is_floating(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF64; }

int64_t element_count(const std::vector<int64_t>& shape, std::string_view what) {
  const std::string prefix = what.empty() ? std::string() : fmt::format("{}: ", what);
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) {
      throw TensorError(fmt::format("{}shape ({}) has a negative dimension", prefix, fmt::join(shape, ", ")));
    }
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      throw TensorError(fmt::format("{}shape ({}) overflows", prefix, fmt::join(shape, ", ")));
    }
    n *= d;
  }
  return n;
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  data_.resize(static_cast<std::size_t>(element_count(shape_)) * item_size(dtype_));
}

template <typename T>
Tensor Tensor::from(std::span<const T> values, std::vector<int64_t> shape) {
  Tensor a(dtype_of<T>(), std::move(shape));
  if (a.size() != static_cast<int64_t>(values.size())) {
    throw TensorError(fmt::format("a tensor of shape ({}) cannot hold {} values",
                                  fmt::join(a.shape_, ", "), values.size()));
  }
  if (!a.data_.empty()) std::memcpy(a.data_.data(), values.data(), a.data_.size());
  return a;
}

int64_t Tensor::size() const { return static_cast<int64_t>(data_.size() / item_size(dtype_)); }

template <typename T>
std::span<const T> Tensor::values() const {
  if (dtype_ != dtype_of<T>()) {
    throw TensorError(fmt::format("tensor is {}, not {}", to_string(dtype_), to_string(dtype_of<T>())));
  }
  return {reinterpret_cast<const T*>(data_.data()), static_cast<std::size_t>(size())};
}

template <typename T>
std::span<T> Tensor::values() {
  const auto v = std::as_const(*this).values<T>();
  return {const_cast<T*>(v.data()), v.size()};
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const auto convert = [&](auto tag) {
    using S = decltype(tag);
    const auto* p = reinterpret_cast<const S*>(data_.data());
    return std::vector<T>(p, p + size());
  };
  switch (dtype_) {
    case DType::kF32: return convert(float{});
    case DType::kF64: return convert(double{});
    case DType::kI32: return convert(int32_t{});
    case DType::kI64: return convert(int64_t{});
    case DType::kBool: return convert(uint8_t{});
  }
  return {};
}

Tensor Tensor::cast(DType dtype) const {
  switch (dtype) {
    case DType::kF32: return from<float>(to_vector<float>(), shape_);
    case DType::kF64: return from<double>(to_vector<double>(), shape_);
    case DType::kI32: return from<int32_t>(to_vector<int32_t>(), shape_);
    case DType::kI64: return from<int64_t>(to_vector<int64_t>(), shape_);
    case DType::kBool: return from<uint8_t>(to_vector<uint8_t>(), shape_);
  }
  throw TensorError("unknown dtype");
}

#define GNNRT_INSTANTIATE(T)                                                    \
  template Tensor Tensor::from<T>(std::span<const T>, std::vector<int64_t>);    \
  template std::span<const T> Tensor::values<T>() const;                        \
  template std::span<T> Tensor::values<T>();                                    \
  template std::vector<T> Tensor::to_vector<T>() const;
GNNRT_INSTANTIATE(float)
GNNRT_INSTANTIATE(double)
GNNRT_INSTANTIATE(int32_t)
GNNRT_INSTANTIATE(int64_t)
GNNRT_INSTANTIATE(uint8_t)

}  // namespace gnnrt
