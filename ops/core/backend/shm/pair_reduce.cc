#include "pair_reduce.h"

#include <type_traits>

#include <cstring>

#include "../../buffer_ops.h"
#include "../../half_reduce.h"
#include "../nan_extreme.h"

namespace kerashvd {
namespace {

template <typename T>
struct Sum {
  // Integers through their unsigned type: wrapping, without signed overflow's undefined
  // behaviour (the bits equal two's complement wrapping, as MPI's sum gives).
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct Product {
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Promoted to at least unsigned int, so that uint8 products cannot overflow int.
      using U = std::common_type_t<std::make_unsigned_t<T>, unsigned int>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};

template <typename T, bool kMax>
struct Extreme {
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return NanExtreme<T, kMax>(a, b);
    else return (a > b) == kMax ? a : b;
  }
};

template <typename T, typename Op>
void Run(const void* a, const void* b, void* out, void* copy, int64_t count, double factor) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* o = static_cast<T*>(out);
  T* __restrict c = static_cast<T*>(copy);
  if (c == nullptr && factor == 1.0) {  // in place, no second copy (carry.h)
    for (int64_t i = 0; i < count; ++i) o[i] = Op::Apply(x[i], y[i]);
    return;
  }
  if (factor == 1.0) {  // the common case, kept free of the multiplication
    for (int64_t i = 0; i < count; ++i) {
      const T v = Op::Apply(x[i], y[i]);
      o[i] = v;
      c[i] = v;
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const T v = ScaleOne(Op::Apply(x[i], y[i]), factor);
    o[i] = v;
    c[i] = v;
  }
}

template <typename T>
void RunOp(const void* a, const void* b, void* out, void* copy, int64_t count, ReduceOp op,
           double factor) {
  switch (op) {
    case ReduceOp::kMin: return Run<T, Extreme<T, false>>(a, b, out, copy, count, factor);
    case ReduceOp::kMax: return Run<T, Extreme<T, true>>(a, b, out, copy, count, factor);
    case ReduceOp::kProduct: return Run<T, Product<T>>(a, b, out, copy, count, factor);
    default: return Run<T, Sum<T>>(a, b, out, copy, count, factor);
  }
}

// float16/bfloat16 Sum or Product: ReduceHalves's arithmetic (as the MPI backend's), then the
// factor as ScaleCopy applies it, in passes over the (cache-sized) chunk.
void RunHalves(const void* a, const void* b, void* out, void* copy, int64_t count,
               DataType dtype, ReduceOp op, double factor) {
  const size_t bytes = static_cast<size_t>(count) * 2;
  if (out == a) {
    ReduceHalves(b, out, count, dtype, op);  // commutative on bits
  } else {
    if (out != b) std::memmove(out, b, bytes);
    ReduceHalves(a, out, count, dtype, op);
  }
  if (factor != 1.0) ScaleCopy(out, out, count, dtype, factor);
  if (copy != nullptr) std::memcpy(copy, out, bytes);
}

}  // namespace

bool PairReducible(DataType dtype, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kMin && op != ReduceOp::kMax &&
      op != ReduceOp::kProduct)
    return false;
  // Min and Max of halves are taken in float32 (WireType), never here.
  if (IsHalf(dtype)) return op == ReduceOp::kSum || op == ReduceOp::kProduct;
  return IsReducible(dtype);
}

void PairReduce(const void* a, const void* b, void* out, void* copy, int64_t count,
                DataType dtype, ReduceOp op, double factor) {
  switch (dtype) {
    case DataType::kUint8: return RunOp<uint8_t>(a, b, out, copy, count, op, factor);
    case DataType::kInt8: return RunOp<int8_t>(a, b, out, copy, count, op, factor);
    case DataType::kInt32: return RunOp<int32_t>(a, b, out, copy, count, op, factor);
    case DataType::kInt64: return RunOp<int64_t>(a, b, out, copy, count, op, factor);
    case DataType::kFloat32: return RunOp<float>(a, b, out, copy, count, op, factor);
    case DataType::kFloat64: return RunOp<double>(a, b, out, copy, count, op, factor);
    case DataType::kFloat16:
    case DataType::kBfloat16: return RunHalves(a, b, out, copy, count, dtype, op, factor);
    default: return;
  }
}

}  // namespace kerashvd
