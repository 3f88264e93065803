// CreateMpiGpuPlane in builds without a GPU backend (KERASHVD_WITH_NCCL=OFF): refused. The
// DeviceRouter refuses GPU tensors at submission there, so this is only a backstop.
#include "mpi_gpu_plane.h"

namespace kerashvd {

Status CreateMpiGpuPlane(const MpiContext&, const AbortFlag*, Timeline*, int, double,
                         std::unique_ptr<GpuPlane>*) {
  return Status::Unimplemented(
      "this kerashvd build has no GPU backend (built without NCCL); place the tensor on the "
      "CPU or rebuild with -DKERASHVD_WITH_NCCL=ON");
}

}  // namespace kerashvd
