#include "nccl_backend.h"

#include <string>

#include "cuda_kernels.h"

namespace kerashvd {
namespace {

// Collectives that only move data carry raw bytes.
constexpr ncclDataType_t kBytes = ncclUint8;

// Exclusive prefix sums: where each rank's block starts.
std::vector<int64_t> Offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return offsets;
}

int64_t Total(const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  return total;
}

bool AllEqual(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != v.front()) return false;
  return true;
}

const char* At(const void* base, int64_t offset) {
  return static_cast<const char*>(base) + offset;
}
char* At(void* base, int64_t offset) { return static_cast<char*>(base) + offset; }

// Runs `calls` (which enqueue NCCL operations) between ncclGroupStart and ncclGroupEnd. The
// group is closed even when a call fails, so NCCL's per-thread group state stays consistent.
template <typename Calls>
Status Grouped(Calls calls) {
  KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  Status status = calls();
  Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  return status.ok() ? end : status;
}

// Float Min/Max go through order keys (see the header comment).
bool UsesOrderKeys(DataType dtype, ReduceOp op) {
  return (op == ReduceOp::kMin || op == ReduceOp::kMax) &&
         (dtype == DataType::kFloat32 || dtype == DataType::kFloat64);
}

ncclDataType_t KeyType(DataType dtype) {
  return dtype == DataType::kFloat64 ? ncclUint64 : ncclUint32;
}

int64_t NcclTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 4;
  }
}

}  // namespace

Status NcclReduceType(DataType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DataType::kUint8: *out = ncclUint8; return Status::Ok();
    case DataType::kInt8: *out = ncclInt8; return Status::Ok();
    case DataType::kInt32: *out = ncclInt32; return Status::Ok();
    case DataType::kInt64: *out = ncclInt64; return Status::Ok();
    case DataType::kFloat16: *out = ncclFloat16; return Status::Ok();
    case DataType::kBfloat16: *out = ncclBfloat16; return Status::Ok();
    case DataType::kFloat32: *out = ncclFloat32; return Status::Ok();
    case DataType::kFloat64: *out = ncclFloat64; return Status::Ok();
    default: break;
  }
  return Status::Unimplemented(std::string("the NCCL backend cannot reduce ") +
                               DataTypeName(dtype) +
                               " tensors; NCCL reduces uint8, int8, int32, int64, float16, "
                               "bfloat16, float32 and float64");
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
    case ReduceOp::kSum: break;
  }
  return ncclSum;
}

Status NcclBackend::CheckPerRank(const std::vector<int64_t>& v, const char* what) const {
  if (static_cast<int>(v.size()) != nccl_->size())
    return Status::InvalidArgument(std::string("NCCL ") + what + " expects one size per rank (" +
                                   std::to_string(nccl_->size()) + "); received " +
                                   std::to_string(v.size()));
  for (size_t r = 0; r < v.size(); ++r)
    if (v[r] < 0)
      return Status::InvalidArgument(std::string("NCCL ") + what + " received a negative size " +
                                     std::to_string(v[r]) + " for rank " + std::to_string(r));
  return Status::Ok();
}

Status NcclBackend::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                              const ReduceOptions& options) {
  ncclDataType_t type;
  KERASHVD_RETURN_IF_ERROR(NcclReduceType(dtype, &type));
  if (count < 0)
    return Status::InvalidArgument("NCCL Allreduce received a negative count " +
                                   std::to_string(count));
  if (count == 0) return Status::Ok();
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin("ncclAllReduce"));
  const bool keys = UsesOrderKeys(dtype, options.op);
  if (keys) {
    KERASHVD_RETURN_IF_ERROR(CudaStatus(LaunchToOrderKeys(send, recv, count, dtype,
                                                          options.op == ReduceOp::kMax,
                                                          nccl_->stream()),
                                        "order keys"));
    send = recv;
    type = KeyType(dtype);
  }
  KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclAllReduce(send, recv, count, type, NcclOp(options.op),
                                                    nccl_->comm(), nccl_->stream()),
                                      "ncclAllReduce"));
  if (keys)
    KERASHVD_RETURN_IF_ERROR(
        CudaStatus(LaunchFromOrderKeys(recv, count, dtype, nccl_->stream()), "order keys"));
  return nccl_->Wait("ncclAllReduce");
}

