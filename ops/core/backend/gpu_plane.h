// GpuPlane: what the engine needs to run collectives on GPU tensors: a communicator on this
// rank's GPU, the backend over it, the memory operations on its stream, and an executor
// joining them. It exists only in builds with a GPU backend (KERASHVD_WITH_NCCL); the
// engine never names NCCL or CUDA, it asks a Group for one (Group::CreateGpuPlane).
//
// Creation is collective over the group: the background thread creates it when it first
// executes a GPU group, which every rank does in the same cycle, in the same order. A failure
// on any rank fails creation on every rank.
#pragma once

#include "../executor.h"

namespace kerashvd {

class GpuPlane {
 public:
  virtual ~GpuPlane() = default;
  virtual Executor* executor() = 0;
  // The CUDA device the plane's communicator is bound to.
  virtual int device() const = 0;
};

// Whether this build has a GPU backend.
bool GpuPlaneBuilt();

}  // namespace kerashvd
