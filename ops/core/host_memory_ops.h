// HostMemoryOps: MemoryOps on host memory, done synchronously on the calling thread.
#pragma once

#include <vector>

#include "fusion.h"
#include "memory_ops.h"

namespace kerashvd {

class HostMemoryOps : public MemoryOps {
 public:
  // `huge_pages`: back the fusion buffer with transparent huge pages (see FusionBuffer).
  explicit HostMemoryOps(bool huge_pages = false) : fusion_(huge_pages) {}
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
  Status Finish() override { return Status::Ok(); }

 private:
  kerashvd::FusionBuffer fusion_;
  std::vector<char> scratch_;
};

}  // namespace kerashvd
