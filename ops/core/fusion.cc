#include "fusion.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "huge_pages.h"

namespace kerashvd {
namespace {

struct FuseKey {
  bool fusible = false;
  ReduceOp op = ReduceOp::kSum;
  DataType wire = DataType::kFloat32;
  bool on_gpu = false;
  int process_set = 0;
  bool operator==(const FuseKey& o) const {
    return fusible && o.fusible && op == o.op && wire == o.wire && on_gpu == o.on_gpu &&
           process_set == o.process_set;
  }
};

FuseKey KeyOf(const WorkItem& item) {
  FuseKey key;
  const Request& r = item.response.request;
  if (item.response.kind != Response::Kind::kExecute || r.op_type != OpType::kAllreduce) return key;
  key.fusible = true;
  key.op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  key.wire = WireType(r.dtype, key.op);
  key.on_gpu = r.device >= 0;
  key.process_set = r.process_set;
  return key;
}

}  // namespace

int64_t FusedBytes(const Request& request) {
  int64_t elements = 0;
  for (const Shape& s : request.shapes) elements += NumElements(s);
  return elements * static_cast<int64_t>(DataTypeSize(WireType(request.dtype, request.reduce_op)));
}

std::vector<std::vector<size_t>> PlanFusion(const std::vector<WorkItem>& work,
                                            int64_t threshold_bytes) {
  std::vector<std::vector<size_t>> groups;
  std::vector<bool> placed(work.size(), false);
  for (size_t i = 0; i < work.size(); ++i) {
    if (placed[i]) continue;
    placed[i] = true;
    std::vector<size_t> group{i};
    FuseKey key = KeyOf(work[i]);
    if (key.fusible) {
      int64_t bytes = FusedBytes(work[i].response.request);
      for (size_t j = i + 1; j < work.size(); ++j) {
        if (placed[j] || !(KeyOf(work[j]) == key)) continue;
        int64_t more = FusedBytes(work[j].response.request);
        if (bytes + more > threshold_bytes) break;
        bytes += more;
        placed[j] = true;
        group.push_back(j);
      }
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

FusionBuffer::~FusionBuffer() { std::free(data_); }

void* FusionBuffer::Reserve(int64_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  const int64_t align = huge_pages_ ? HugePages::kBlock : 64;
  const int64_t capacity = std::max<int64_t>(align, (bytes + align - 1) / align * align);
  std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
  if (posix_memalign(&data_, static_cast<size_t>(align), static_cast<size_t>(capacity)) != 0) {
    data_ = nullptr;
    return nullptr;
  }
  if (huge_pages_) (void)madvise(data_, static_cast<size_t>(capacity), MADV_HUGEPAGE);  // a hint
  capacity_ = capacity;
  return data_;
}

}  // namespace kerashvd
