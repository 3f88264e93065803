// MpiControlPlane: the negotiation's collectives on MPI, non-blocking with a deadline.
//
// Each call starts a non-blocking collective and polls it: a short spin (both ranks are
// usually already there), then sleeps growing from 10 us to 1 ms, so a rank waiting for a
// slower one does not burn a core. The naps end early when this rank gets new work (the
// engine's idler), because then the peers usually arrive within microseconds too. After the
// peer timeout it gives up with Aborted.
//
// A wait that no local work depends on (the engine's Urgency says so: this rank is idle,
// typically still computing its next gradients) skips the spin and naps from kRelaxedFirstNap
// up to kRelaxedMaxNap: every poll there preempts this rank's own compute thread, which is
// the one the peers are waiting for. On 2 ranks sharing 2 cores, naps growing from 10 us in
// such waits cost the computing rank ~100 preemptions a second. Nothing waits for these
// naps: the peers can only be waiting for work this rank has not submitted yet, and a
// submission ends the nap.
#pragma once

#include "../../control_plane.h"
#include "../../abort_flag.h"
#include "mpi_context.h"

namespace kerashvd {

class MpiControlPlane : public ControlPlane {
 public:
  static constexpr std::chrono::microseconds kRelaxedFirstNap{1000};
  static constexpr std::chrono::microseconds kRelaxedMaxNap{10000};

  MpiControlPlane(const MpiContext* mpi, double peer_timeout_seconds, const AbortFlag* abort)
      : mpi_(mpi), timeout_seconds_(peer_timeout_seconds), abort_(abort) {}
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  Status AllreduceBitwiseAnd(uint64_t* words, int count) override;
  Status AllreduceCarry(uint64_t* message, int count) override;
  Status GatherToRoot(const std::string& send, std::vector<std::string>* received) override;
  Status BroadcastFromRoot(std::string* data) override;

 private:
  // `carries_data`: the collective carries a collective's data (AllreduceCarry), which MPI
  // only moves while it is called: with work pending here the wait spins kCarrySpin before
  // it naps, long enough for the data's rounds once every rank is there, short enough that a
  // rank waiting for a late peer does not take the cores it computes on for long.
  static constexpr std::chrono::microseconds kCarrySpin{2000};
  Status Wait(MPI_Request* request, const char* what, bool carries_data = false);
  const MpiContext* mpi_;
  double timeout_seconds_;
  const AbortFlag* abort_;
};

}  // namespace kerashvd
