#include "cuda_memory_ops.h"

#include "../../buffer_ops.h"
#include "cuda_kernels.h"

namespace kerashvd {

DeviceArena::~DeviceArena() {
  if (data_ != nullptr) cudaFree(data_);  // errors at teardown cannot be reported
}

Status DeviceArena::Reserve(int64_t bytes, void** out) {
  if (bytes > bytes_) {
    if (data_ != nullptr) {
      // cudaFree waits for the device, so no enqueued work still uses the old buffer.
      KERASHVD_RETURN_IF_ERROR(CudaStatus(cudaFree(data_), "cudaFree"));
      data_ = nullptr;
      bytes_ = 0;
    }
    cudaError_t error = cudaMalloc(&data_, bytes);
    if (error != cudaSuccess) {
      data_ = nullptr;
      return Status::Internal("kerashvd could not allocate a " + std::to_string(bytes) +
                              "-byte GPU fusion buffer: " + cudaGetErrorString(error) +
                              ". Lower KERASHVD_FUSION_THRESHOLD or leave more GPU memory free.");
    }
    bytes_ = bytes;
  }
  *out = data_;
  return Status::Ok();
}

Status CudaMemoryOps::FusionBuffer(int64_t bytes, void** out) {
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin("fusion buffer"));
  return fusion_.Reserve(bytes, out);
}

Status CudaMemoryOps::Scratch(int64_t bytes, void** out) {
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin("scratch buffer"));
  return scratch_.Reserve(bytes, out);
}

Status CudaMemoryOps::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes == 0 || dst == src) return Status::Ok();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nccl_->stream()),
                    "cudaMemcpyAsync");
}

Status CudaMemoryOps::Zero(void* dst, int64_t bytes) {
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemsetAsync(dst, 0, bytes, nccl_->stream()), "cudaMemsetAsync");
}

Status CudaMemoryOps::FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op) {
  const uint64_t bits = IdentityBits(dtype, op);
  if (bits == 0) return Zero(dst, count * DataTypeSize(dtype));
  return CudaStatus(LaunchFill(dst, count, DataTypeSize(dtype), bits, nccl_->stream()),
                    "kerashvd fill kernel");
}

Status CudaMemoryOps::ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                                double factor) {
  return CudaStatus(LaunchScaleCopy(src, dst, count, dtype, factor, nccl_->stream()),
                    "kerashvd scale kernel");
}

Status CudaMemoryOps::HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                                  double factor) {
  return CudaStatus(LaunchHalfToFloat(src, dst, count, dtype, factor, nccl_->stream()),
                    "kerashvd widening kernel");
}

Status CudaMemoryOps::FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                                  double factor) {
  return CudaStatus(LaunchFloatToHalf(src, dst, count, dtype, factor, nccl_->stream()),
                    "kerashvd narrowing kernel");
}

Status CudaMemoryOps::Finish() { return nccl_->Wait("kerashvd GPU collective"); }

}  // namespace kerashvd