Status NcclBackend::Allgatherv(const void* send, void* recv,
                               const std::vector<int64_t>& recv_bytes) {
  KERASHVD_RETURN_IF_ERROR(CheckPerRank(recv_bytes, "Allgatherv"));
  if (Total(recv_bytes) == 0) return Status::Ok();
  if (AllEqual(recv_bytes)) {
    KERASHVD_RETURN_IF_ERROR(nccl_->Begin("ncclAllGather"));
    KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclAllGather(send, recv, recv_bytes[0], kBytes,
                                                      nccl_->comm(), nccl_->stream()),
                                        "ncclAllGather"));
    return nccl_->Wait("ncclAllGather");
  }
  const char* what = "Allgatherv (grouped ncclBroadcast)";
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin(what));
  const std::vector<int64_t> offsets = Offsets(recv_bytes);
  KERASHVD_RETURN_IF_ERROR(Grouped([&]() -> Status {
    for (int r = 0; r < nccl_->size(); ++r) {
      if (recv_bytes[r] == 0) continue;
      char* block = At(recv, offsets[r]);
      // Only the root's send buffer is read; the others receive into their block.
      const void* source = r == nccl_->rank() ? send : block;
      KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclBroadcast(source, block, recv_bytes[r], kBytes, r,
                                                        nccl_->comm(), nccl_->stream()),
                                          "ncclBroadcast"));
    }
    return Status::Ok();
  }));
  return nccl_->Wait(what);
}

Status NcclBackend::Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) {
  if (options.root < 0 || options.root >= nccl_->size())
    return Status::InvalidArgument("NCCL Broadcast received root " +
                                   std::to_string(options.root) + "; expected 0.." +
                                   std::to_string(nccl_->size() - 1));
  if (bytes < 0)
    return Status::InvalidArgument("NCCL Broadcast received a negative size " +
                                   std::to_string(bytes));
  if (bytes == 0) return Status::Ok();
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin("ncclBroadcast"));
  KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclBroadcast(buffer, buffer, bytes, kBytes, options.root,
                                                    nccl_->comm(), nccl_->stream()),
                                      "ncclBroadcast"));
  return nccl_->Wait("ncclBroadcast");
}

Status NcclBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                              void* recv, const std::vector<int64_t>& recv_bytes) {
  KERASHVD_RETURN_IF_ERROR(CheckPerRank(send_bytes, "Alltoallv"));
  KERASHVD_RETURN_IF_ERROR(CheckPerRank(recv_bytes, "Alltoallv"));
  const int me = nccl_->rank();
  if (send_bytes[me] != recv_bytes[me])
    return Status::InvalidArgument("NCCL Alltoallv: rank " + std::to_string(me) + " sends " +
                                   std::to_string(send_bytes[me]) + " bytes to itself but "
                                   "expects to receive " + std::to_string(recv_bytes[me]));
  // A rank that neither sends nor receives is not a peer of anyone in this exchange.
  if (Total(send_bytes) == 0 && Total(recv_bytes) == 0) return Status::Ok();
  const char* what = "Alltoallv (grouped ncclSend/ncclRecv)";
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin(what));
  const std::vector<int64_t> send_offsets = Offsets(send_bytes);
  const std::vector<int64_t> recv_offsets = Offsets(recv_bytes);
  if (send_bytes[me] > 0 && At(recv, recv_offsets[me]) != At(send, send_offsets[me]))
    KERASHVD_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(At(recv, recv_offsets[me]), At(send, send_offsets[me]), send_bytes[me],
                        cudaMemcpyDeviceToDevice, nccl_->stream()),
        "cudaMemcpyAsync"));
  KERASHVD_RETURN_IF_ERROR(Grouped([&]() -> Status {
    for (int peer = 0; peer < nccl_->size(); ++peer) {
      if (peer == me) continue;
      if (send_bytes[peer] > 0)
        KERASHVD_RETURN_IF_ERROR(
            NcclStatus(ncclSend(At(send, send_offsets[peer]), send_bytes[peer], kBytes, peer,
                                nccl_->comm(), nccl_->stream()),
                       "ncclSend"));
      if (recv_bytes[peer] > 0)
        KERASHVD_RETURN_IF_ERROR(
            NcclStatus(ncclRecv(At(recv, recv_offsets[peer]), recv_bytes[peer], kBytes, peer,
                                nccl_->comm(), nccl_->stream()),
                       "ncclRecv"));
    }
    return Status::Ok();
  }));
  return nccl_->Wait(what);
}

