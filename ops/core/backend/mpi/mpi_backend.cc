#include "mpi_backend.h"

#include <cstring>

#include "../../buffer_ops.h"
#include "../shm/pair_reduce.h"
#include "mpi_reduce_ops.h"
#include "mpi_wait.h"

namespace kerashvd {
namespace {

std::vector<MPI_Count> ToCounts(const std::vector<int64_t>& v) {
  return std::vector<MPI_Count>(v.begin(), v.end());
}

std::vector<MPI_Aint> Displacements(const std::vector<int64_t>& v) {
  std::vector<MPI_Aint> d(v.size(), 0);
  for (size_t i = 1; i < v.size(); ++i) d[i] = d[i - 1] + v[i - 1];
  return d;
}

Status CheckReducible(DataType dtype) {
  if (MpiDatatype(dtype) == MPI_DATATYPE_NULL)
    return Status::Unimplemented(std::string("the MPI backend cannot reduce ") +
                                 DataTypeName(dtype) + " directly");
  return Status::Ok();
}

}  // namespace

Status MpiBackend::Finish(int rc, MPI_Request* request, const char* what) {
  if (rc != MPI_SUCCESS) return MpiStatus(rc, what);
  WaitPolicy policy;
  policy.spin = std::chrono::microseconds(-1);
  return MpiWait(request, what, abort_, policy, mpi_->rank());
}

Status MpiBackend::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                             const ReduceOptions& options) {
  KERASHVD_RETURN_IF_ERROR(CheckReducible(dtype));
  if (count == 0) return Status::Ok();
  if (pair_ && PairReducible(dtype, options.op))
    return pair_->Allreduce(send, recv, count, dtype, options.op);
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  if (huge_pages_) {
    if (send != recv) huge_pages_->Advise(send, bytes);
    huge_pages_->Advise(recv, bytes);
  }
  const MPI_Op op = MpiOp(options.op, dtype);
  if (hierarchy_.allreduce &&
      hierarchy_.allreduce->UseHierarchical(bytes, count, IsPredefinedOp(op)))
    return HierarchicalAllreduce(send, recv, count, dtype, options);
  if (options.any_out_of_place && mpi_->size() == 2 && bytes >= kSplitMinBytes)
    return SplitAllreduce(send, recv, count, dtype, options);
  const void* source = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request;
  return Finish(MPI_Iallreduce_c(source, recv, count, MpiDatatype(dtype), op, mpi_->comm(),
                                 &request),
                &request, "MPI_Iallreduce");
}

Status MpiBackend::AllreduceSpans(const std::vector<AllreduceSpan>& spans, DataType dtype,
                                  const ReduceOptions& options) {
  if (!ReducesSpans(dtype, options.op)) return Backend::AllreduceSpans(spans, dtype, options);
  if (mpi_->size() == 1) {
    // The same arithmetic as the fused path's copy out of its buffer (ScaleCopy), so the bits
    // match it.
    KERASHVD_RETURN_IF_ERROR(CheckReducible(dtype));
    for (const AllreduceSpan& span : spans)
      ScaleCopy(span.send, span.recv, span.count, dtype, span.postscale);
    return Status::Ok();
  }
  return pair_->Allreduce(spans, dtype, options.op);
}

