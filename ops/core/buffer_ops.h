// Element-wise helpers on host buffers: scaling and float16/bfloat16 <-> float32 conversion.
#pragma once

#include <cstdint>

#include "types.h"

namespace kerashvd {

// dst[i] = src[i] * factor, for a natively reducible dtype (src may equal dst).
void ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype, double factor);
// float16/bfloat16 -> float32, multiplied by factor.
void HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype, double factor);
// float32 -> float16/bfloat16 (round to nearest even), multiplied by factor first.
void FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype, double factor);

}  // namespace kerashvd
