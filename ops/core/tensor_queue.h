// TensorQueue: where framework threads hand collectives to the background thread.
//
// Submit() is called from any thread and wakes the background thread; the background thread
// takes everything submitted so far with TakeAll(), or sleeps in WaitForWork() for at most one
// cycle time when there is nothing to do.
#pragma once

#include <chrono>
#include <condition_variable>
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
  void Wake();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<TensorEntry> entries_;
  bool woken_ = false;
};

}  // namespace kerashvd
