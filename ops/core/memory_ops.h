// MemoryOps: the executor's element-wise work and its buffers, on the memory a backend reads.
//
// The executor is written once; what differs between host tensors (MPI) and GPU tensors (NCCL)
// is where buffers live and how bytes are copied, zeroed, scaled and widened (WireType). Host memory does
// the work synchronously on the calling thread (HostMemoryOps); GPU memory enqueues it on the
// communicator's stream, in order with the collectives, and Finish() waits for the stream.
//
// Every method that touches memory may be asynchronous: its effect is only guaranteed to be
// visible to the caller (and to other streams or the host) after Finish() returns Ok. The
// backend's collectives run in the same order as these calls.
#pragma once

#include <cstdint>

#include "status.h"
#include "types.h"

namespace kerashvd {

class MemoryOps {
 public:
  virtual ~MemoryOps() = default;

  // A buffer of at least `bytes` for fusing tensors, reused (and possibly moved) by the next
  // call. 8-byte aligned.
  virtual Status FusionBuffer(int64_t bytes, void** out) = 0;
  // A buffer of at least `bytes` that outputs of a joined rank are written to and discarded.
  virtual Status Scratch(int64_t bytes, void** out) = 0;

  virtual Status Copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual Status Zero(void* dst, int64_t bytes) = 0;
  // dst[i] = the identity element of `op` for `dtype` (IdentityBits in buffer_ops.h): what a
  // rank inside join() contributes to a reduction.
  virtual Status FillIdentity(void* dst, int64_t count, DataType dtype, ReduceOp op) = 0;
  // dst[i] = src[i] * factor for a natively reducible dtype (src may equal dst; float16 and
  // bfloat16 are multiplied in float32 and rounded to nearest even); other dtypes are copied
  // unscaled.
  virtual Status ScaleCopy(const void* src, void* dst, int64_t count, DataType dtype,
                           double factor) = 0;
  // float16/bfloat16 -> float32, multiplied by factor.
  virtual Status HalfToFloat(const void* src, float* dst, int64_t count, DataType dtype,
                             double factor) = 0;
  // float32 -> float16/bfloat16 (round to nearest even), multiplied by factor first.
  virtual Status FloatToHalf(const float* src, void* dst, int64_t count, DataType dtype,
                             double factor) = 0;

  // Waits until every earlier call (and collective) has taken effect.
  virtual Status Finish() = 0;
};

}  // namespace kerashvd
