// The GPU plane of builds without a GPU backend (KERASHVD_WITH_NCCL=OFF): there is none.
#include "gpu_plane.h"
#include "mpi/mpi_gpu_plane.h"

namespace kerashvd {

bool GpuPlaneBuilt() { return false; }

Status CreateMpiGpuPlane(const MpiContext&, const AbortFlag*, Timeline*, int, double,
                         std::unique_ptr<GpuPlane>*) {
  return Status::Unimplemented(
      "this kerashvd build has no GPU backend (built without NCCL); place the tensor on the "
      "CPU or rebuild with -DKERASHVD_WITH_NCCL=ON");
}

}  // namespace kerashvd