Status NcclBackend::ReduceScatter(const void* send, void* recv,
                                  const std::vector<int64_t>& recv_counts, DataType dtype,
                                  const ReduceOptions& options) {
  ncclDataType_t type;
  KERASHVD_RETURN_IF_ERROR(NcclReduceType(dtype, &type));
  KERASHVD_RETURN_IF_ERROR(CheckPerRank(recv_counts, "ReduceScatter"));
  const int64_t total = Total(recv_counts);
  if (total == 0) return Status::Ok();
  const ncclRedOp_t op = NcclOp(options.op);
  if (UsesOrderKeys(dtype, options.op)) {
    // The keys of the whole input go to a buffer of their own (the input stays as it is);
    // this rank's block of the result comes back as keys in `recv`.
    KERASHVD_RETURN_IF_ERROR(nccl_->Begin("ReduceScatter (order keys)"));
    void* keys = nullptr;
    const size_t bytes = static_cast<size_t>(total) * DataTypeSize(dtype);
    KERASHVD_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&keys, bytes, nccl_->stream()),
                                        "cudaMallocAsync"));
    Status status = CudaStatus(LaunchToOrderKeys(send, keys, total, dtype,
                                                 options.op == ReduceOp::kMax, nccl_->stream()),
                               "order keys");
    if (status.ok()) status = ReduceScatterAs(keys, recv, recv_counts, KeyType(dtype), op);
    if (status.ok())
      status = CudaStatus(LaunchFromOrderKeys(recv, recv_counts[nccl_->rank()], dtype,
                                              nccl_->stream()),
                          "order keys");
    Status freed = CudaStatus(cudaFreeAsync(keys, nccl_->stream()), "cudaFreeAsync");
    if (status.ok()) status = freed;
    return status.ok() ? nccl_->Wait("ReduceScatter (order keys)") : status;
  }
  return ReduceScatterAs(send, recv, recv_counts, type, op);
}

Status NcclBackend::ReduceScatterAs(const void* send, void* recv,
                                    const std::vector<int64_t>& recv_counts, ncclDataType_t type,
                                    ncclRedOp_t op) {
  const int64_t element = NcclTypeSize(type);
  if (AllEqual(recv_counts)) {
    KERASHVD_RETURN_IF_ERROR(nccl_->Begin("ncclReduceScatter"));
    KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclReduceScatter(send, recv, recv_counts[0], type, op,
                                                          nccl_->comm(), nccl_->stream()),
                                        "ncclReduceScatter"));
    return nccl_->Wait("ncclReduceScatter");
  }
  const char* what = "ReduceScatter (grouped ncclReduce)";
  KERASHVD_RETURN_IF_ERROR(nccl_->Begin(what));
  const std::vector<int64_t> offsets = Offsets(recv_counts);
  KERASHVD_RETURN_IF_ERROR(Grouped([&]() -> Status {
    for (int r = 0; r < nccl_->size(); ++r) {
      if (recv_counts[r] == 0) continue;
      // `recv` is only written on the root r == rank; NCCL ignores it elsewhere.
      KERASHVD_RETURN_IF_ERROR(NcclStatus(ncclReduce(At(send, offsets[r] * element), recv,
                                                     recv_counts[r], type, op, r, nccl_->comm(),
                                                     nccl_->stream()),
                                          "ncclReduce"));
    }
    return Status::Ok();
  }));
  return nccl_->Wait(what);
}

Status NcclBackend::AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) {
  return host_.AllgatherInt64(send, count, recv);
}

Status NcclBackend::AlltoallInt64(const int64_t* send, int64_t* recv) {
  return host_.AlltoallInt64(send, recv);
}

}  // namespace kerashvd
