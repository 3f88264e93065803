#include "mpi_group.h"

#include "mpi_wait.h"

namespace kerashvd {

MpiGroup::MpiGroup(MPI_Comm comm, double timeout_seconds, const AbortFlag* abort)
    : comm_(comm), timeout_seconds_(timeout_seconds), abort_(abort) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiGroup::~MpiGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized && !MpiBroken()) MPI_Comm_free(&comm_);
}

MPI_Comm MpiGroup::Release() {
  MPI_Comm comm = comm_;
  comm_ = MPI_COMM_NULL;
  return comm;
}

Status MpiGroup::Allgather(const std::vector<uint64_t>& words, const char* what,
                           std::vector<uint64_t>* all) {
  const int n = static_cast<int>(words.size());
  all->assign(static_cast<size_t>(n) * size_, 0);
  MPI_Request pending;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Iallgather(words.data(), n, MPI_UINT64_T, all->data(),
                                                    n, MPI_UINT64_T, comm_, &pending),
                                     "MPI_Iallgather"));
  // A registration is rare and nothing waits on its latency: nap rather than spin.
  WaitPolicy policy;
  policy.timeout_seconds = timeout_seconds_;
  policy.first_nap = std::chrono::microseconds(100);
  policy.max_nap = std::chrono::microseconds(10000);
  return MpiWait(&pending, what, abort_, policy, rank_);
}

Status MpiGroup::Split(int color, std::unique_ptr<Group>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split(comm_, color >= 0 ? color : MPI_UNDEFINED, rank_, &comm), "MPI_Comm_split"));
  out->reset();
  if (comm != MPI_COMM_NULL) *out = std::make_unique<MpiGroup>(comm, timeout_seconds_, abort_);
  return Status::Ok();
}

}  // namespace kerashvd

namespace kerashvd {

Status MpiGroup::Duplicate(const MpiContext& of, double timeout_seconds, const AbortFlag* abort,
                           std::unique_ptr<Group>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(of.comm(), &comm), "MPI_Comm_dup"));
  *out = std::make_unique<MpiGroup>(comm, timeout_seconds, abort);
  return Status::Ok();
}

Status MpiGroup::ToContexts(std::unique_ptr<Group> group, std::unique_ptr<MpiContext>* comm,
                            std::unique_ptr<MpiContext>* gpu) {
  // Only MpiGroup::Split makes the groups of an engine built on MPI.
  MPI_Comm mine = static_cast<MpiGroup&>(*group).Release();
  if (gpu) {
    MPI_Comm gpu_comm = MPI_COMM_NULL;
    KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(mine, &gpu_comm), "MPI_Comm_dup"));
    KERASHVD_RETURN_IF_ERROR(MpiContext::FromComm(gpu_comm, gpu));
  }
  return MpiContext::FromComm(mine, comm);
}

}  // namespace kerashvd
