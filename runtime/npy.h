// NumPy .npy files: read and write tensors so Python users can load results
// with numpy.load and hand us inputs from numpy.save. Supports format
// versions 1.0, 2.0 and 3.0, little-endian float32/float64/int32/int64/bool,
// C order. Anything else (big-endian, Fortran order, other dtypes, a negative
// dimension, a header without descr/fortran_order/shape, a short or malformed
// file) throws NpyError naming the file and the problem. Writes go to a
// temporary file renamed into place, so a reader never sees a half-written
// array.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace gnnrt {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `source` names the input in errors (a path, usually).
Tensor parse_npy(std::span<const std::byte> file, std::string_view source);
Tensor read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

template <typename T>
void write_npy(const std::filesystem::path& path, std::span<const T> values,
               std::vector<int64_t> shape) {
  write_npy(path, Tensor::from(values, std::move(shape)));
}

}  // namespace gnnrt
