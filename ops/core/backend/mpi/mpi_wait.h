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
  // Spin this long (yielding the core between polls) before napping; naps grow from first_nap
  // to max_nap and end early through the idler when local work arrives (the next naps then
  // start again from 10 us). A negative spin means never nap (data transfers, which MPI only
  // progresses while it is called).
  std::chrono::microseconds spin{200};
  std::chrono::microseconds first_nap{10};
  std::chrono::microseconds max_nap{1000};
  // 0: no timeout. Not applied while the AbortFlag carries the peer monitor's suspicion.
  double timeout_seconds = 0;
  const Idler* idler = nullptr;
  // Where the wait adds its polls and naps (optional).
  WaitCounters* counters = nullptr;
};

Status MpiWait(MPI_Request* request, const char* what, const AbortFlag* abort,
               const WaitPolicy& policy, int rank);

}  // namespace kerashvd
