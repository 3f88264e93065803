// AbortFlag: set once, from any thread, when the engine must give up (a peer failed); every
// wait inside a collective checks it, so no rank keeps waiting for a dead peer.
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

 private:
  std::atomic<bool> set_{false};
  mutable std::mutex mutex_;
  Status status_;
};

}  // namespace kerashvd
