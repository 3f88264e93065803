#include "host_memory_ops.h"

#include <cstring>

#include "buffer_ops.h"

namespace kerashvd {

Status HostMemoryOps::FusionBuffer(int64_t bytes, void** out) {
  *out = fusion_.Reserve(bytes);
  if (*out == nullptr)
    return Status::Internal("cannot allocate a fusion buffer of " + std::to_string(bytes) +
                            " bytes; lower KERASHVD_FUSION_THRESHOLD");
  return Status::Ok();
}

Status HostMemoryOps::Scratch(int64_t bytes, void** out) {
  if (static_cast<int64_t>(scratch_.size()) < bytes) scratch_.resize(bytes);
  *out = scratch_.data();
  return Status::Ok();
}

Status HostMemoryOps::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  return Status::Ok();
}

Status HostMemoryOps::Zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
  return Status::Ok();
}

Status HostMemoryOps::FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op) {
  kerashvd::FillIdentity(dst, count, dtype, op);
  return Status::Ok();
}

Status HostMemoryOps::ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                                double factor) {
  kerashvd::ScaleCopy(src, dst, count, dtype, factor);
  return Status::Ok();
}

Status HostMemoryOps::HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                                  double factor) {
  kerashvd::HalfToFloat(src, dst, count, dtype, factor);
  return Status::Ok();
}

Status HostMemoryOps::FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                                  double factor) {
  kerashvd::FloatToHalf(src, dst, count, dtype, factor);
  return Status::Ok();
}

}  // namespace kerashvd
