// NcclBackend: the data plane on GPU memory through NCCL.
//
// Buffers passed to the collectives are device pointers on the context's GPU; the metadata
// exchanges (AllgatherInt64, AlltoallInt64) take host pointers and go through MPI, because
// their results steer host-side decisions (output shapes) and are a few bytes.
//
// Completion is synchronous: each call enqueues its NCCL work on the context's stream and
// returns only after that work has finished (NcclContext::Wait polls an event and NCCL's
// asynchronous error state). So outputs may be read by any stream or by the host as soon as
// a call returns. Inputs must be complete before the call: the caller synchronizes the
// stream that produced them.
//
// How each collective maps onto NCCL:
//   Allreduce      ncclAllReduce; float16 and bfloat16 are reduced natively, and Average maps
//                  to ncclAvg (the engine currently sends Sum and scales itself).
//   Allgatherv     ncclAllGather when every rank contributes the same number of bytes, else
//                  one ncclBroadcast per contributing rank (rooted there) in one group.
//   Broadcast      ncclBroadcast, in place.
//   Alltoallv      ncclSend/ncclRecv to and from every peer in one group; this rank's own
//                  block is a device-to-device copy on the same stream.
//   ReduceScatter  ncclReduceScatter when the counts are equal, else one ncclReduce per rank
//                  (rooted there, over that rank's block) in one group.
// Zero-sized blocks are skipped; the decisions depend only on arguments every rank shares
// (counts, bytes, root), so all ranks make the same NCCL calls in the same order.
// Min and Max of float32/float64 (the only float Min/Max the engine sends: WireType widens
// halves for them)
// propagate NaN as the MPI backend does (mpi_reduce_ops.h), with the same bits on every rank:
// NCCL's float Min/Max (fminf/fmaxf) drop NaN, so the values are turned into order-preserving
// integer keys, reduced with NCCL's integer Min/Max, and turned back (cuda_kernels.h). Native
// float16/bfloat16 Min/Max are NCCL's own (NaN-dropping).
// Reductions of int16, uint16 and bool return Unimplemented naming the backend.
#pragma once

#include "../backend.h"
#include "../mpi/mpi_backend.h"
#include "../mpi/mpi_context.h"
#include "nccl_context.h"

namespace kerashvd {

class NcclBackend : public Backend {
 public:
  // Both contexts (and `abort`, when given) must outlive the backend; `nccl` must be over the
  // same ranks as `mpi`. `abort` is the engine's peer-failure flag, checked by the host-side
  // metadata exchanges like every other MPI wait.
  NcclBackend(NcclContext* nccl, const MpiContext* mpi, const AbortFlag* abort = nullptr)
      : nccl_(nccl), host_(mpi, abort) {}
  const char* name() const override { return "NCCL"; }
  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                   const ReduceOptions& options) override;
  Status Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) override;
  Status Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, const ReduceOptions& options) override;
  // Host memory, through MPI (see the file comment).
  Status AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) override;
  Status AlltoallInt64(const int64_t* send, int64_t* recv) override;

 private:
  // Checks that `v` has one non-negative entry per rank.
  Status CheckPerRank(const std::vector<int64_t>& v, const char* what) const;
  // ReduceScatter of elements of NCCL type `type` (counts checked, not all zero).
  Status ReduceScatterAs(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                         ncclDataType_t type, ncclRedOp_t op);

  NcclContext* nccl_;
  MpiBackend host_;
};

// The NCCL type that reduces `dtype`, or Unimplemented naming the backend.
Status NcclReduceType(DataType dtype, ncclDataType_t* out);
ncclRedOp_t NcclOp(ReduceOp op);

}  // namespace kerashvd
