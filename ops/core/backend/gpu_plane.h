// GpuPlane: what the engine needs to run collectives on GPU tensors: a communicator on this
// rank's GPU, the backend over it, the memory operations on its stream, and an executor
// joining them. It exists only in builds with a GPU backend (KERASHVD_WITH_NCCL); the
// engine never names NCCL or CUDA, it asks CreateGpuPlane.
//
// Creation is collective over the engine's MPI communicator: the background thread creates it
// when it first executes a GPU group, which every rank does in the same cycle, in the same
// order. A failure on any rank fails creation on every rank.
#pragma once

#include <memory>

#include "../abort_flag.h"
#include "../executor.h"
#include "../status.h"
#include "../timeline.h"

namespace kerashvd {

// The communicator a plane is created over (backend/mpi); only named here.
class MpiContext;

class GpuPlane {
 public:
  virtual ~GpuPlane() = default;
  virtual Executor* executor() = 0;
  // The CUDA device the plane's communicator is bound to.
  virtual int device() const = 0;
};

// Whether this build has a GPU backend.
bool GpuPlaneBuilt();

// Collective (see the file comment). `timeout_seconds` bounds each wait for a GPU collective
// (0: unbounded); `abort` is the engine's peer-failure flag.
Status CreateGpuPlane(const MpiContext& mpi, const AbortFlag* abort, Timeline* timeline,
                      int device, double timeout_seconds, std::unique_ptr<GpuPlane>* out);

}  // namespace kerashvd
