#include "mpi_backend.h"

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
  // Out of place, MPICH first copies `send` into `recv` and then reduces in place: at 16 MiB
  // on 2 ranks that copy makes the call ~6.3 ms instead of ~4 ms. Whether a rank runs in place
  // is its own business (MPI_IN_PLACE may differ between ranks), so it is not negotiated.
  // Measured, not used yet: MPI_Ireduce_scatter from `send` into this rank's block of `recv`
  // plus an in-place MPI_Iallgatherv beats an out-of-place MPI_Iallreduce (16 MiB: 2 ranks
  // 5.3 vs 6.3 ms, 3 ranks 12 vs 21 ms) but loses to an in-place one; choosing it needs every
  // rank to agree, i.e. an "all ranks in place" bit in the negotiation.
  const void* source = send == recv ? MPI_IN_PLACE : send;
  if (huge_pages_) {
    const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
    if (send != recv) huge_pages_->Advise(send, bytes);
    huge_pages_->Advise(recv, bytes);
  }
  MPI_Request request;
  return Finish(MPI_Iallreduce_c(source, recv, count, MpiDatatype(dtype), MpiOp(options.op),
                                 mpi_->comm(), &request),
                &request, "MPI_Iallreduce");
}

Status MpiBackend::Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
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
                                      MpiOp(options.op), mpi_->comm(), &request),
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
