#include "fake_backend.h"

#include <algorithm>
#include <cstring>

namespace kerashvd {
namespace testing {
namespace {

constexpr std::chrono::milliseconds kTimeout(5000);

template <typename T>
void Reduce(const std::vector<std::string>& all, int64_t count, ReduceOp op, void* recv) {
  std::vector<T> out(count), in(count);
  std::memcpy(out.data(), all[0].data(), sizeof(T) * count);
  for (size_t r = 1; r < all.size(); ++r) {
    std::memcpy(in.data(), all[r].data(), sizeof(T) * count);
    for (int64_t i = 0; i < count; ++i) {
      if (op == ReduceOp::kMin) out[i] = std::min(out[i], in[i]);
      else if (op == ReduceOp::kMax) out[i] = std::max(out[i], in[i]);
      else out[i] += in[i];
    }
  }
  std::memcpy(recv, out.data(), sizeof(T) * count);
}

}  // namespace

Status FakeBackend::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                              const ReduceOptions& options) {
  if (options.op == ReduceOp::kProduct) return Unimplemented("Allreduce with Product");
  const size_t bytes = DataTypeSize(dtype) * count;
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(
      rank_, std::string(static_cast<const char*>(send), bytes), &all, kTimeout, abort_,
      "allreduce"));
  switch (dtype) {
    case DataType::kFloat32: Reduce<float>(all, count, options.op, recv); break;
    case DataType::kFloat64: Reduce<double>(all, count, options.op, recv); break;
    case DataType::kInt32: Reduce<int32_t>(all, count, options.op, recv); break;
    default: return Unimplemented("Allreduce of this dtype");
  }
  return Status::Ok();
}

Status FakeBackend::AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) {
  std::vector<std::string> all;
  KERASHVD_RETURN_IF_ERROR(world_->Exchange(
      rank_, std::string(reinterpret_cast<const char*>(send), sizeof(int64_t) * count), &all,
      kTimeout, abort_, "allgather (int64)"));
  for (size_t r = 0; r < all.size(); ++r)
    std::memcpy(recv + r * count, all[r].data(), sizeof(int64_t) * count);
  return Status::Ok();
}

}  // namespace testing
}  // namespace kerashvd
