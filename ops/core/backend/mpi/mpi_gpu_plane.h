// CreateMpiGpuPlane: the GPU plane (../gpu_plane.h) over an MPI communicator, which
// MpiGroup::CreateGpuPlane hands out. Builds with a GPU backend define it in
// ../nccl/nccl_gpu_plane.cc (NCCL bootstraps over the communicator); the others in
// mpi_gpu_plane_unavailable.cc, as an Unimplemented error.
#pragma once

#include <memory>

#include "../../abort_flag.h"
#include "../../status.h"
#include "../../timeline.h"
#include "../gpu_plane.h"

namespace kerashvd {

class MpiContext;  // mpi_context.h

// Collective over `mpi` (see ../gpu_plane.h). `timeout_seconds` bounds each wait for a GPU
// collective (0: unbounded); `abort` is the engine's peer-failure flag.
Status CreateMpiGpuPlane(const MpiContext& mpi, const AbortFlag* abort, Timeline* timeline,
                         int device, double timeout_seconds, std::unique_ptr<GpuPlane>* out);

}  // namespace kerashvd
