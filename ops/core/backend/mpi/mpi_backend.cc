#include "mpi_backend.h"

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

Status MpiBackend::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                             const ReduceOptions& options) {
  KERASHVD_RETURN_IF_ERROR(CheckReducible(dtype));
  if (count == 0) return Status::Ok();
  const void* source = send == recv ? MPI_IN_PLACE : send;
  return MpiStatus(MPI_Allreduce_c(source, recv, count, MpiDatatype(dtype), MpiOp(options.op),
                                   mpi_->comm()),
                   "MPI_Allreduce");
}

Status MpiBackend::Allgatherv(const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  auto counts = ToCounts(recv_bytes);
  auto displs = Displacements(recv_bytes);
  return MpiStatus(MPI_Allgatherv_c(send, counts[mpi_->rank()], MPI_BYTE, recv, counts.data(),
                                    displs.data(), MPI_BYTE, mpi_->comm()),
                   "MPI_Allgatherv");
}

Status MpiBackend::Broadcast(void* buffer, int64_t bytes, const BroadcastOptions& options) {
  if (bytes == 0) return Status::Ok();
  return MpiStatus(MPI_Bcast_c(buffer, bytes, MPI_BYTE, options.root, mpi_->comm()), "MPI_Bcast");
}

Status MpiBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                             const std::vector<int64_t>& recv_bytes) {
  auto scounts = ToCounts(send_bytes);
  auto sdispls = Displacements(send_bytes);
  auto rcounts = ToCounts(recv_bytes);
  auto rdispls = Displacements(recv_bytes);
  return MpiStatus(MPI_Alltoallv_c(send, scounts.data(), sdispls.data(), MPI_BYTE, recv,
                                   rcounts.data(), rdispls.data(), MPI_BYTE, mpi_->comm()),
                   "MPI_Alltoallv");
}

Status MpiBackend::ReduceScatter(const void* send, void* recv,
                                 const std::vector<int64_t>& recv_counts, DataType dtype,
                                 const ReduceOptions& options) {
  KERASHVD_RETURN_IF_ERROR(CheckReducible(dtype));
  auto counts = ToCounts(recv_counts);
  return MpiStatus(MPI_Reduce_scatter_c(send, recv, counts.data(), MpiDatatype(dtype),
                                        MpiOp(options.op), mpi_->comm()),
                   "MPI_Reduce_scatter");
}

Status MpiBackend::AllgatherInt64(const int64_t* send, int64_t count, int64_t* recv) {
  return MpiStatus(MPI_Allgather_c(send, count, MPI_INT64_T, recv, count, MPI_INT64_T, mpi_->comm()),
                   "MPI_Allgather");
}

Status MpiBackend::AlltoallInt64(const int64_t* send, int64_t* recv) {
  return MpiStatus(MPI_Alltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, mpi_->comm()),
                   "MPI_Alltoall");
}

}  // namespace kerashvd
