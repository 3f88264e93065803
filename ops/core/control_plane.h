// ControlPlane: the few small collectives the negotiation protocol needs, on host memory.
//
// Every call is collective over all ranks and returns Aborted, naming what it waited for,
// when the other ranks do not take part within the peer timeout: a rank that died or hangs
// outside kerashvd turns into an error here instead of a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "status.h"

namespace kerashvd {

// Waits up to the given time while peers are late; returns true when local work arrived,
// so the wait should go back to polling eagerly (the peers are likely close behind).
using Idler = std::function<bool(std::chrono::microseconds)>;
// Whether local work waits on the current negotiation. A wait that nothing here depends on
// (an idle rank answering its peers) must not disturb this rank's computation: it neither
// spins nor polls often (see MpiControlPlane).
using Urgency = std::function<bool()>;

// What the waits of a control plane's calls cost, summed until taken (the timeline shows them
// per cycle): calls waited for, polls of the transport, naps and their total length.
struct WaitCounters {
  int64_t waits = 0;
  int64_t polls = 0;
  int64_t naps = 0;
  std::chrono::microseconds napped{0};
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  void set_idler(Idler idler) { idler_ = std::move(idler); }
  void set_urgency(Urgency urgency) { urgency_ = std::move(urgency); }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place bitwise AND of `count` words across all ranks.
  virtual Status AllreduceBitwiseAnd(uint64_t* words, int count) = 0;
  // In place CombineCarry of a carried message of `count` words across all ranks (carry.h),
  // reduced as one element, so that the MPI library cannot split it.
  virtual Status AllreduceCarry(uint64_t* message, int count) = 0;
  // Rank 0 receives every rank's bytes in rank order (its own included); others get nothing.
  virtual Status GatherToRoot(const std::string& send, std::vector<std::string>* received) = 0;
  // Rank 0's `data` replaces `data` on every other rank.
  virtual Status BroadcastFromRoot(std::string* data) = 0;
  // The counters since the last call (lane thread only).
  WaitCounters TakeWaitCounters() {
    WaitCounters taken = counters_;
    counters_ = WaitCounters();
    return taken;
  }

 protected:
  Idler idler_;
  Urgency urgency_;
  WaitCounters counters_;  // kept by the implementation's waits
};

}  // namespace kerashvd
