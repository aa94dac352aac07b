// Element types and reduce operations of the collectives, and the one
// reduction kernel every algorithm uses. Knows nothing of MPI.
//
// Layout: a buffer of `count` elements. For ReduceOp::maxloc the elements
// are ValueLoc<T> pairs (the layout of MPI's MPI_FLOAT_INT, MPI_DOUBLE_INT,
// MPI_2INT, MPI_LONG_INT); the result of maxloc is the largest value and,
// among the pairs holding it, the lowest `loc` (callers put their rank there,
// so the winner is the lowest rank holding the maximum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace gnnrt::collectives {

enum class Dtype { f32, f64, i32, i64 };
enum class ReduceOp { sum, max, min, maxloc };

template <typename T>
struct ValueLoc {
  T value;
  int32_t loc;
  friend bool operator==(const ValueLoc&, const ValueLoc&) = default;
};

// What one element of a buffer is: a value of `dtype`, or (located) a
// ValueLoc of it.
struct ElementType {
  Dtype dtype = Dtype::f32;
  bool located = false;
  std::size_t size() const;
  friend bool operator==(const ElementType&, const ElementType&) = default;
};

template <typename T>
struct element_type_of;
template <>
struct element_type_of<float> {
  static constexpr ElementType value{Dtype::f32, false};
};
template <>
struct element_type_of<double> {
  static constexpr ElementType value{Dtype::f64, false};
};
template <>
struct element_type_of<int32_t> {
  static constexpr ElementType value{Dtype::i32, false};
};
template <>
struct element_type_of<int64_t> {
  static constexpr ElementType value{Dtype::i64, false};
};
template <typename T>
struct element_type_of<ValueLoc<T>> {
  static constexpr ElementType value{element_type_of<T>::value.dtype, true};
};
template <typename T>
inline constexpr ElementType element_type_v = element_type_of<std::remove_const_t<T>>::value;

std::string_view name(Dtype dtype);
std::string_view name(ReduceOp op);
std::string name(ElementType type);
ReduceOp parse_reduce_op(std::string_view text);  // throws std::invalid_argument
Dtype parse_dtype(std::string_view text);          // throws std::invalid_argument

// Throws std::invalid_argument unless `op` applies to `type`: maxloc needs
// located elements and located elements need maxloc.
void check_reduce(ReduceOp op, ElementType type);

// inout[i] = inout[i] (op) in[i] for i < count. Commutative for every op
// (IEEE addition is), so partners that combine the same two buffers in
// either order get the same bits.
void reduce_into(ReduceOp op, ElementType type, void* inout, const void* in, std::size_t count);

// out[i] = a[i] (op) b[i]; out may alias a or b.
void reduce(ReduceOp op, ElementType type, void* out, const void* a, const void* b,
            std::size_t count);

}  // namespace gnnrt::collectives
