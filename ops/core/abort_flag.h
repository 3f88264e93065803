// AbortFlag: set once, from any thread, when the engine must give up (a peer failed); every
// wait inside a collective checks it, so no rank keeps waiting for a dead peer.
//
// It also carries the peer monitor's suspicion: a peer this rank watches has missed its
// heartbeats and the monitor's verdict (which names the peer) is due within the peer timeout.
// A wait with a timeout of its own does not give up while that is so (mpi_wait.h), so that the
// error names the frozen rank rather than "no answer from the other ranks".
#pragma once

#include <atomic>
#include <mutex>

#include "status.h"

namespace kerashvd {

class AbortFlag {
 public:
  void Set(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (set_) return;
    status_ = status;
    set_.store(true, std::memory_order_release);
  }
  bool is_set() const { return set_.load(std::memory_order_acquire); }
  Status status() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  void SetSuspicion(bool some_peer_silent) {
    suspicion_.store(some_peer_silent, std::memory_order_release);
  }
  bool suspicion() const { return suspicion_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> set_{false};
  std::atomic<bool> suspicion_{false};
  mutable std::mutex mutex_;
  Status status_;
};

}  // namespace kerashvd