// Out of place, MPICH's allreduce first copies `send` into `recv` and then reduces in place:
// at 16 MiB on 2 ranks that copy makes the call ~6.3 ms instead of ~4 ms. A reduce-scatter
// that reads `send` and writes each rank's block of the result straight into `recv`, then an
// in-place allgather of the blocks, skips the copy (16 MiB measured with raw MPI: 2 ranks 5.3
// vs 6.3 ms, 3 ranks 12 vs 21 ms) but loses to an in-place allreduce (2 ranks 5.0 vs 4.0 ms).
// So it is used only when some rank runs out of place, which the ranks agree on during
// negotiation (ReduceOptions::any_out_of_place): every rank then makes the same two calls.
// And only on 2 ranks: there each element is one commutative operation, so the bits equal
// MPICH's allreduce's, whether the tensor is reduced alone or fused with others. On 3 and 4
// ranks the reduce-scatter sums in another order than the allreduce (measured: a third of a
// random float32 tensor's elements differ in the last bits), and results must not depend on
// fusion, grouping or whether TF handed the op its input's buffer.
// A rank that runs in place reduces its own buffer, finds its block at the front (the MPI
// standard's in-place reduce-scatter; MPICH also leaves it at its own offset) and moves it to
// its offset before the allgather. Each block is
// reduced once, on one rank, and copied to all, so every rank gets the same bits.
Status MpiBackend::SplitAllreduce(const void* send, void* recv, int64_t count, DataType dtype,
                                  const ReduceOptions& options) {
  const int size = mpi_->size(), rank = mpi_->rank();
  const int64_t width = DataTypeSize(dtype);
  const MPI_Op op = MpiOp(options.op, dtype);
  std::vector<MPI_Count> counts(size);
  std::vector<MPI_Aint> displs(size, 0);
  for (int r = 0; r < size; ++r) {
    counts[r] = count / size + (r < count % size ? 1 : 0);
    if (r > 0) displs[r] = displs[r - 1] + counts[r - 1];
  }
  char* out = static_cast<char*>(recv);
  char* mine = out + displs[rank] * width;
  MPI_Request request;
  if (send == recv) {
    KERASHVD_RETURN_IF_ERROR(Finish(MPI_Ireduce_scatter_c(MPI_IN_PLACE, recv, counts.data(),
                                                          MpiDatatype(dtype), op, mpi_->comm(),
                                                          &request),
                                    &request, "MPI_Ireduce_scatter"));
    if (rank > 0 && counts[rank] > 0) std::memmove(mine, out, counts[rank] * width);
  } else {
    KERASHVD_RETURN_IF_ERROR(Finish(MPI_Ireduce_scatter_c(send, mine, counts.data(),
                                                          MpiDatatype(dtype), op, mpi_->comm(),
                                                          &request),
                                    &request, "MPI_Ireduce_scatter"));
  }
  return Finish(MPI_Iallgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts.data(),
                                  displs.data(), MpiDatatype(dtype), mpi_->comm(), &request),
                &request, "MPI_Iallgatherv");
}

Status MpiBackend::Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  if (hierarchy_.allgather) return HierarchicalAllgatherv(send, recv, recv_bytes);
  auto counts = ToCounts(recv_bytes);
  auto displs = Displacements(recv_bytes);
  MPI_Request request;
  return Finish(MPI_Iallgatherv_c(send, counts[mpi_->rank()], MPI_BYTE, recv, counts.data(),
                                  displs.data(), MPI_BYTE, mpi_->comm(), &request),
                &request, "MPI_Iallgatherv");
}

Status MpiBackend::Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) {
  if (bytes == 0) return Status::Ok();
  MPI_Request request;
  return Finish(MPI_Ibcast_c(buffer, bytes, MPI_BYTE, options.root, mpi_->comm(), &request),
                &request, "MPI_Ibcast");
}

Status MpiBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                             const std::vector<int64_t>& recv_bytes) {
  auto scounts = ToCounts(send_bytes);
  auto sdispls = Displacements(send_bytes);
  auto rcounts = ToCounts(recv_bytes);
  auto rdispls = Displacements(recv_bytes);
  MPI_Request request;
  return Finish(MPI_Ialltoallv_c(send, scounts.data(), sdispls.data(), MPI_BYTE, recv,
                                 rcounts.data(), rdispls.data(), MPI_BYTE, mpi_->comm(), &request),
                &request, "MPI_Ialltoallv");
}

Status MpiBackend::ReduceScatter(const void* send, void* recv,
                                 const std::vector<int64_t>& recv_counts, DataType dtype,
                                 const ReduceOptions& options) {
  KERASHVD_RETURN_IF_ERROR(CheckReducible(dtype));
  auto counts = ToCounts(recv_counts);
  MPI_Request request;
  return Finish(MPI_Ireduce_scatter_c(send, recv, counts.data(), MpiDatatype(dtype),
                                      MpiOp(options.op, dtype), mpi_->comm(), &request),
                &request, "MPI_Ireduce_scatter");
}

Status MpiBackend::AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) {
  MPI_Request request;
  return Finish(MPI_Iallgather_c(send, count, MPI_INT64_T, recv, count, MPI_INT64_T, mpi_->comm(),
                                 &request),
                &request, "MPI_Iallgather");
}

Status MpiBackend::AlltoallInt64(const int64_t* send, int64_t* recv) {
  MPI_Request request;
  return Finish(MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, mpi_->comm(), &request),
                &request, "MPI_Ialltoall");
}

}  // namespace kerashvd
