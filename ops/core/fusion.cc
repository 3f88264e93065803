#include "fusion.h"

namespace kerashvd {
namespace {

struct FuseKey {
  bool fusible = false;
  ReduceOp op = ReduceOp::kSum;
  DataType wire = DataType::kFloat32;
  bool on_gpu = false;
  bool operator==(const FuseKey& o) const {
    return fusible && o.fusible && op == o.op && wire == o.wire && on_gpu == o.on_gpu;
  }
};

FuseKey KeyOf(const WorkItem& item) {
  FuseKey key;
  const Request& r = item.response.request;
  if (item.response.kind != Response::Kind::kExecute || r.op_type != OpType::kAllreduce) return key;
  key.fusible = true;
  key.op = r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
  key.wire = IsHalf(r.dtype) ? DataType::kFloat32 : r.dtype;
  key.on_gpu = r.device >= 0;
  return key;
}

}  // namespace

int64_t FusedBytes(const Request& request) {
  int64_t elements = 0;
  for (const Shape& s : request.shapes) elements += NumElements(s);
  int64_t width = IsHalf(request.dtype) ? 4 : static_cast<int64_t>(DataTypeSize(request.dtype));
  return elements * width;
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

void* FusionBuffer::Reserve(int64_t bytes) {
  size_t words = static_cast<size_t>((bytes + 7) / 8);
  if (storage_.size() < words) storage_.resize(words);
  return storage_.data();
}

}  // namespace kerashvd
