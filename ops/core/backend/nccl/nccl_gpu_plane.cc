// The GpuPlane of builds with NCCL: NcclContext + NcclBackend + CudaMemoryOps + Executor, over
// an MPI communicator (../mpi/mpi_gpu_plane.h).
#include "../gpu_plane.h"
#include "../mpi/mpi_context.h"
#include "../mpi/mpi_gpu_plane.h"
#include "cuda_memory_ops.h"
#include "nccl_backend.h"
#include "nccl_context.h"

namespace kerashvd {
namespace {

class NcclGpuPlane : public GpuPlane {
 public:
  NcclGpuPlane(std::unique_ptr<NcclContext> nccl, const MpiContext& mpi, const AbortFlag* abort,
               Timeline* timeline)
      : nccl_(std::move(nccl)),
        backend_(nccl_.get(), &mpi, abort),
        memory_(nccl_.get()),
        executor_(&backend_, &memory_, timeline, mpi.rank(), mpi.size()) {}
  Executor* executor() override { return &executor_; }
  int device() const override { return nccl_->device(); }

 private:
  std::unique_ptr<NcclContext> nccl_;  // declared first: destroyed last
  NcclBackend backend_;
  CudaMemoryOps memory_;
  Executor executor_;
};

}  // namespace

bool GpuPlaneBuilt() { return true; }

Status CreateMpiGpuPlane(const MpiContext& mpi, const AbortFlag* abort, Timeline* timeline,
                         int device, double timeout_seconds, std::unique_ptr<GpuPlane>* out) {
  std::unique_ptr<NcclContext> nccl;
  KERASHVD_RETURN_IF_ERROR(NcclContext::Create(mpi, device, timeout_seconds, &nccl, abort));
  *out = std::make_unique<NcclGpuPlane>(std::move(nccl), mpi, abort, timeline);
  return Status::Ok();
}

}  // namespace kerashvd
