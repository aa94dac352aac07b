#include "collectives/types.h"

#include <stdexcept>
#include <type_traits>

namespace gnnrt::collectives {
namespace {

template <typename T>
struct Combine {
  static T sum(T a, T b) {
    if constexpr (std::is_integral_v<T>) {  // wrap around like MPI_SUM, without UB
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
  static T max(T a, T b) { return b > a ? b : a; }
  static T min(T a, T b) { return b < a ? b : a; }
  static ValueLoc<T> maxloc(ValueLoc<T> a, ValueLoc<T> b) {
    if (b.value > a.value || (b.value == a.value && b.loc < a.loc)) return b;
    return a;
  }
};

template <typename E, typename F>
void apply(void* out, const void* a, const void* b, std::size_t count, F f) {
  auto* o = static_cast<E*>(out);
  const auto* x = static_cast<const E*>(a);
  const auto* y = static_cast<const E*>(b);
  for (std::size_t i = 0; i < count; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void reduce_typed(ReduceOp op, bool located, void* out, const void* a, const void* b,
                  std::size_t count) {
  if (located) {
    apply<ValueLoc<T>>(out, a, b, count, [](auto x, auto y) { return Combine<T>::maxloc(x, y); });
    return;
  }
  switch (op) {
    // Lambdas, not function pointers, so the loops inline and vectorise.
    case ReduceOp::sum: return apply<T>(out, a, b, count, [](T x, T y) { return Combine<T>::sum(x, y); });
    case ReduceOp::max: return apply<T>(out, a, b, count, [](T x, T y) { return Combine<T>::max(x, y); });
    case ReduceOp::min: return apply<T>(out, a, b, count, [](T x, T y) { return Combine<T>::min(x, y); });
    case ReduceOp::maxloc: break;
  }
  throw std::logic_error("reduce: maxloc on plain values");
}

}  // namespace

std::size_t ElementType::size() const {
  switch (dtype) {
    case Dtype::f32: return located ? sizeof(ValueLoc<float>) : sizeof(float);
    case Dtype::f64: return located ? sizeof(ValueLoc<double>) : sizeof(double);
    case Dtype::i32: return located ? sizeof(ValueLoc<int32_t>) : sizeof(int32_t);
    case Dtype::i64: return located ? sizeof(ValueLoc<int64_t>) : sizeof(int64_t);
  }
  return 0;
}

std::string_view name(Dtype dtype) {
  switch (dtype) {
    case Dtype::f32: return "f32";
    case Dtype::f64: return "f64";
    case Dtype::i32: return "i32";
    case Dtype::i64: return "i64";
  }
  return "?";
}

std::string_view name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::maxloc: return "maxloc";
  }
  return "?";
}

std::string name(ElementType type) {
  std::string text(name(type.dtype));
  if (type.located) text.append(",loc");
  return text;
}

ReduceOp parse_reduce_op(std::string_view text) {
  for (auto op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::maxloc}) {
    if (name(op) == text) return op;
  }
  throw std::invalid_argument("unknown reduce op '" + std::string(text) +
                              "' (expected sum, max, min or maxloc)");
}

Dtype parse_dtype(std::string_view text) {
  for (auto d : {Dtype::f32, Dtype::f64, Dtype::i32, Dtype::i64}) {
    if (name(d) == text) return d;
  }
  throw std::invalid_argument("unknown dtype '" + std::string(text) +
                              "' (expected f32, f64, i32 or i64)");
}

void check_reduce(ReduceOp op, ElementType type) {
  if ((op == ReduceOp::maxloc) != type.located) {
    throw std::invalid_argument("reduce op " + std::string(name(op)) + " does not apply to " +
                                name(type) + " elements (maxloc needs ValueLoc pairs)");
  }
}

void reduce(ReduceOp op, ElementType type, void* out, const void* a, const void* b,
            std::size_t count) {
  switch (type.dtype) {
    case Dtype::f32: return reduce_typed<float>(op, type.located, out, a, b, count);
    case Dtype::f64: return reduce_typed<double>(op, type.located, out, a, b, count);
    case Dtype::i32: return reduce_typed<int32_t>(op, type.located, out, a, b, count);
    case Dtype::i64: return reduce_typed<int64_t>(op, type.located, out, a, b, count);
  }
}

void reduce_into(ReduceOp op, ElementType type, void* inout, const void* in, std::size_t count) {
  reduce(op, type, inout, inout, in, count);
}

}  // namespace gnnrt::collectives
