// Fusion: which of a cycle's allreduces share one backend call.
//
// PlanFusion is a pure function of the cycle's work list, which is identical on every rank,
// so every rank makes the same groups in the same order and results are reproducible.
// Rules: only allreduces fuse; they fuse with allreduces of the same reduce op (Average counts
// as Sum), the same wire dtype (float16/bfloat16 travel as float32) and the same device; a
// group is filled in work-list order until adding the next tensor would pass the threshold.
// A request is never split: a grouped allreduce is always inside one group, even when it
// alone passes the threshold. Every other collective is a group of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "controller.h"

namespace kerashvd {

// Bytes `request` occupies in the fusion buffer (float32 for float16/bfloat16 tensors).
int64_t FusedBytes(const Request& request);

// Groups of indices into `work`, in execution order.
std::vector<std::vector<size_t>> PlanFusion(const std::vector<WorkItem>& work,
                                            int64_t threshold_bytes);

// The buffer fused tensors are packed into; it grows to the largest group seen and is reused.
class FusionBuffer {
 public:
  void* Reserve(int64_t bytes);

 private:
  std::vector<uint64_t> storage_;  // 8-byte aligned
};

}  // namespace kerashvd
