#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace kerashvd {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

int Blocks(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <typename T>
__global__ void ScaleKernel(const T* src, T* dst, int64_t n, double factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_floating_point<T>::value) {
      dst[i] = src[i] * static_cast<T>(factor);
    } else {
      dst[i] = static_cast<T>(static_cast<double>(src[i]) * factor);
    }
  }
}

template <typename U>
__global__ void FillKernel(U* dst, int64_t n, U value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = value;
}

template <typename U>
cudaError_t Fill(void* dst, int64_t n, uint64_t bits, cudaStream_t stream) {
  FillKernel<U><<<Blocks(n), kThreads, 0, stream>>>(static_cast<U*>(dst), n, static_cast<U>(bits));
  return cudaGetLastError();
}

template <typename H, bool kToFloat>
__global__ void ConvertKernel(const void* src, void* dst, int64_t n, float factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kToFloat) {
      static_cast<float*>(dst)[i] = static_cast<float>(static_cast<const H*>(src)[i]) * factor;
    } else {
      const float x = static_cast<const float*>(src)[i] * factor;
      if constexpr (std::is_same<H, __half>::value) static_cast<H*>(dst)[i] = __float2half_rn(x);
      else static_cast<H*>(dst)[i] = __float2bfloat16_rn(x);
    }
  }
}

// float16/bfloat16 scaled in float32 and rounded to nearest even, as the host's ScaleCopy does.
template <typename H>
__global__ void HalfScaleKernel(const H* src, H* dst, int64_t n, float factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = static_cast<float>(src[i]) * factor;
    if constexpr (std::is_same<H, __half>::value) dst[i] = __float2half_rn(x);
    else dst[i] = __float2bfloat16_rn(x);
  }
}

template <typename H>
cudaError_t HalfScale(const void* src, void* dst, int64_t n, double factor, cudaStream_t stream) {
  HalfScaleKernel<H><<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<const H*>(src), static_cast<H*>(dst), n, static_cast<float>(factor));
  return cudaGetLastError();
}

template <typename T>
cudaError_t Scale(const void* src, void* dst, int64_t n, double factor, cudaStream_t stream) {
  ScaleKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                      static_cast<T*>(dst), n, factor);
  return cudaGetLastError();
}

template <bool kToFloat>
cudaError_t Convert(const void* src, void* dst, int64_t n, DataType dtype, double factor,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const float f = static_cast<float>(factor);
  if (dtype == DataType::kBfloat16)
    ConvertKernel<__nv_bfloat16, kToFloat><<<Blocks(n), kThreads, 0, stream>>>(src, dst, n, f);
  else
    ConvertKernel<__half, kToFloat><<<Blocks(n), kThreads, 0, stream>>>(src, dst, n, f);
  return cudaGetLastError();
}

// U: the unsigned integer of F's width.
template <typename F, typename U>
__global__ void ToKeysKernel(const F* src, U* dst, int64_t n, bool max) {
  constexpr U kSign = U{1} << (sizeof(U) * 8 - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const F x = src[i];
    U bits;
    memcpy(&bits, &x, sizeof(U));
    if (x != x) dst[i] = max ? ~U{0} : U{0};              // NaN: beyond every value
    else dst[i] = (bits & kSign) ? ~bits : (bits | kSign);  // negatives reversed, below positives
  }
}

template <typename F, typename U>
__global__ void FromKeysKernel(U* buffer, int64_t n, U canonical_nan) {
  constexpr U kSign = U{1} << (sizeof(U) * 8 - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const U key = buffer[i];
    const U bits = (key & kSign) ? (key ^ kSign) : ~key;
    F x;
    memcpy(&x, &bits, sizeof(U));
    buffer[i] = x != x ? canonical_nan : bits;
  }
}

}  // namespace

cudaError_t LaunchToOrderKeys(const void* src, void* dst, int64_t count, DataType dtype, bool max,
                              cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dtype == DataType::kFloat64)
    ToKeysKernel<double, uint64_t><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<const double*>(src), static_cast<uint64_t*>(dst), count, max);
  else
    ToKeysKernel<float, uint32_t><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<const float*>(src), static_cast<uint32_t*>(dst), count, max);
  return cudaGetLastError();
}

cudaError_t LaunchFromOrderKeys(void* buffer, int64_t count, DataType dtype, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dtype == DataType::kFloat64)
    FromKeysKernel<double, uint64_t><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<uint64_t*>(buffer), count, uint64_t{0x7ff8000000000000});
  else
    FromKeysKernel<float, uint32_t><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<uint32_t*>(buffer), count, uint32_t{0x7fc00000});
  return cudaGetLastError();
}

cudaError_t LaunchScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                            double factor, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (factor != 1.0) {
    switch (dtype) {
      case DataType::kUint8: return Scale<uint8_t>(src, dst, count, factor, stream);
      case DataType::kInt8: return Scale<int8_t>(src, dst, count, factor, stream);
      case DataType::kInt32: return Scale<int32_t>(src, dst, count, factor, stream);
      case DataType::kInt64: return Scale<int64_t>(src, dst, count, factor, stream);
      case DataType::kFloat32: return Scale<float>(src, dst, count, factor, stream);
      case DataType::kFloat64: return Scale<double>(src, dst, count, factor, stream);
      case DataType::kFloat16: return HalfScale<__half>(src, dst, count, factor, stream);
      case DataType::kBfloat16: return HalfScale<__nv_bfloat16>(src, dst, count, factor, stream);
      default: break;
    }
  }
  if (src == dst) return cudaSuccess;
  return cudaMemcpyAsync(dst, src, count * DataTypeSize(dtype), cudaMemcpyDeviceToDevice, stream);
}

cudaError_t LaunchFill(void* dst, int64_t count, size_t width, uint64_t bits, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (width) {
    case 1: return Fill<uint8_t>(dst, count, bits, stream);
    case 2: return Fill<uint16_t>(dst, count, bits, stream);
    case 4: return Fill<uint32_t>(dst, count, bits, stream);
    case 8: return Fill<uint64_t>(dst, count, bits, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchHalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream) {
  return Convert<true>(src, dst, count, dtype, factor, stream);
}

cudaError_t LaunchFloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                              double factor, cudaStream_t stream) {
  return Convert<false>(src, dst, count, dtype, factor, stream);
}

}  // namespace kerashvd
