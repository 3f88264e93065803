// CudaMemoryOps: MemoryOps on one GPU, enqueued on an NcclContext's stream so that copies,
// scaling and the NCCL collectives run in program order without host synchronization;
// Finish() waits for the stream (NcclContext::Wait, which also watches for NCCL errors and
// the engine's abort flag).
#pragma once

#include "../../memory_ops.h"
#include "nccl_context.h"

namespace kerashvd {

// A device allocation that only grows; reused across cycles.
class DeviceArena {
 public:
  ~DeviceArena();
  Status Reserve(int64_t bytes, void** out);

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

class CudaMemoryOps : public MemoryOps {
 public:
  explicit CudaMemoryOps(NcclContext* nccl) : nccl_(nccl) {}
  Status FusionBuffer(int64_t bytes, void** out) override;
  Status Scratch(int64_t bytes, void** out) override;
  Status Copy(void* dst, const void* src, int64_t bytes) override;
  Status Zero(void* dst, int64_t bytes) override;
  Status FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op) override;
  Status ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                   double factor) override;
  Status HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                     double factor) override;
  Status FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                     double factor) override;
  Status Finish() override;

 private:
  NcclContext* nccl_;
  DeviceArena fusion_;
  DeviceArena scratch_;
};

}  // namespace kerashvd
