#include "mpi_group.h"

#include "../../lane_transport.h"
#include "mpi_gpu_plane.h"
#include "mpi_transport.h"
#include "mpi_wait.h"

namespace kerashvd {

MpiGroup::MpiGroup(std::unique_ptr<MpiContext> context, double timeout_seconds,
                   const AbortFlag* abort)
    : context_(std::move(context)), timeout_seconds_(timeout_seconds), abort_(abort) {}

Status MpiGroup::Allgather(const std::vector<uint64_t>& words, const char* what,
                           std::vector<uint64_t>* all) {
  const int n = static_cast<int>(words.size());
  all->assign(static_cast<size_t>(n) * size(), 0);
  MPI_Request pending;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Iallgather(words.data(), n, MPI_UINT64_T, all->data(),
                                                    n, MPI_UINT64_T, context_->comm(), &pending),
                                     "MPI_Iallgather"));
  // A registration is rare and nothing waits on its latency: nap rather than spin.
  WaitPolicy policy;
  policy.timeout_seconds = timeout_seconds_;
  policy.first_nap = std::chrono::microseconds(100);
  policy.max_nap = std::chrono::microseconds(10000);
  return MpiWait(&pending, what, abort_, policy, rank());
}

Status MpiGroup::Adopt(MPI_Comm comm, std::unique_ptr<Group>* out) const {
  out->reset();
  if (comm == MPI_COMM_NULL) return Status::Ok();
  std::unique_ptr<MpiContext> context;
  // Collective over `comm` (its node layout), which all of its ranks are creating together.
  KERASHVD_RETURN_IF_ERROR(MpiContext::FromComm(comm, &context));
  *out = std::make_unique<MpiGroup>(std::move(context), timeout_seconds_, abort_);
  return Status::Ok();
}

Status MpiGroup::Split(int color, std::unique_ptr<Group>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_split(context_->comm(),
                                                    color >= 0 ? color : MPI_UNDEFINED, rank(),
                                                    &comm),
                                     "MPI_Comm_split"));
  return Adopt(comm, out);
}

Status MpiGroup::Duplicate(std::unique_ptr<Group>* out) {
  MPI_Comm comm = MPI_COMM_NULL;
  KERASHVD_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(context_->comm(), &comm), "MPI_Comm_dup"));
  return Adopt(comm, out);
}

LaneTransport MpiGroup::MakeLaneTransport(const Config& config, const std::string& label,
                                          int world_rank0) {
  return MakeMpiTransport(context_.get(), config, abort_, label, world_rank0);
}

Status MpiGroup::CreateGpuPlane(Timeline* timeline, int device, double timeout_seconds,
                                std::unique_ptr<GpuPlane>* out) {
  return CreateMpiGpuPlane(*context_, abort_, timeline, device, timeout_seconds, out);
}

}  // namespace kerashvd
