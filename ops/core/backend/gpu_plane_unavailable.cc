// Builds without a GPU backend (KERASHVD_WITH_NCCL=OFF) have no GPU plane.
#include "gpu_plane.h"

namespace kerashvd {

bool GpuPlaneBuilt() { return false; }

}  // namespace kerashvd
