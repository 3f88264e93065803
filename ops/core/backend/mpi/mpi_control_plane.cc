#include "mpi_control_plane.h"

#include <mutex>

#include "../../carry.h"
#include "mpi_wait.h"

namespace kerashvd {
namespace {

// MPI's side of CombineCarry: `len` messages of the contiguous type the call made.
void CarryOp(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  for (int i = 0; i < *len; ++i)
    CombineCarry(static_cast<const uint64_t*>(in) + i * (bytes / 8),
                 static_cast<uint64_t*>(inout) + i * (bytes / 8));
}

MPI_Op CarryMpiOp() {
  static std::once_flag once;
  static MPI_Op op;
  std::call_once(once, [] { MPI_Op_create(&CarryOp, /*commute=*/1, &op); });
  return op;
}

}  // namespace

Status MpiControlPlane::Wait(MPI_Request* request, const char* what, bool carries_data) {
  WaitPolicy policy;
  policy.timeout_seconds = timeout_seconds_;
  policy.idler = &idler_;
  policy.counters = &counters_;
  const bool urgent = !urgency_ || urgency_();
  if (carries_data && urgent) policy.spin = kCarrySpin;
  if (!urgent) {
    policy.spin = std::chrono::microseconds(0);
    policy.first_nap = kRelaxedFirstNap;
    policy.max_nap = kRelaxedMaxNap;
  }
  return MpiWait(request, what, abort_, policy, rank());
}

Status MpiControlPlane::AllreduceBitwiseAnd(uint64_t* words, int count) {
  if (size() == 1) return Status::Ok();
  MPI_Request request;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, words, count, MPI_UINT64_T, MPI_BAND, mpi_->comm(), &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Iallreduce");
  return Wait(&request, "negotiation (bitwise allreduce)");
}

Status MpiControlPlane::AllreduceCarry(uint64_t* message, int count) {
  if (size() == 1) return Status::Ok();
  MPI_Datatype type;
  int rc = MPI_Type_contiguous(count, MPI_UINT64_T, &type);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&type);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Type_contiguous");
  MPI_Request request;
  rc = MPI_Iallreduce(MPI_IN_PLACE, message, 1, type, CarryMpiOp(), mpi_->comm(), &request);
  Status status =
      rc == MPI_SUCCESS
          ? Wait(&request, "negotiation (bitwise allreduce with carried data)", true)
          : MpiStatus(rc, "MPI_Iallreduce");
  MPI_Type_free(&type);
  return status;
}

Status MpiControlPlane::GatherToRoot(const std::string& send, std::vector<std::string>* received) {
  if (size() == 1) {
    received->assign(1, send);
    return Status::Ok();
  }
  int my_bytes = static_cast<int>(send.size());
  std::vector<int> sizes(rank() == 0 ? size() : 0);
  MPI_Request request;
  int rc = MPI_Igather(&my_bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, mpi_->comm(), &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Igather");
  KERASHVD_RETURN_IF_ERROR(Wait(&request, "negotiation (gather of request sizes)"));

  std::vector<int> displs(sizes.size(), 0);
  std::string all;
  if (rank() == 0) {
    int total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = total;
      total += sizes[i];
    }
    all.resize(total);
  }
  rc = MPI_Igatherv(send.data(), my_bytes, MPI_BYTE, all.data(), sizes.data(), displs.data(),
                    MPI_BYTE, 0, mpi_->comm(), &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Igatherv");
  KERASHVD_RETURN_IF_ERROR(Wait(&request, "negotiation (gather of requests)"));
  if (rank() == 0) {
    received->resize(size());
    for (int r = 0; r < size(); ++r) (*received)[r] = all.substr(displs[r], sizes[r]);
  }
  return Status::Ok();
}

Status MpiControlPlane::BroadcastFromRoot(std::string* data) {
  if (size() == 1) return Status::Ok();
  int64_t bytes = static_cast<int64_t>(data->size());
  MPI_Request request;
  int rc = MPI_Ibcast(&bytes, 1, MPI_INT64_T, 0, mpi_->comm(), &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Ibcast");
  KERASHVD_RETURN_IF_ERROR(Wait(&request, "negotiation (broadcast of response size)"));
  data->resize(bytes);
  rc = MPI_Ibcast(data->data(), static_cast<int>(bytes), MPI_BYTE, 0, mpi_->comm(), &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Ibcast");
  return Wait(&request, "negotiation (broadcast of responses)");
}

}  // namespace kerashvd
