#include "huge_pages.h"

#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older C libraries lack the name
#endif

namespace kerashvd {
namespace {

void AdviseRange(uintptr_t begin, uintptr_t end) {
  if (begin >= end) return;
  void* start = reinterpret_cast<void*>(begin);
  const size_t length = end - begin;
  // Both are hints; errors (EINVAL on old kernels, EAGAIN/ENOMEM under pressure) are ignored.
  (void)madvise(start, length, MADV_HUGEPAGE);
  (void)madvise(start, length, MADV_COLLAPSE);
}

}  // namespace

void HugePages::Advise(const void* data, int64_t bytes) {
  if (!enabled_ || data == nullptr || bytes < kMinBytes) return;
  const uintptr_t address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (address + kBlock - 1) / kBlock * kBlock;
  const uintptr_t last = (address + bytes) / kBlock * kBlock;
  if (seen_.size() > kMaxBlocks) seen_.clear();
  // Advise each run of consecutive unseen blocks with one call pair.
  uintptr_t run = 0;
  for (uintptr_t block = first; block < last; block += kBlock) {
    if (seen_.insert(block).second) {
      if (run == 0) run = block;
    } else if (run != 0) {
      AdviseRange(run, block);
      run = 0;
    }
  }
  if (run != 0) AdviseRange(run, last);
}

}  // namespace kerashvd
