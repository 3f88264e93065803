// The GpuPlane factory of builds without a GPU backend (KERASHVD_WITH_NCCL=OFF).
#include "gpu_plane.h"

namespace kerashvd {

bool GpuPlaneBuilt() { return false; }

Status CreateGpuPlane(const MpiContext&, const AbortFlag*, Timeline*, int, double,
                      std::unique_ptr<GpuPlane>*) {
  return Status::Unimplemented(
      "this kerashvd build has no GPU backend (built without NCCL); place the tensor on the "
      "CPU or rebuild with -DKERASHVD_WITH_NCCL=ON");
}

}  // namespace kerashvd
