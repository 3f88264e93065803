// Element-wise kernels for GPU buffers, enqueued on a stream: the GPU counterparts of
// ../../buffer_ops.h, with the same semantics (integers are scaled through double and
// truncated; float16/bfloat16 round to nearest even).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../types.h"

namespace kerashvd {

// dst[i] = src[i] * factor for a natively reducible dtype (src may equal dst); other dtypes
// are copied. factor == 1 is a plain copy (nothing when src == dst).
cudaError_t LaunchScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                            double factor, cudaStream_t stream);
// float16/bfloat16 -> float32, multiplied by factor.
cudaError_t LaunchHalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream);
// float32 -> float16/bfloat16, multiplied by factor first.
cudaError_t LaunchFloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream);

}  // namespace kerashvd
