// Element-wise helpers on host buffers: scaling, float16/bfloat16 <-> float32 conversion, and
// the identity elements a joined rank contributes to a reduction.
#pragma once

#include <cstdint>
#include <type_traits>

#include "types.h"

namespace kerashvd {

// dst[i] = src[i] * factor, for a natively reducible dtype (src may equal dst). float16 and
// bfloat16 are multiplied in float32 and rounded to nearest even.
void ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype, double factor);
// One element of ScaleCopy: floats multiply by the factor rounded to their type, integers go
// through double. The shared-memory pair scales with it too, so its results equal a fused
// reduction's followed by ScaleCopy, bit for bit.
template <typename T>
inline T ScaleOne(T value, double factor) {
  if constexpr (std::is_floating_point<T>::value) return value * static_cast<T>(factor);
  else return static_cast<T>(static_cast<double>(value) * factor);
}
// One float16/bfloat16 element (its bits) as float32, and a float32 rounded to nearest even.
float HalfToFloatOne(uint16_t bits, DataType dtype);
uint16_t FloatToHalfOne(float value, DataType dtype);
// float16/bfloat16 -> float32, multiplied by factor.
void HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype, double factor);
// float32 -> float16/bfloat16 (round to nearest even), multiplied by factor first.
void FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype, double factor);

// The bits of one element of `dtype` that leave `op` unchanged, in the low DataTypeSize(dtype)
// bytes: 0 for Sum/Average, 1 for Product, the lowest value for Max (-inf for floating types,
// numeric_limits::lowest for integers) and the highest for Min (+inf, max). A rank inside
// join() contributes it, so that it cannot change any rank's result. Only reducible dtypes
// (IsReducible) are allowed.
uint64_t IdentityBits(DataType dtype, ReduceOp op);
// dst[i] = the identity of `op` (IdentityBits) for i < count.
void FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op);

}  // namespace kerashvd
