// MpiWait: completes a non-blocking MPI request while watching for peer failure.
//
// Every MPI call of the engine is non-blocking and finished here, so a collective that a dead
// peer will never complete is abandoned as soon as the AbortFlag is set.
#pragma once

#include <mpi.h>

#include <chrono>

#include "../../abort_flag.h"
#include "../../control_plane.h"

namespace kerashvd {

struct WaitPolicy {
  // Spin this long (yielding the core between polls) before napping; naps grow from 10 us to 1 ms and end early through the
  // idler when local work arrives. A negative value means never nap (data transfers, which
  // MPI only progresses while it is called).
  std::chrono::microseconds spin{200};
  double timeout_seconds = 0;   // 0: no timeout
  const Idler* idler = nullptr;
};

Status MpiWait(MPI_Request* request, const char* what, const AbortFlag* abort,
               const WaitPolicy& policy, int rank);

}  // namespace kerashvd
