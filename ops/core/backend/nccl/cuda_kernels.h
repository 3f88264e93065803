// Element-wise kernels for GPU buffers, enqueued on a stream: the GPU counterparts of
// ../../buffer_ops.h, with the same semantics (integers are scaled through double and
// truncated; float16/bfloat16 round to nearest even).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../types.h"

namespace kerashvd {

// dst[i] = src[i] * factor for a natively reducible dtype (src may equal dst; float16 and
// bfloat16 in float32, rounded to nearest even); other dtypes are copied. factor == 1 is a plain copy (nothing when src == dst).
cudaError_t LaunchScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                            double factor, cudaStream_t stream);
// dst[i] = the low `width` bytes (1, 2, 4 or 8) of `bits`, for i < count: a joined rank's
// identity elements (IdentityBits in ../../buffer_ops.h).
cudaError_t LaunchFill(void* dst, int64_t count, size_t width, uint64_t bits, cudaStream_t stream);
// float16/bfloat16 -> float32, multiplied by factor.
cudaError_t LaunchHalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream);
// float32 -> float16/bfloat16, multiplied by factor first.
cudaError_t LaunchFloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream);

// NaN-propagating Min/Max of float32/float64 on top of NCCL's integer Min/Max (NCCL's own
// float Min/Max use fminf/fmaxf, which drop NaN). Each value becomes an unsigned key of the
// same width whose order is the values' order, with -0.0 below +0.0 and NaN above everything
// (`max`) or below everything (Min); after an integer reduction, the keys go back to values,
// any NaN as the canonical quiet NaN (the bits the MPI backend produces, mpi_reduce_ops.h).
// src may equal dst.
cudaError_t LaunchToOrderKeys(const void* src, void* dst, int64_t count, DataType dtype, bool max,
                              cudaStream_t stream);
cudaError_t LaunchFromOrderKeys(void* buffer, int64_t count, DataType dtype, cudaStream_t stream);

}  // namespace kerashvd
