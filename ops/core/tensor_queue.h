// TensorQueue: where framework threads hand collectives to the background thread.
//
// Submit() is called from any thread and wakes the background thread; the background thread
// takes everything submitted so far with TakeAll(), or sleeps in WaitForWork() for at most one
// cycle time when there is nothing to do.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "tensor_entry.h"

namespace kerashvd {

class TensorQueue {
 public:
  void Submit(TensorEntry entry);
  std::deque<TensorEntry> TakeAll();
  // Returns when work was submitted, Wake() was called, or `timeout` passed.
  void WaitForWork(std::chrono::microseconds timeout);
  // Polls, yielding the core between polls, until work was submitted or Wake() was called
  // (returns true; a later WaitForWork then returns at once) or `timeout` passed (false).
  // Takes no lock: it reads `pending_`, which Submit and Wake set under the mutex.
  bool SpinForWork(std::chrono::microseconds timeout);
  void Wake();
  // Number of Submit() calls so far.
  uint64_t submissions();
  // Returns true as soon as a submission newer than `seen` arrives (or Wake() is called),
  // false after `timeout`. Used to cut short the naps of a negotiation waiting for peers.
  bool WaitForSubmissionAfter(uint64_t seen, std::chrono::microseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<TensorEntry> entries_;
  bool woken_ = false;
  uint64_t submissions_ = 0;
  // !entries_.empty() || woken_, readable without the mutex (SpinForWork).
  std::atomic<bool> pending_{false};
};

}  // namespace kerashvd
