// Fusion: which of a cycle's allreduces share one backend call.
//
// PlanFusion is a pure function of the cycle's work list, which is identical on every rank,
// so every rank makes the same groups in the same order and results are reproducible.
// Rules: only allreduces fuse; they fuse with allreduces of the same reduce op (Average counts
// as Sum), the same wire dtype (WireType in types.h), the same device and the same process set
// (Request::process_set); a
// group is filled in work-list order until adding the next tensor would pass the threshold.
// A request is never split: a grouped allreduce is always inside one group, even when it
// alone passes the threshold. Every other collective is a group of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "controller.h"

namespace kerashvd {

// Bytes `request` occupies in the fusion buffer (in its WireType).
int64_t FusedBytes(const Request& request);

// Groups of indices into `work`, in execution order.
std::vector<std::vector<size_t>> PlanFusion(const std::vector<WorkItem>& work,
                                            int64_t threshold_bytes);

// The buffer fused tensors are packed into; it grows to the largest group seen and is reused.
//
// With huge pages it is allocated in whole 2 MiB blocks, 2 MiB aligned, and advised
// MADV_HUGEPAGE, so that it is backed by huge pages whatever its size: the TLB misses of 4 KiB
// pages cost MPI's shared-memory reduction much time also below HugePages::kMinBytes (raw
// MPI_Allreduce of 1 MiB on 2 ranks here: ~610 us on 4 KiB pages, ~230 us on huge pages).
class FusionBuffer {
 public:
  explicit FusionBuffer(bool huge_pages = false) : huge_pages_(huge_pages) {}
  ~FusionBuffer();
  FusionBuffer(const FusionBuffer&) = delete;
  FusionBuffer& operator=(const FusionBuffer&) = delete;
  // Returns nullptr when the memory cannot be allocated.
  void* Reserve(int64_t bytes);

 private:
  bool huge_pages_;
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace kerashvd
